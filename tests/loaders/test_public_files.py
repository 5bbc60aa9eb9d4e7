"""The real public benchmark files in ../shared/data/public register with the expected counts and ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.loaders import load_dataset
from medhelm_local.prompts import build_request
from tests.conftest import Cli

EXPECTED = {
    "pubmedqa": ("pubmedqa", 1000),
    "medcalc_bench": ("medcalc_bench", 1047),
    "aci_bench": ("aci_bench", 120),
    "medec": ("medec", 597),
    "ehrsql": ("ehrsql", 1792),
    "medqa": ("medqa", 1273),
    "medhallu": ("medhallu", 2000),
}


@pytest.mark.parametrize("benchmark", sorted(EXPECTED))
def test_public_file_counts_and_prompts(public_data: Path, benchmark: str) -> None:
    folder, count = EXPECTED[benchmark]
    spec = shipped_spec(benchmark)
    result = load_dataset(spec, public_data / folder)
    assert len(result.instances) == count
    assert len({i.id for i in result.instances}) == count
    assert all(i.benchmark == benchmark for i in result.instances)
    for instance in result.instances[:25]:
        request = build_request(spec, instance)
        assert request.messages[-1].content.strip()
        if spec.closed_ended and spec.labels:
            assert instance.label in spec.labels
    again = load_dataset(spec, public_data / folder)
    assert [i.id for i in again.instances] == [i.id for i in result.instances]
    assert again.fingerprint == result.fingerprint


def test_pubmedqa_ids_are_pmids(public_data: Path) -> None:
    result = load_dataset(shipped_spec("pubmedqa"), public_data / "pubmedqa")
    assert result.instances[0].id == "21645374"
    assert all(i.id.isdigit() for i in result.instances)


def test_medcalc_row_numbers_limits_and_categories(public_data: Path) -> None:
    result = load_dataset(shipped_spec("medcalc_bench"), public_data / "medcalc_bench")
    by_id = {i.id: i for i in result.instances}
    first = by_id["1"]
    assert first.references == ["25.238"]
    assert first.meta["lower_limit"] == pytest.approx(23.9761)
    assert first.meta["upper_limit"] == pytest.approx(26.4999)
    assert first.meta["category"] == "lab"
    categories = {i.meta["category"] for i in result.instances}
    assert {"lab", "risk", "severity", "diagnosis", "date", "dosage", "physical"} <= categories
    dates = [i for i in result.instances if i.meta["category"] == "date" and "/" in i.references[0]]
    assert dates and all(isinstance(i.meta["lower_limit"], str) for i in dates)
    assert sorted(int(i) for i in by_id) == list(range(1, 1048))


def test_aci_bench_folder_of_three_files(public_data: Path) -> None:
    result = load_dataset(shipped_spec("aci_bench"), public_data / "aci_bench")
    assert len(result.files) == 3
    instance = next(i for i in result.instances if i.id == "D2N168-virtassist")
    assert instance.fields["conversation"].startswith("[doctor]")
    assert instance.references[0].startswith("CHIEF COMPLAINT")


def test_medec_text_ids_flags_and_blank_rows(public_data: Path) -> None:
    result = load_dataset(shipped_spec("medec"), public_data / "medec")
    assert result.skipped["blank row"] > 0
    first = next(i for i in result.instances if i.id == "ms-test-0")
    assert first.label == "1"
    assert first.meta["error_flag"] == 1
    assert first.meta["error_sentence_id"] == 10
    assert first.references and "Schistosoma" in first.references[0]
    correct = next(i for i in result.instances if i.id == "ms-test-1")
    assert correct.label == "0" and correct.meta["error_sentence_id"] == -1 and correct.references == []
    assert correct.meta["corrected_sentence"] is None and correct.meta["error_type"] is None


def test_ehrsql_ids_impossible_flag_and_database(public_data: Path) -> None:
    result = load_dataset(shipped_spec("ehrsql"), public_data / "ehrsql")
    impossible = [i for i in result.instances if i.meta["is_impossible"]]
    assert len(impossible) == 588
    assert all(i.references == [] for i in impossible)
    answerable = [i for i in result.instances if not i.meta["is_impossible"]]
    assert len(answerable) == 1204 and all(i.references[0].lower().startswith("select") for i in answerable)
    db = Path(result.instances[0].meta["db_path"])
    assert db.name == "eicu.sqlite" and db.is_file()
    assert "CREATE TABLE patient" in result.instances[0].fields["schema"]
    assert result.instances[0].id == "ba95373f025351f7de88a95a"
    assert {f.name for f in result.files} == {"test.json", "eicu.sqlite", "eicu.sql"}


def test_medqa_options_and_answer_letters(public_data: Path) -> None:
    result = load_dataset(shipped_spec("medqa"), public_data / "medqa" / "phrases_no_exclude_test.jsonl")
    first = result.instances[0]
    assert first.id == "0" and first.label == "B" and first.references == ["B"]
    assert first.fields["options"].splitlines()[0].startswith("A. Disclose the error")


def test_medhallu_parquet_gives_the_same_instances(public_data: Path, tmp_path: Path) -> None:
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    source = public_data / "medhallu" / "medhallu_pqa_labeled.jsonl"
    pq.write_table(pajson.read_json(source), tmp_path / "pqa_labeled.parquet")
    from_parquet = load_dataset(shipped_spec("medhallu"), tmp_path / "pqa_labeled.parquet")
    from_jsonl = load_dataset(shipped_spec("medhallu"), source)
    assert len(from_parquet.instances) == 2000
    assert [i.id for i in from_parquet.instances] == [i.id for i in from_jsonl.instances]
    assert from_parquet.instances[5].fields == from_jsonl.instances[5].fields


def test_medhallu_two_instances_per_row(public_data: Path) -> None:
    result = load_dataset(shipped_spec("medhallu"), public_data / "medhallu")
    ids = {i.id: i for i in result.instances}
    truth, fake = ids["0:ground_truth"], ids["0:hallucinated"]
    assert truth.label == "no" and fake.label == "yes"
    assert truth.fields["question"] == fake.fields["question"]
    assert truth.fields["answer"] != fake.fields["answer"]
    assert sum(1 for i in result.instances if i.label == "yes") == 1000


def test_registration_says_what_it_skipped_in_words(public_data: Path, home_cli: Cli) -> None:
    """`datasets register` printed the skipped rows as a Python dict (`{'blank row': 328}`)."""
    result = home_cli("datasets", "register", "medec", str(public_data / "medec"))
    assert result.code == 0, result.stderr
    assert "skipped 328 (blank row)" in result.stdout + result.stderr
    assert "{" not in result.stdout + result.stderr
