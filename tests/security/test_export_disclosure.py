"""Issue 12 §4: disclosure that cannot be undone. Each test is an insider's attempt to get PHI, or a small
count, out through an export that the code before issue 12 let pass."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import yaml

from medhelm_local.export.aggregates import RawCell, publish_cell
from medhelm_local.export.policy import ExportPolicy
from medhelm_local.home import ModelEndpoint
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.compliance.conftest import add_models, approve_args, request_export
from tests.security.exportkit import evaluate, failed, notes, policy_env, site

__all__ = ["policy_env"]  # the autouse fixture that restores $MEDHELM_EXPORT_POLICY
PATIENT = "Quillonby"


def _patient_note(i: int) -> str:
    return f"Patient Ada {PATIENT}, MRN 7730019942, visit {i}: stable."


def _aggregates(cli_home: Path, request: dict[str, object]) -> dict[str, object]:
    path = cli_home / "exports" / str(request["request_id"]) / "bundle" / "aggregates.json"
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def test_a_run_id_carrying_an_mrn_never_names_a_run(tmp_path: Path) -> None:
    """Run ids were exempt from the pattern scan as "system" values; the scan then blocked the export of a run so
    named, but its trail already held the number. Such an id is now refused before the run is created."""
    cli = site(tmp_path)
    add_models(cli.home, [ModelEndpoint(name="eval-model", base_urls=["http://127.0.0.1:9/v1"])])  # never reached
    assert cli("datasets", "register", "hospice_referral", str(notes(tmp_path / "notes.csv", 24))).code == 0
    for run_id in ("MRN-7730019942", "mrn_7730019942", "7730019942"):
        refused = cli("run", "--model", "eval-model", "--benchmarks", "hospice_referral", "--run-id", run_id)
        assert refused.code == 2 and "record number" in refused.stderr, (run_id, refused.stderr)
        assert "7730019942" not in refused.stderr + (cli.home / "audit" / "audit.jsonl").read_text()


def test_a_separator_joined_identifier_in_a_model_name_blocks_the_export(tmp_path: Path) -> None:
    """`mrn_7730019942` defeated the `\\b` patterns (`_` is a word character)."""
    cli = site(tmp_path)
    request = request_export(cli, evaluate(cli, notes(tmp_path / "notes.csv", 24), model="mrn_7730019942"))
    assert request["status"] == "blocked" and "phi_patterns" in failed(request)


def test_a_request_blocked_by_a_model_name_says_what_the_requester_can_do(tmp_path: Path) -> None:
    """A model named like a word of the extracts (here a patient's surname; the embedded model's
    `smollm2-135m-embedded` shares `embedded` with PubMedQA's "Paraffin-embedded") blocked the request with
    "name or identifier seen in a registered extract" at `$.runs[0].model` and nothing more: the requester was not
    told the request can only be denied, nor that a finished run keeps its names."""
    from tests.compliance.conftest import REQUESTER, signers

    cli = site(tmp_path)
    run_id = evaluate(cli, notes(tmp_path / "notes.csv", 24, note=_patient_note), model=f"{PATIENT.lower()}-7b")
    result = cli("export", "request", "--runs", run_id, "--key", str(signers(cli.home)[REQUESTER].private))
    assert result.code == 1, result.stderr
    assert "extract_terms: aggregates.json $.runs[0].model: name or identifier seen in a registered extract" in (
        result.stdout)
    request_id = json.loads(cli("export", "list", "--json").stdout)[-1]["request_id"]
    assert (f"blocked: it can only be denied (`medhelm-local export deny {request_id}`); fix what the failing "
            "checks name, then request again") in result.stdout
    assert "  extract_terms: a word or identifier of the runs' extracts is in a string at the places above" in (
        result.stdout)
    assert "a finished run keeps its names: request a run made under others" in result.stdout
    assert "phi_patterns: a string" not in result.stdout  # only the checks that failed
    assert PATIENT not in result.stdout + result.stderr


def test_the_manifest_names_are_scanned_and_the_free_text_actor_never_enters_it(tmp_path: Path) -> None:
    """requested_by was the free-text --actor, signed into the manifest unscanned. Now it is the requester's
    name in the policy, and it is scanned like everything else that leaves. (Free text is no longer an actor at
    all: tests/security/test_actor_identity.py.)"""
    cli = site(tmp_path)
    run_id = evaluate(cli, notes(tmp_path / "notes.csv", 24, note=_patient_note))
    refused = cli("--actor", "MRN 7730019942", "export", "request", "--runs", run_id, *approve_args(cli.home,
                  "alice-informatics"), "--json")
    assert refused.code == 2 and "7730019942" not in refused.stderr + refused.stdout
    actor = cli("--actor", "jdoe@hospital.example.org", "export", "request", "--runs", run_id,
                *approve_args(cli.home, "alice-informatics"), "--json")
    request = json.loads(actor.stdout)
    bundle = cli.home / "exports" / request["request_id"] / "bundle"
    assert "jdoe" not in (bundle / "manifest.json").read_text()
    # A requester whose policy name is a patient's name seen in the extract blocks the export.
    from tests.compliance.conftest import REQUESTER, signers, write_policy

    people = signers(cli.home)
    write_policy(cli.home, approval={"requesters": [{"name": PATIENT, "key": people[REQUESTER].public}],
                                     "approvers": [{"name": "carol", "key": people["carol-compliance"].public}]})
    named = request_export(cli, run_id)
    assert named["status"] == "blocked"
    assert {(f["file"], f["location"]) for f in failed(named)["extract_terms"]} == {("manifest.json",
                                                                                     "$.requested_by")}


def test_the_appliance_name_in_the_manifest_is_scanned(tmp_path: Path) -> None:
    from medhelm_local.home import Home
    from medhelm_local.home.config import ApplianceConfig

    cli = site(tmp_path)
    run_id = evaluate(cli, notes(tmp_path / "notes.csv", 24))
    home = Home(cli.home)
    home.save_config(ApplianceConfig.model_validate({**home.config.model_dump(), "appliance_name": "mrn_7730019942"}))
    request = request_export(cli, run_id)
    assert request["status"] == "blocked"
    assert {(f["file"], f["location"]) for f in failed(request)["phi_patterns"]} == {("manifest.json", "$.appliance")}


def test_spec_text_does_not_whitelist_extract_terms(tmp_path: Path) -> None:
    """A custom spec's description naming the patient made the name 'vocabulary', so a model named after the
    patient passed the extract-term scan."""
    cli = site(tmp_path)
    spec = yaml.safe_load((Path(__file__).parents[2] / "medhelm_local" / "data" / "samples" /
                           "followup_needed.yaml").read_text())
    spec["description"] = f"Follow-up decisions for {PATIENT} and colleagues."
    spec["name"] = f"{PATIENT} Follow-up"
    spec_path = tmp_path / "followup_needed.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    extract = tmp_path / "followup.csv"
    rows = ["note_id,note_text,question,followup"] + [
        f'{i},"Discharge of Ada {PATIENT}, day {i}.",Does the patient need follow-up?,{"yes" if i % 2 else "no"}'
        for i in range(24)]
    extract.write_text("\n".join(rows) + "\n")
    run_id = evaluate(cli, extract, model=f"{PATIENT.lower()}-7b", spec=spec_path, benchmark="followup_needed")
    request = request_export(cli, run_id)
    assert request["status"] == "blocked" and "extract_terms" in failed(request)


def test_a_name_written_in_capitals_or_hyphenated_in_the_extract_is_an_extract_term(tmp_path: Path) -> None:
    """Only Title-case words were terms: a patient written as EHR systems print names (`QUILLONBY, ADA`), or with
    a double-barrelled or CamelCase surname (`Ada Quillonby-Marsh`, `McQuillonby`), gave a ready request for a
    model named after them."""
    cli = site(tmp_path)
    cases = [(lambda i: f"Patient {PATIENT.upper()}, ADA seen on visit {i}: stable.", f"{PATIENT.lower()}-7b"),
             (lambda i: f"Patient Ada {PATIENT}-Marsh, visit {i}: stable.", "marsh-7b"),
             (lambda i: f"Patient Ada Mc{PATIENT}, visit {i}: stable.", f"mc{PATIENT.lower()}-7b")]
    for i, (note, model) in enumerate(cases):
        request = request_export(cli, evaluate(cli, notes(tmp_path / f"notes-{i}.csv", 24, note=note), model=model))
        assert request["status"] == "blocked", model
        assert {(f["file"], f["location"]) for f in failed(request)["extract_terms"]} >= {
            ("aggregates.json", "$.runs[0].model")}, model


def test_the_appliances_own_vocabulary_is_never_an_extract_term(tmp_path: Path) -> None:
    """Notes that happen to use words of the bundle's schema and fixed text (Min, Cell, Size, Score, Model,
    Notes, Leaderboard) do not block it: `min_cell_size` was split into words and matched against them."""
    cli = site(tmp_path)
    note = "Min Cell Size Score Model Notes Leaderboard Request Generated Benchmark Category: visit {}."
    request = request_export(cli, evaluate(cli, notes(tmp_path / "notes.csv", 24, note=note.format)))
    assert request["status"] == "ready", failed(request)


def _cell(score: float, n_scored: int, n_failed: int = 0) -> RawCell:
    return RawCell(run_id="run-x", model="m", benchmark="b", category="Cat", metric="exact_match", score=score,
                   n_scored=n_scored, n_failed=n_failed, n_total=n_scored + n_failed, created_at=datetime(2026, 1, 1))


def test_a_score_that_implies_a_small_count_is_suppressed() -> None:
    policy = ExportPolicy()
    low = publish_cell(_cell(2 / 15, 15), policy)  # 0.133 of 15 reveals 2 of 15
    assert low.score is None and "score:implied_count" in low.suppressed and low.n_total == 15
    high = publish_cell(_cell(13 / 15, 15), policy)  # 2 of 15 wrong: n - k is the small cell
    assert high.score is None and "score:implied_count" in high.suppressed
    assert publish_cell(_cell(11 / 22, 22), policy).score == 0.5
    assert publish_cell(_cell(1.0, 15), policy).score == 1.0  # 15 of 15 and 0 of 15: no small cell
    jury = _cell(0.6, 15).model_copy(update={"proportion": False})  # a mean of ratings: no count to reveal
    assert publish_cell(jury, policy).score == 0.6


def test_a_suppressed_failure_count_is_not_undone_by_score_times_n_total() -> None:
    """3 failures of 43: n_failed and n_scored were withheld, but score 0.5 was published; 0.5 x n is whole
    for n = 40 only among 33..42, so n_scored = 40 and n_failed = 3 follow."""
    cell = publish_cell(_cell(0.5, 40, n_failed=3), ExportPolicy())
    assert cell.n_failed is None and cell.n_scored is None and cell.score is None
    assert "score:complementary" in cell.suppressed


def test_small_counts_never_leave_end_to_end(tmp_path: Path) -> None:
    cli = site(tmp_path)
    run_id = evaluate(cli, notes(tmp_path / "notes.csv", 15), responder=lambda _m: "B")  # 7 of 15 right
    request = request_export(cli, run_id)
    assert request["status"] == "ready", failed(request)
    cell = _aggregates(cli.home, request)["cells"][0]  # type: ignore[index]
    assert cell["score"] is None and "score:implied_count" in cell["suppressed"] and cell["n_total"] == 15
    bundle = cli.home / "exports" / str(request["request_id"]) / "bundle"
    assert not any("0.467" in p.read_text() for p in bundle.iterdir() if p.suffix in (".json", ".csv", ".html"))


def test_a_score_does_not_give_back_the_count_that_rounding_hides_end_to_end(tmp_path: Path) -> None:
    """17 of 33 right is 0.515 at 3 decimals: beside n = 35 (rounded to 5), of the n from 33 to 37 only 33 gives
    0.515, so the score would undo the rounding. Published to one decimal, any of them fits."""
    cli = site(tmp_path, rounding={"score_decimals": 3, "cost_decimals": 2, "count_multiple": 5})
    run_id = evaluate(cli, notes(tmp_path / "notes.csv", 33))
    request = request_export(cli, run_id)
    assert request["status"] == "ready", failed(request)
    cell = _aggregates(cli.home, request)["cells"][0]  # type: ignore[index]
    assert (cell["score"], cell["score_decimals"], cell["n_scored"]) == (0.5, 1, 35)
    assert "score:coarsened" in cell["suppressed"] and cell["ci_low"] is None
    bundle = cli.home / "exports" / str(request["request_id"]) / "bundle"
    assert not any("0.515" in p.read_text() for p in bundle.iterdir() if p.suffix in (".json", ".csv", ".html"))
    out = tmp_path / "outbox"
    assert cli("export", "approve", str(request["request_id"]), *approve_args(cli.home), "--out", str(out)).code == 0
    assert cli("export", "verify", str(out / str(request["request_id"]))).code == 0


def test_differencing_across_exports_is_refused(tmp_path: Path) -> None:
    """Export 15 of 30, add one patient, export 16 of 31: the new patient's label is the difference."""
    cli = site(tmp_path)
    first = request_export(cli, evaluate(cli, notes(tmp_path / "v1.csv", 30)))
    assert first["status"] == "ready", failed(first)
    assert cli("export", "approve", str(first["request_id"]), *approve_args(cli.home)).code == 0
    again = request_export(cli, str(first["runs"][0]))  # the same cells again: nothing new is revealed
    assert again["status"] == "ready", failed(again)

    second_run = evaluate(cli, notes(tmp_path / "v2.csv", 31))
    second = request_export(cli, second_run)
    assert second["status"] == "blocked" and set(failed(second)) == {"differencing"}
    finding = failed(second)["differencing"][0]
    assert finding["location"] == "$.cells[0]" and str(first["request_id"]) in finding["rule"]
    # Another model on the 31 patients is no difference of a released cell.
    other = request_export(cli, evaluate(cli, notes(tmp_path / "v2.csv", 31), model="other-model"))
    assert other["status"] == "ready", failed(other)
    # Both cells in one export are refused as well (the difference is inside the export).
    both = request_export(cli, str(first["runs"][0]), second_run)
    assert "differencing" in failed(both)


def test_approval_re_runs_differencing_against_what_was_released_since(tmp_path: Path) -> None:
    """Two requests made before either was approved: once the first is released, the second no longer passes
    the checks it passed when requested, and its approval is refused."""
    cli = site(tmp_path)
    first = request_export(cli, evaluate(cli, notes(tmp_path / "v1.csv", 30)))
    second = request_export(cli, evaluate(cli, notes(tmp_path / "v2.csv", 31)))
    assert first["status"] == second["status"] == "ready"
    assert cli("export", "approve", str(first["request_id"]), *approve_args(cli.home)).code == 0
    refused = cli("export", "approve", str(second["request_id"]), *approve_args(cli.home))
    assert refused.code == 1 and "differencing" in refused.stderr


def test_a_micro_f1_score_that_implies_a_small_count_is_suppressed(tmp_path: Path) -> None:
    """A custom spec scored by micro_f1 (one label per instance) and a model that always answers A: micro-F1 is
    2 TP / (2 TP + FP + FN) = 3 / 30 = 0.1, so 0.1 x 30 gave away the 3 patients labelled yes. The cell was no
    'proportion' (not a mean), so the implied-count rule never looked at it."""
    cli = site(tmp_path)
    spec = yaml.safe_load((Path(__file__).parents[2] / "medhelm_local" / "data" / "samples" /
                           "followup_needed.yaml").read_text())
    spec.pop("metric", None)
    spec.update(id="followup_f1", name="Follow-up F1", metric="micro_f1")
    spec_path = tmp_path / "followup_f1.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    extract = tmp_path / "followup.csv"
    extract.write_text("\n".join(["note_id,note_text,question,followup"] + [
        f'{i},"Discharge day {i}, stable.",Does the patient need follow-up?,{"yes" if i < 3 else "no"}'
        for i in range(30)]) + "\n")
    request = request_export(cli, evaluate(cli, extract, spec=spec_path, benchmark="followup_f1"))
    assert request["status"] == "ready", failed(request)
    cell = _aggregates(cli.home, request)["cells"][0]  # type: ignore[index]
    assert cell["metric"] == "micro_f1" and cell["n_scored"] == 30
    assert cell["score"] is None and cell["ci_low"] is None and "score:implied_count" in cell["suppressed"]
    bundle = cli.home / "exports" / str(request["request_id"]) / "bundle"
    assert not any(">0.100<" in p.read_text() or ",0.1," in p.read_text() for p in bundle.iterdir()
                   if p.suffix in (".json", ".csv", ".html"))
    # The structural check refuses such a score if publishing ever let one through.
    from medhelm_local.export import bundle as bundle_module
    from medhelm_local.export.aggregates import RawExport, RawModelUsage, RawRun, publish
    from medhelm_local.export.policy import LoadedPolicy

    raw = RawCell(run_id="run-x", model="m", benchmark="b", category="Cat", metric="micro_f1", score=0.1,
                  n_scored=30, n_failed=0, n_total=30, created_at=datetime(2026, 1, 1), proportion=False,
                  f1_counts=[3, 27, 27])
    assert publish_cell(raw.model_copy(update={"f1_counts": [15, 15, 15], "score": 0.5}), ExportPolicy()).score == 0.5
    export = RawExport(runs=[RawRun(run_id="run-x", model="m", status="finished", benchmarks=["b"],
                                    manifest_sha256="0" * 64, dataset_fingerprints={})],
                       cells=[raw], usage=[RawModelUsage(model="m", cost=None, n_total=30)])
    data = publish(export, ExportPolicy(), request_id="exp-x", policy_sha256="0" * 64)
    assert data.cells[0].score is None
    data.cells[0].score = 0.1
    checks = bundle_module._structural_checks(data, export, LoadedPolicy(policy=ExportPolicy(), sha256="0" * 64,
                                                                         source="test"))
    assert {c.id for c in checks if c.result == "fail"} == {"implied_counts"}


def test_the_score_on_non_empty_gold_does_not_give_back_a_withheld_empty_gold_count(tmp_path: Path) -> None:
    """EHRSQL, 40 questions, 3 of them with a gold query that returns no rows: n_gold_empty (3) was withheld as a
    small cell, but 0.541 on non-empty gold fits k / (40 - e) for e from 1 to 10 only as 20 of 37, and beside
    0.5 of 40 it gave away 3 empty-gold questions, none of them answered right."""
    import sqlite3

    cli = site(tmp_path)
    folder = tmp_path / "ehrsql"
    folder.mkdir()
    con = sqlite3.connect(folder / "eicu.sqlite")
    con.execute("CREATE TABLE t (x INTEGER)")
    con.executemany("INSERT INTO t VALUES (?)", [(1,), (2,)])
    con.commit()
    con.close()
    (folder / "eicu.sql").write_text("CREATE TABLE t (x INTEGER);\n")
    gold = ["SELECT x FROM t WHERE x > 100"] * 3 + ["SELECT x FROM t WHERE x = 1"] * 20 + [
        "SELECT x FROM t WHERE x = 2"] * 17
    (folder / "test.json").write_text(json.dumps([
        {"id": f"q{i}", "question": f"Question number {i} about the unit?", "query": query, "is_impossible": False,
         "db_id": "eicu"} for i, query in enumerate(gold)]))
    run_id = evaluate(cli, folder, benchmark="ehrsql", responder=lambda _m: "SELECT x FROM t WHERE x = 1")
    request = request_export(cli, run_id)
    assert request["status"] == "ready", failed(request)
    cell = _aggregates(cli.home, request)["cells"][0]  # type: ignore[index]
    assert (cell["score"], cell["n_scored"], cell["n_gold_empty"]) == (0.5, 40, None)
    assert cell["score_nonempty_gold"] is None and "score_nonempty_gold:complementary" in cell["suppressed"]
    bundle = cli.home / "exports" / str(request["request_id"]) / "bundle"
    assert not any("0.541" in p.read_text() for p in bundle.iterdir() if p.suffix in (".json", ".csv", ".html"))
    # The structural check refuses it if publishing ever let it through.
    from medhelm_local.export import bundle as bundle_module
    from medhelm_local.export.aggregates import RawExport, RawModelUsage, RawRun, publish
    from medhelm_local.export.policy import LoadedPolicy

    raw = RawCell(run_id="run-x", model="m", benchmark="ehrsql", category="Cat", metric="ehrsql_execution_accuracy",
                  score=0.5, n_scored=40, n_failed=0, n_total=40, created_at=datetime(2026, 1, 1), n_gold_empty=3,
                  score_nonempty_gold=20 / 37)
    export = RawExport(runs=[RawRun(run_id="run-x", model="m", status="finished", benchmarks=["ehrsql"],
                                    manifest_sha256="0" * 64, dataset_fingerprints={})],
                       cells=[raw], usage=[RawModelUsage(model="m", cost=None, n_total=40)])
    data = publish(export, ExportPolicy(), request_id="exp-x", policy_sha256="0" * 64)
    data.cells[0].score_nonempty_gold = 0.541
    checks = bundle_module._structural_checks(data, export, LoadedPolicy(policy=ExportPolicy(), sha256="0" * 64,
                                                                         source="test"))
    assert {c.id for c in checks if c.result == "fail"} == {"complementary_suppression"}


def _hex(text: str) -> str:
    return text.encode().hex()


def test_a_patient_name_encoded_in_a_run_id_or_model_name_blocks_the_export(tmp_path: Path) -> None:
    """The pattern and extract-term scans read text as written: `--run-id run-<the patient's name in hex>` gave a
    ready request (the name itself, `margaret-okafor-hiv`, was blocked). Long hex, base64 and digit runs in
    what leaves are now findings of the PHI check, whoever chose them. Such a run id is now refused before the run
    is created (exit 2, tests/security/test_chosen_names.py), so no run under it reaches an export."""
    import base64

    cli = site(tmp_path)
    add_models(cli.home, [ModelEndpoint(name="eval-model", base_urls=["http://127.0.0.1:9/v1"])])  # never reached
    name = f"Ada {PATIENT} HIV+"
    cases: list[tuple[str, str]] = [
        ("run_id", f"run-{_hex(name)}"),
        ("run_id", "run-" + "-".join(_hex(name)[i:i + 4] for i in range(0, 24, 4))),  # split in short tokens
        ("model", "eval-" + base64.b64encode(name.encode()).decode().rstrip("=")),
        ("run_id", "run-" + "-".join(str(ord(c)) for c in name[:8])),  # as decimal codes
    ]
    for i, (field, value) in enumerate(cases):
        extract = notes(tmp_path / f"notes-{i}.csv", 24, note=_patient_note)
        if field == "run_id":
            assert cli("datasets", "register", "hospice_referral", str(extract)).code == 0
            refused = cli("run", "--model", "eval-model", "--benchmarks", "hospice_referral", "--run-id", value)
            assert refused.code == 2 and "encoded text" in refused.stderr, (value, refused.stderr)
            assert value not in refused.stderr
            continue
        run_id = evaluate(cli, extract, model=value)
        request = request_export(cli, run_id)
        assert request["status"] == "blocked", value
        findings = failed(request)["phi_patterns"]
        assert any(f["rule"].startswith("encoded text") for f in findings), (value, findings)
        assert value not in json.dumps(request["checks"])


def test_generated_run_ids_are_not_read_as_encoded_text(tmp_path: Path) -> None:
    """The appliance's own run ids hold a timestamp and hex digits (`run-20261126T041500Z-a1b2c3`), or, for a
    sharded run, 24 hex digits of its plan key: generated, like the hashes beside them, they pass. The shard form
    chosen with `--run-id` for a run of another plan is read like any chosen id: refused as encoded text where the
    run would be created."""
    cli = site(tmp_path)
    plain = evaluate(cli, notes(tmp_path / "notes.csv", 24))
    assert plain.startswith("run-") and len(plain) == len("run-20261126T041500Z-a1b2c3")
    assert request_export(cli, plain)["status"] == "ready"
    with FakeOpenAIServer(responder=lambda _m: "A") as server:
        from medhelm_local.home import Home
        from medhelm_local.home.config import ApplianceConfig

        home = Home(cli.home)
        data = home.config.model_dump()
        for entry in data["models"]:
            if entry["name"] == "eval-model":
                entry["base_urls"] = [server.base_url]
        home.save_config(ApplianceConfig.model_validate(data))
        sharded = cli("run", "--model", "eval-model", "--benchmarks", "hospice_referral", "--seed", "7",
                      "--shard", "0/1", "--json")
        assert sharded.code == 0, sharded.stderr
    derived = json.loads(sharded.stdout)["run_id"]
    assert len(derived) == len("run-") + 24
    assert request_export(cli, derived)["status"] == "ready"
    assert cli("datasets", "register", "hospice_referral", str(notes(tmp_path / "again.csv", 24))).code == 0
    chosen = cli("run", "--model", "eval-model", "--benchmarks", "hospice_referral", "--run-id",
                 "run-" + "0123456789abcdef01234567")
    assert chosen.code == 2 and "encoded text" in chosen.stderr, chosen.stderr
