"""Issue 12 §2: every path a spec names stays inside the extract's folder, and a spec file is small, plain YAML.

Before the issue, `sibling_text: ../../secret.txt` (and `sibling_files`, `glob` with `..`, or a symlink beside the
extract) registered with exit 0 and put the file's text into every prompt; an absolute path gave an internal error
(NotImplementedError); an alias bomb in `meta_constants` ran for tens of seconds into a raw MemoryError. Each is
now refused with exit 2 and a message naming the option, before anything is read."""

from __future__ import annotations

import csv
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Cli

SECRET = "Outside-the-extract canary 5521"


def _spec(loader_options: dict[str, Any], *, benchmark: str = "paths_probe", extra: str = "") -> str:
    spec = {
        "id": benchmark,
        "name": "Paths probe",
        "description": "A spec naming files beside the extract.",
        "subcategory": "Care Coordination and Planning",
        "input_format": "private_table",
        "loader_options": {"fields": {"context": "note"}, "label_column": "label", **loader_options},
        "output_type": "yes_no_maybe",
        "labels": ["yes", "no"],
        "metric": "exact_match",
        "max_tokens": 8,
        "prompt": {"template": "{context}\n{schema}\nAnswer yes or no.\nAnswer:"},
        "source": "test",
        "license": "synthetic",
    }
    return yaml.safe_dump(spec, sort_keys=False) + extra


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """tmp/outside/secret.txt (not to be read) and tmp/site/extract/{notes.csv, schema.txt}."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text(SECRET, encoding="utf-8")
    secret_csv = outside / "more.csv"
    secret_csv.write_text(f"note,label\n{SECRET},yes\n", encoding="utf-8")
    folder = tmp_path / "site" / "extract"
    folder.mkdir(parents=True)
    data = folder / "notes.csv"
    with data.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["note", "label"])
        writer.writerows([["Routine visit", "no"], ["Follow-up needed", "yes"]])
    (folder / "schema.txt").write_text("the schema", encoding="utf-8")
    return {"secret": secret, "secret_csv": secret_csv, "folder": folder, "data": data, "tmp": tmp_path}


def _register(cli: Cli, layout: dict[str, Path], text: str, data: Path | None = None) -> Any:
    spec = layout["tmp"] / "paths_probe.yaml"
    spec.write_text(text, encoding="utf-8")
    return cli("datasets", "register", "paths_probe", str(data or layout["data"]), "--spec", str(spec))


def _refused(result: Any, *names: str) -> None:
    assert result.code == 2, (result.code, result.stderr)
    assert "internal error" not in result.stderr
    assert SECRET not in result.stderr + result.stdout
    for name in names:
        assert name in result.stderr, result.stderr


def test_sibling_text_climbing_out_of_the_extract_is_refused(home_cli: Cli, layout: dict[str, Path]) -> None:
    result = _register(home_cli, layout, _spec({"sibling_text": {"schema": "../../outside/secret.txt"}}))
    _refused(result, "sibling_text", "..")


def test_sibling_text_climbing_to_etc_hostname_is_refused(home_cli: Cli, layout: dict[str, Path]) -> None:
    depth = len(layout["folder"].resolve().parts) - 1
    pattern = "../" * (depth + 2) + "etc/hostname"
    result = _register(home_cli, layout, _spec({"sibling_text": {"schema": pattern}}))
    _refused(result, "sibling_text")


def test_sibling_text_absolute_path_is_refused_without_an_internal_error(
    home_cli: Cli, layout: dict[str, Path]
) -> None:
    result = _register(home_cli, layout, _spec({"sibling_text": {"schema": str(layout["secret"])}}))
    _refused(result, "sibling_text", "absolute path")


def test_sibling_text_glob_dict_form_is_confined_too(home_cli: Cli, layout: dict[str, Path]) -> None:
    result = _register(home_cli, layout, _spec({"sibling_text": {"schema": {"glob": "../../outside/*.txt"}}}))
    _refused(result, "sibling_text")


def test_sibling_text_through_a_symlink_out_of_the_folder_is_refused(
    home_cli: Cli, layout: dict[str, Path]
) -> None:
    (layout["folder"] / "schema.txt").unlink()
    (layout["folder"] / "schema.txt").symlink_to(layout["secret"])
    result = _register(home_cli, layout, _spec({"sibling_text": {"schema": "schema.txt"}}))
    _refused(result, "sibling_text", "resolves outside")


def test_sibling_files_climbing_out_is_refused(home_cli: Cli, layout: dict[str, Path]) -> None:
    text = _spec({"sibling_files": {"db_path": "../../outside/secret.txt"},
                  "sibling_text": {"schema": "schema.txt"}})
    result = _register(home_cli, layout, text)
    _refused(result, "sibling_files")


def test_sibling_files_absolute_is_refused(home_cli: Cli, layout: dict[str, Path]) -> None:
    text = _spec({"sibling_files": {"db_path": str(layout["secret"])}, "sibling_text": {"schema": "schema.txt"}})
    result = _register(home_cli, layout, text)
    _refused(result, "sibling_files", "absolute path")


def test_glob_climbing_out_of_the_folder_is_refused(home_cli: Cli, layout: dict[str, Path]) -> None:
    text = _spec({"glob": "../../outside/*.csv", "sibling_text": {"schema": "schema.txt"}})
    result = _register(home_cli, layout, text, data=layout["folder"])
    _refused(result, "glob")


def test_glob_absolute_is_refused(home_cli: Cli, layout: dict[str, Path]) -> None:
    text = _spec({"glob": str(layout["secret_csv"]), "sibling_text": {"schema": "schema.txt"}})
    result = _register(home_cli, layout, text, data=layout["folder"])
    _refused(result, "glob", "absolute path")


def test_glob_matching_a_symlink_out_of_the_folder_is_refused(home_cli: Cli, layout: dict[str, Path]) -> None:
    (layout["folder"] / "zz.csv").symlink_to(layout["secret_csv"])
    text = _spec({"glob": "*.csv", "sibling_text": {"schema": "schema.txt"}})
    result = _register(home_cli, layout, text, data=layout["folder"])
    _refused(result, "glob", "resolves outside")


def test_names_inside_the_folder_still_register(home_cli: Cli, layout: dict[str, Path]) -> None:
    (layout["folder"] / "sub").mkdir()
    (layout["folder"] / "sub" / "schema.txt").write_text("nested schema", encoding="utf-8")
    (layout["folder"] / "inner.txt").symlink_to(layout["folder"] / "schema.txt")  # a symlink that stays inside
    text = _spec({"glob": "notes.csv", "sibling_text": {"schema": "sub/schema.txt"},
                  "sibling_files": {"db_path": "inner.txt"}})
    result = _register(home_cli, layout, text, data=layout["folder"])
    assert result.code == 0, result.stderr


def test_medalign_ehr_dir_and_line_pairs_globs_are_confined(tmp_path: Path) -> None:
    from medhelm_local.benchmarks.spec import BenchmarkSpec
    from medhelm_local.errors import BadInputError
    from medhelm_local.loaders.base import load_dataset

    folder = tmp_path / "extract"
    folder.mkdir()
    (folder / "instructions.tsv").write_text("instruction_id\tquestion\tclinician_response\tfilename\n",
                                             encoding="utf-8")
    (folder / "a_findings.txt").write_text("x\n", encoding="utf-8")
    base = {"id": "p", "name": "p", "description": "p", "category": "Clinical Note Generation",
            "subcategory": "Documenting Patient Visits", "access": "private", "curation": "new",
            "output_type": "free_text", "metric": "exact_match", "max_tokens": 8, "prompt": {"template": "{question}"},
            "source": "t", "license": "t"}
    for input_format, options, option in (
        ("medalign_tsv", {"ehr_dir": "../../etc"}, "ehr_dir"),
        ("medalign_tsv", {"ehr_dir": "/etc"}, "ehr_dir"),
        ("line_pairs", {"source_glob": "../*findings*"}, "source_glob"),
        ("line_pairs", {"target_glob": "/etc/*"}, "target_glob"),
    ):
        spec = BenchmarkSpec.model_validate({**base, "input_format": input_format, "loader_options": options})
        with pytest.raises(BadInputError, match=option):
            load_dataset(spec, folder)


# Spec files: size cap and YAML aliases.


def test_yaml_alias_in_a_spec_is_refused(home_cli: Cli, layout: dict[str, Path]) -> None:
    text = _spec({"sibling_text": {"schema": "schema.txt"}, "meta_constants": {"site": "north"}})
    text = text.replace("name: Paths probe", "name: &n Paths probe").replace("site: north", "site: *n")
    result = _register(home_cli, layout, text)
    _refused(result, "alias")


def _alias_bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(f"    {line}" for line in lines)


def test_an_alias_bomb_in_meta_constants_is_refused_fast_and_small(
    cli: Cli, layout: dict[str, Path]
) -> None:
    """9 levels of 9 aliases expand to 387 million strings; run in a child limited to 3 GiB of address space so the
    code before the issue fails (MemoryError, exit 1) instead of swapping the machine."""
    assert cli("init").code == 0
    text = _spec({"sibling_text": {"schema": "schema.txt"}}).replace(
        "  label_column: label\n", "  label_column: label\n  meta_constants:\n" + _alias_bomb() + "\n")
    spec = layout["tmp"] / "bomb.yaml"
    spec.write_text(text, encoding="utf-8")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "medhelm_local.cli", "--home", str(cli.home), "datasets", "register", "paths_probe",
         str(layout["data"]), "--spec", str(spec)],
        capture_output=True, text=True, timeout=60, env=cli.env, preexec_fn=limit,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "alias" in proc.stderr
    assert elapsed < 30, f"refusing the alias bomb took {elapsed:.1f} s"


def test_a_spec_over_the_size_cap_is_refused(home_cli: Cli, layout: dict[str, Path]) -> None:
    from medhelm_local.benchmarks.registry import MAX_SPEC_BYTES

    text = _spec({"sibling_text": {"schema": "schema.txt"}}).replace(
        "description: A spec naming files beside the extract.",
        "description: " + "padding " * (MAX_SPEC_BYTES // 8 + 16))
    result = _register(home_cli, layout, text)
    _refused(result, "KiB")


# The appliance's own folders are never an extract, nor beside one.


def _key_spec(loader_options: dict[str, Any]) -> str:
    return _spec(loader_options).replace("{schema}\n", "")


def test_the_keys_folder_is_not_an_extract(home_cli: Cli, layout: dict[str, Path]) -> None:
    keys = home_cli.home / "keys"
    key = (keys / "store-data.key").read_text(encoding="utf-8").strip()
    text = _key_spec({"format": "csv", "glob": "store-data.key"})
    result = _register(home_cli, layout, text, data=keys)
    assert result.code == 2, result.stderr
    assert key not in result.stderr + result.stdout, "the store's data key was printed"
    assert "keys folder" in result.stderr


def test_a_sibling_text_reaching_the_keys_folder_from_the_home_is_refused(
    home_cli: Cli, layout: dict[str, Path]
) -> None:
    home = home_cli.home
    extracts = home / "extracts"
    extracts.mkdir()
    (extracts / "notes.csv").write_bytes(layout["data"].read_bytes())
    key = (home / "keys" / "store-data.key").read_text(encoding="utf-8").strip()
    text = _spec({"glob": "extracts/notes.csv", "sibling_text": {"schema": "keys/store-data.key"}})
    result = _register(home_cli, layout, text, data=home)
    assert result.code == 2, result.stderr
    assert key not in result.stderr + result.stdout
    assert "keys folder" in result.stderr
    listed = home_cli("datasets", "list", "--json")
    assert "paths_probe" not in listed.stdout


def _with_model_key_file(cli: Cli, key_file: Path) -> None:
    from medhelm_local.home import Home, ModelEndpoint
    from medhelm_local.home.config import ApplianceConfig

    home = Home(cli.home)
    data = home.config.model_dump()
    data["models"].append(ModelEndpoint(name="vllm-model", base_urls=["http://127.0.0.1:8000/v1"],
                                        api_key_file=key_file).model_dump())
    home.save_config(ApplianceConfig.model_validate(data))


def test_a_models_api_key_file_is_not_read_into_a_prompt(home_cli: Cli, layout: dict[str, Path]) -> None:
    """The model servers' key (the chart mounts it at /etc/medhelm/vllm/api-key, outside the appliance's keys
    folder) registered with exit 0 as a sibling_text of an extract whose folder held it (`/`), and went into every
    prompt, which an informatics user reads in the console."""
    key_file = layout["secret"]
    _with_model_key_file(home_cli, key_file)
    folder = layout["tmp"]  # holds outside/ (the key) and site/extract/notes.csv
    text = _spec({"glob": "site/extract/notes.csv", "sibling_text": {"schema": "outside/secret.txt"}})
    result = _register(home_cli, layout, text, data=folder)
    assert result.code == 2, result.stderr
    assert SECRET not in result.stderr + result.stdout
    assert "API key file of model vllm-model" in result.stderr
    assert "paths_probe" not in home_cli("datasets", "list", "--json").stdout
    # The same file as the extract itself, through a symlink.
    (layout["folder"] / "key.csv").symlink_to(key_file)
    linked = _register(home_cli, layout, _spec({}), data=layout["folder"] / "key.csv")
    assert linked.code == 2 and "API key file of model vllm-model" in linked.stderr


def test_the_environment_under_proc_is_not_read_into_a_prompt(home_cli: Cli, layout: dict[str, Path]) -> None:
    """A model's api_key_env is in the CLI's environment: `sibling_text: proc/self/environ` beside an extract
    whose folder is `/` registered it with exit 0."""
    home_cli.env["VLLM_API_KEY"] = SECRET
    data = str(layout["data"].resolve().relative_to("/"))
    result = _register(home_cli, layout, _spec({"glob": data, "sibling_text": {"schema": "proc/self/environ"}}),
                       data=Path("/"))
    assert result.code == 2, result.stderr
    assert SECRET not in result.stderr + result.stdout
    assert "/proc" in result.stderr
    assert "paths_probe" not in home_cli("datasets", "list", "--json").stdout


def test_a_deeply_nested_spec_is_refused_without_an_internal_error(home_cli: Cli, layout: dict[str, Path]) -> None:
    text = _spec({"sibling_text": {"schema": "schema.txt"}}).replace(
        "  label_column: label\n", "  label_column: label\n  meta_constants:\n    deep: " + "[" * 50_000 + "]" * 50_000
        + "\n")
    result = _register(home_cli, layout, text)
    _refused(result, "nests deeper than")


def test_a_meds_file_symlinked_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from medhelm_local.errors import BadInputError
    from medhelm_local.loaders.base import load_dataset

    root = tmp_path / "meds"
    for sub in ("data", "metadata", "labels"):
        (root / sub).mkdir(parents=True)
    outside = tmp_path / "other_study.parquet"
    pq.write_table(pa.table({"subject_id": pa.array([1], pa.int64()), "time": pa.array([None], pa.timestamp("us")),
                             "code": ["SECRET/1"], "numeric_value": pa.array([None], pa.float32())}), outside)
    (root / "data" / "0.parquet").symlink_to(outside)
    pq.write_table(pa.table({"subject_id": pa.array([1], pa.int64()), "split": ["held_out"]}),
                   root / "metadata" / "subject_splits.parquet")
    pq.write_table(pa.table({"subject_id": pa.array([1], pa.int64()),
                             "prediction_time": pa.array([None], pa.timestamp("us")), "boolean_value": [True]}),
                   root / "labels" / "task.parquet")
    from medhelm_local.benchmarks.registry import shipped_spec

    with pytest.raises(BadInputError, match="resolves outside"):
        load_dataset(shipped_spec("ehrshot"), root)


def test_a_fixed_name_file_symlinked_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    """Loaders that read files by fixed names (PubMedQA's ori_pqal.json, DischargeMe's CSVs, MTSamples' reports) are
    held to the same rule: what a registration reads resolves inside the extract's folder."""
    from medhelm_local.benchmarks.registry import shipped_spec
    from medhelm_local.errors import BadInputError
    from medhelm_local.loaders.base import load_dataset

    outside = tmp_path / "other" / "ori_pqal.json"
    outside.parent.mkdir()
    outside.write_text('{"1": {"QUESTION": "q?", "CONTEXTS": ["c"], "final_decision": "yes"}}', encoding="utf-8")
    folder = tmp_path / "pubmedqa"
    folder.mkdir()
    (folder / "ori_pqal.json").symlink_to(outside)
    with pytest.raises(BadInputError, match="resolves outside"):
        load_dataset(shipped_spec("pubmedqa"), folder)
    reports = tmp_path / "mtsamples"
    reports.mkdir()
    report = tmp_path / "other" / "report.txt"
    report.write_text("HISTORY OF PRESENT ILLNESS: x\n\nASSESSMENT: y\n", encoding="utf-8")
    (reports / "a.txt").symlink_to(report)
    with pytest.raises(BadInputError, match="resolves outside"):
        load_dataset(shipped_spec("mtsamples"), reports)
