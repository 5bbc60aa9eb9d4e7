"""Actions whose intent is in the trail with no outcome after it: `audit report` lists them as unfinished.

Before, a process killed between its intent record and its outcome (SIGKILL, power loss), or one that failed on an
exception there, left an intent that `audit report` (text, --json, the printable report) showed nowhere."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.application import evaluation
from medhelm_local.application.evaluation import Mode, evaluate, merge_shards
from medhelm_local.audit.intents import unfinished
from medhelm_local.audit.report import NO_OUTCOME_YET, RUN_IN_PROGRESS, compliance_report, parse_time, summarize
from medhelm_local.audit.report_pdf import render_pdf
from medhelm_local.audit.trail import AuditTrail, AuditWriteError
from medhelm_local.audit.verify import verify_file
from medhelm_local.home.keys import ensure_keys, load_signing_key
from medhelm_local.runner import session
from medhelm_local.store import Store
from medhelm_local.store.connection import StoreError
from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
from tests.compliance.conftest import REQUESTER, EvaluatedHome, request_export, run_json, signers
from tests.console.test_compliance_pdf import pdf_text
from tests.runner.helpers import app, make_home, quiet, register, shard_killed_before_merging, synthetic_instances

# `export request` as the CLI runs it, stalled once its intent is written (while it builds the candidate), so that
# the test can kill it there.
STALLED_REQUEST = """
import sys, time
from pathlib import Path
import medhelm_local.application.exports as exports

marker = Path(sys.argv[1])

def stalled(*args, **kwargs):
    marker.write_text("intent written")
    time.sleep(600)

exports.build_candidate = stalled
from medhelm_local.cli import main
sys.argv = ["medhelm-local", *sys.argv[2:]]
main()
"""


def _wait_for(condition: Callable[[], bool], what: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert proc.poll() is None, f"the process ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _report(evaluated: EvaluatedHome) -> dict[str, Any]:
    result = evaluated.cli("audit", "report", "--json")
    assert result.code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert isinstance(summary, dict)
    return summary


def test_an_export_request_killed_after_its_intent_is_listed_as_unfinished(evaluated: EvaluatedHome,
                                                                             tmp_path: Path) -> None:
    cli = evaluated.cli
    marker = tmp_path / "stalled"
    proc = subprocess.Popen([sys.executable, "-c", STALLED_REQUEST, str(marker), "--home", str(cli.home),
                             "--actor", "alice", "export", "request", "--runs", evaluated.run_id, "--key",
                             str(signers(cli.home)[REQUESTER].private)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(marker.exists, "the intent was written", proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    trail = cli.home / "audit" / "audit.jsonl"
    (intent,) = [r for r in AuditTrail(trail).records() if r["action"] == "export.request"]
    assert intent["outcome"] == "started"

    (unfinished,) = _report(evaluated)["unfinished"]
    assert unfinished["action"] == "export.request" and unfinished["actor"].endswith(":alice")
    assert unfinished["time"] == intent["ts"] and unfinished["host"] == intent["host"]
    assert unfinished["status"] == NO_OUTCOME_YET
    assert unfinished["attempted"] == {"request_id": intent["objects"]["request_id"], "runs": [evaluated.run_id],
                                       "requester_key": intent["objects"]["requester_key"]}
    text = cli("audit", "report").stdout
    section = text.split("\nUnfinished actions (no outcome recorded):\n", 1)[1].split("\n\n", 1)[0]
    assert f"export.request by {intent['actor']}" in section and NO_OUTCOME_YET in section
    assert f"request_id {intent['objects']['request_id']}, runs {evaluated.run_id}" in section
    printable = compliance_report(AuditTrail(trail).records(), since=None, appliance="a")
    table = next(t for t in printable.tables if t.id == "report-unfinished")
    assert [row[3] for row in table.rows] == ["export.request"] and table.rows[0][5] == NO_OUTCOME_YET
    pdf = re.sub(r"\s", "", pdf_text(render_pdf(printable)))
    assert "Unfinishedactions(nooutcomerecorded)" in pdf and intent["objects"]["request_id"] in pdf

    # A later request that ends (ready) does not conclude the killed one, nor is it listed itself.
    request_export(cli, evaluated.run_id)
    assert [u["action"] for u in _report(evaluated)["unfinished"]] == ["export.request"]
    assert cli("audit", "verify").code == 0


def test_a_run_is_in_progress_while_its_lock_is_held_and_has_no_outcome_once_killed(evaluated: EvaluatedHome
                                                                                      ) -> None:
    cli, server = evaluated.cli, evaluated.server
    server.hold_after = server.stats()["requests_seen"]  # the new run's requests wait unanswered
    proc = subprocess.Popen([sys.executable, "-m", "medhelm_local.cli", "--home", str(cli.home), "run", "--model",
                             "eval-model", "--benchmarks", "hospice_referral"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: server.held > 0, "the run sent its first request", proc)
        (running,) = _report(evaluated)["unfinished"]
        assert running["action"] == "run.start" and running["status"] == RUN_IN_PROGRESS
        run_id = running["attempted"]["run_id"]
        assert run_id != evaluated.run_id and running["attempted"]["model"] == "eval-model"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        server.release_held()
    (killed,) = _report(evaluated)["unfinished"]
    assert killed["attempted"]["run_id"] == run_id and killed["status"] == NO_OUTCOME_YET
    runs = {r["run_id"]: r for r in _report(evaluated)["runs"]}
    assert runs[run_id]["outcome"] is None and runs[evaluated.run_id]["outcome"] == "success"

    resumed = cli("run", "--resume", run_id)  # the same run ends: nothing unfinished any more
    assert resumed.code == 0, resumed.stderr
    assert _report(evaluated)["unfinished"] == []


def test_an_export_request_failing_after_its_intent_records_the_failure(evaluated: EvaluatedHome) -> None:
    """A request naming a run not finished wrote its intent and then stopped (exit 2) with no outcome; it is now
    concluded `failure` (the error's class, never its message) and listed among failed export actions. (A run id
    naming no run is refused before any record: tests/security/test_chosen_names.py.)"""
    cli = evaluated.cli
    inferred = run_json(cli, "run", "--model", "eval-model", "--benchmarks", "hospice_referral", "--new-run",
                        "--skip-scoring")
    result = cli("export", "request", "--runs", str(inferred["run_id"]), "--key",
                 str(signers(cli.home)[REQUESTER].private))
    assert result.code == 2 and "not finished" in result.stderr, result.stderr
    records = [r for r in AuditTrail(cli.home / "audit" / "audit.jsonl").records()
               if r["action"] == "export.request"]
    assert [r["outcome"] for r in records] == ["started", "failure"]
    assert records[1]["objects"]["intent_seq"] == records[0]["seq"]
    assert records[1]["objects"]["request_id"] == records[0]["objects"]["request_id"]
    summary = _report(evaluated)
    assert summary["unfinished"] == []
    (failed,) = summary["export_refusals"]
    assert (failed["action"], failed["outcome"], failed["request_id"]) == ("export.request", "failed",
                                                                           records[0]["objects"]["request_id"])
    assert failed["reason"] == records[1]["objects"]["error_type"]
    assert "export.request failed (" in cli("audit", "report").stdout


def test_pairing_by_intent_seq_and_by_ids_for_records_written_before_it(tmp_path: Path) -> None:
    """Records written through the real trail: an outcome concludes the intent it names; a refusal made before any
    intent concludes none; records without `intent_seq` (an older trail) pair by ids, actor and host, the latest
    open intent first; a run's resume takes over its start; `--since` lists the intents in the period."""
    keys = tmp_path / "keys"
    ensure_keys(keys)
    trail = AuditTrail(tmp_path / "audit.jsonl", keys)

    def append(action: str, outcome: str, actor: str = "alice", **objects: object) -> dict[str, object]:
        return trail.append(actor=actor, action=action, outcome=outcome, objects=objects)

    killed = append("export.approve", "started", request_id="exp-1")
    append("export.approve", "refused", request_id="exp-1", reason="bad_signature", intent_seq=None)
    retried = append("export.approve", "started", request_id="exp-1")
    append("export.approve", "approved", request_id="exp-1", intent_seq=retried["seq"])
    old_killed = append("dataset.register", "attempt", benchmark="pubmedqa", source_name="a.json")
    append("dataset.register", "attempt", benchmark="pubmedqa", source_name="a.json")
    append("dataset.register", "success", benchmark="pubmedqa")  # older trail: by ids, latest first
    bobs = append("dataset.register", "attempt", actor="bob", benchmark="medcalc_bench", source_name="b.csv")
    append("dataset.register", "rejected", actor="carol", benchmark="medcalc_bench")  # another person's
    release = append("export.release", "started", request_id="exp-2", destination="/out")
    append("export.release", "refused", request_id="exp-2", reason="not_approved")  # older: made before acting
    append("run.start", "success", run_id="run-1", model="m")
    append("run.resume", "success", run_id="run-1", model="m", mode="resume")
    append("run.finish", "success", run_id="run-1")
    run_2 = append("run.start", "success", run_id="run-2", model="m")
    append("keys.rotate", "started", key="store-data", old_key_id="k1", new_key_id="k2")
    append("keys.rotate", "recovered", actor="appliance", key="store-data", old_key_id="k1", new_key_id="k2")
    rotation = append("keys.rotate", "started", key="store-data", old_key_id="k2", new_key_id="k3")
    append("keys.rotate", "failure", key="store-data", error_type="StoreError", intent_seq=None)  # another's
    assert verify_file(trail.path, load_signing_key(keys).public_key()).intact

    records = trail.records()
    listed = [(u.action, u.seq, u.actor) for u in summarize(records, None).unfinished]
    assert listed == [("export.approve", killed["seq"], "alice"), ("dataset.register", old_killed["seq"], "alice"),
                      ("dataset.register", bobs["seq"], "bob"), ("export.release", release["seq"], "alice"),
                      ("run.start", run_2["seq"], "alice"), ("keys.rotate", rotation["seq"], "alice")]
    assert summarize(records, None).unfinished[4].attempted == {"run_id": "run-2", "model": "m"}
    later = summarize(records, parse_time(str(run_2["ts"]), "since")).unfinished
    assert [u.action for u in later] == ["run.start", "keys.rotate"]
    assert all(u.status == NO_OUTCOME_YET for u in summarize(records, None, lambda run_id: False).unfinished)
    statuses = {u.action: u.status for u in summarize(records, None, lambda run_id: run_id == "run-2").unfinished}
    assert statuses["run.start"] == RUN_IN_PROGRESS and statuses["export.approve"] == NO_OUTCOME_YET



def test_a_run_failing_before_it_is_live_concludes_its_run_start(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A run failing between its ``run.start`` and the point it counts as live (storing its plan) had no
    ``run.finish``: `audit report` listed it as having no outcome yet, forever. It concludes with a failure now,
    naming the error's class, never its message."""
    def failing_plan(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full while writing Doe Jane's items")

    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(3))
        monkeypatch.setattr(session, "record_plan", failing_plan)
        with pytest.raises(OSError):
            evaluate(app(home), quiet())
    records = AuditTrail(home.audit_path).records()
    (start,) = [r for r in records if r["action"] == "run.start"]
    (finish,) = [r for r in records if r["action"] == "run.finish"]
    assert finish["outcome"] == "failure" and finish["objects"]["run_id"] == start["objects"]["run_id"]
    assert finish["objects"]["error_type"] == "OSError" and finish["objects"]["intent_seq"] == start["seq"]
    assert "Jane" not in home.audit_path.read_text()
    assert unfinished(records) == []


def test_a_run_failing_whose_failed_status_cannot_be_stored_raises_its_own_error_and_records_run_finish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run failing once live, whose failure path then could not store the status `failed` (a full disk, a store
    error), raised the store's error instead of its own, and wrote no `run.finish`: `audit report` listed its
    `run.start` as having no outcome yet. The user sees the run's own error now, and the failure is recorded."""
    set_run_status = Store.set_run_status

    def disk_full_on_failure(self: Store, run_id: str, status: str, **kwargs: Any) -> None:
        if status == "failed":
            raise StoreError("IO Error: No space left on device")
        set_run_status(self, run_id, status, **kwargs)

    def scorer_down(*_args: object, **_kwargs: object) -> None:
        raise LookupError("scorer down while reading Question number 1")

    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(3))
        monkeypatch.setattr(Store, "set_run_status", disk_full_on_failure)
        monkeypatch.setattr(evaluation, "benchmark_score", scorer_down)
        with pytest.raises(LookupError, match="scorer down"):
            evaluate(app(home), quiet())
    records = AuditTrail(home.audit_path).records()
    (start,) = [r for r in records if r["action"] == "run.start"]
    (finish,) = [r for r in records if r["action"] == "run.finish"]
    assert (finish["outcome"], finish["objects"]["error_type"]) == ("failure", "LookupError")
    assert finish["objects"]["run_id"] == start["objects"]["run_id"]
    assert unfinished(records) == []
    assert "Question number" not in home.audit_path.read_text()


def test_a_shard_failing_whose_run_finish_the_trail_refuses_raises_its_own_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard whose send failed, and whose failure's `run.finish` the trail then refused (a full disk), raised the
    trail's error: the user saw "audit record could not be written", not why the shard stopped. It raises its own
    error now; where the trail takes the record, the failure concludes the run's intent as before."""
    audit_event = evaluation.audit_event

    def trail_full_on_finish(home: Any, actor: str, action: str, **fields: Any) -> dict[str, Any]:
        if action == "run.finish":
            raise AuditWriteError("audit record could not be written: No space left on device")
        return audit_event(home, actor, action, **fields)

    async def server_gone(*_args: object, **_kwargs: object) -> None:
        raise ConnectionError("server gone while sending Question number 1")

    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(20))
        monkeypatch.setattr(session, "send", server_gone)
        monkeypatch.setattr(evaluation, "audit_event", trail_full_on_finish)
        with pytest.raises(ConnectionError, match="server gone"):
            evaluate(app(home), quiet(mode=Mode.of_shard(0, 2)))
        assert [r["action"] for r in AuditTrail(home.audit_path).records()
                if r["action"].startswith("run.")] == ["run.start"]

        monkeypatch.setattr(evaluation, "audit_event", audit_event)  # the trail takes records again
        with pytest.raises(ConnectionError, match="server gone"):
            evaluate(app(home), quiet(mode=Mode.of_shard(1, 2)))
    records = AuditTrail(home.audit_path).records()
    (start,) = [r for r in records if r["action"] == "run.start"]
    (finish,) = [r for r in records if r["action"] == "run.finish"]
    assert (finish["outcome"], finish["objects"]["error_type"]) == ("failure", "ConnectionError")
    assert finish["objects"]["shard"] == "1/2" and finish["objects"]["intent_seq"] == start["seq"]
    assert "Question number" not in home.audit_path.read_text()


def test_runs_merge_finishing_a_run_a_shard_failure_concluded_takes_it_up_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard dying before its merge concludes the run's `run.start` with a failure; `runs merge` then finished the
    run with a `run.finish` success that concluded nothing (no intent for that step), and `audit report` read as
    if the run had succeeded at its first try. `runs merge` takes the run up again now (`run.resume`, mode merge),
    which its `run.finish` concludes, naming it, as does its own failure to finish."""
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(20))
        first = evaluate(app(home), quiet(mode=Mode.of_shard(0, 2)))
        shard_killed_before_merging(home, 1, 2)
    run_id = first.run.run_id

    def scorer_down(*_args: object, **_kwargs: object) -> None:
        raise OSError("scorer down while reading Question number 3")

    monkeypatch.setattr(evaluation, "score_benchmark", scorer_down)
    with pytest.raises(OSError):
        merge_shards(app(home), run_id)
    monkeypatch.undo()
    merged = merge_shards(app(home), run_id)
    assert (merged.complete, merged.run.status) == (True, "finished")

    records = AuditTrail(home.audit_path).records()
    by_seq = {r["seq"]: r for r in records}
    steps = [(r["action"], r["outcome"], r["objects"].get("mode"),
              by_seq[r["objects"]["intent_seq"]]["action"] if r["objects"].get("intent_seq") else None)
             for r in records if r["action"] in ("run.start", "run.resume", "run.finish")]
    assert steps == [("run.start", "success", None, None), ("run.finish", "failure", None, "run.start"),
                     ("run.resume", "success", "merge", None), ("run.finish", "failure", None, "run.resume"),
                     ("run.resume", "success", "merge", None), ("run.finish", "success", None, "run.resume")]
    finishes = [r for r in records if r["action"] == "run.finish"]
    assert len({r["objects"]["intent_seq"] for r in finishes}) == 3, "each run.finish concludes its own intent"
    assert unfinished(records) == []
    (run,) = summarize(records, None).runs
    assert (run.run_id, run.outcome, run.resumed, run.scored) == (run_id, "success", 2, 20)
    assert "Question number" not in home.audit_path.read_text()


def test_an_export_request_whose_folder_cannot_be_put_in_place_is_recorded_failed_not_ready(
        evaluated: EvaluatedHome, monkeypatch: pytest.MonkeyPatch) -> None:
    """`export request` recorded `ready` before renaming its folder into place: when the rename failed, the trail
    said ready (and `export approve` was pointed at it) but no request folder existed. The outcome is written once
    the folder is in place now; a failed rename is recorded `failure`."""
    cli = evaluated.cli
    exports_dir = cli.home / "exports"
    rename = Path.rename

    def failing_rename(self: Path, target: Any) -> Path:
        if Path(target).parent == exports_dir:
            raise OSError("rename refused")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", failing_rename)
    result = cli("export", "request", "--runs", evaluated.run_id, "--key", str(signers(cli.home)[REQUESTER].private))
    assert result.code != 0
    records = [r for r in AuditTrail(cli.home / "audit" / "audit.jsonl").records() if r["action"] == "export.request"]
    assert [r["outcome"] for r in records] == ["started", "failure"]
    assert records[1]["objects"]["error_type"] == "OSError"
    assert not list(exports_dir.iterdir())  # nothing half-written left behind
