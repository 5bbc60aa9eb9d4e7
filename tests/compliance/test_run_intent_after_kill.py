"""A `run` SIGKILLed at the two points where its run's intent could be left open for good.

Before: killed after it marked its run finished in the store but before it wrote `run.finish`, it left a
`run.start` no later command could conclude (the run is finished: nothing takes it up again), listed by `audit
report` as having "no outcome yet" forever. Killed after `run.start` but before the run's plan was stored, it left
an intent for a run that never existed (running the command again creates a run with a new id), listed the same
way. Now `audit report` (text, --json, the printable report the console shows) says what the store shows: the run
finished, or no run was created; and the next `run` (or `runs merge`) concludes each such intent with a record
written late, by its own actor, naming the intent, never rewriting what the trail already holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.application.evaluation import evaluate
from medhelm_local.audit import audit_event
from medhelm_local.audit.intents import unfinished
from medhelm_local.audit.report import (
    NO_OUTCOME_YET,
    RUN_FINISHED_UNRECORDED,
    RUN_NEVER_CREATED,
    compliance_report,
    summarize,
)
from medhelm_local.audit.trail import AuditTrail
from medhelm_local.audit.verify import verify_file
from medhelm_local.home import Home
from medhelm_local.home.keys import load_signing_key
from medhelm_local.store import Store
from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
from tests.runner.helpers import app, cli_argv, cli_env, make_home, quiet, register, run_argv, synthetic_instances

# The CLI, SIGKILLed once its run is marked finished in the store (before it records run.finish).
KILLED_ONCE_FINISHED = """
import os, signal, sys
from medhelm_local.store import Store

set_run_status = Store.set_run_status

def killed(self, run_id, status, **kwargs):
    set_run_status(self, run_id, status, **kwargs)
    if status in ("finished", "inferred"):
        os.kill(os.getpid(), signal.SIGKILL)

Store.set_run_status = killed
from medhelm_local.cli import main
sys.argv = ["medhelm-local", *sys.argv[1:]]
main()
"""

# The CLI, SIGKILLed after its run.start, before the run's plan is stored.
KILLED_BEFORE_PLAN = """
import os, signal, sys
from medhelm_local.runner import session

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

session.record_plan = killed
from medhelm_local.cli import main
sys.argv = ["medhelm-local", *sys.argv[1:]]
main()
"""


def _killed(script: str, argv: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", script, *argv[3:]], capture_output=True, text=True, env=cli_env(),
                          timeout=300)
    assert proc.returncode == -9, proc.stderr


def _report(home: Home) -> dict[str, Any]:
    proc = subprocess.run(cli_argv(home, "audit", "report", "--json"), capture_output=True, text=True,
                          env=cli_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert isinstance(payload, dict)
    return payload


def _run_records(trail: Path) -> list[dict[str, Any]]:
    return [r for r in AuditTrail(trail).records() if r["action"] in ("run.start", "run.resume", "run.finish")]


def test_a_run_killed_after_it_was_marked_finished_is_reported_finished_and_concluded_late(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(6))
        _killed(KILLED_ONCE_FINISHED, run_argv(home))
        (start,) = _run_records(home.audit_path)
        run_id = start["objects"]["run_id"]
        with Store.open(home, read_only=True) as store:
            stored = store.get_run(run_id)
        assert stored is not None and stored.status == "finished"

        (listed,) = _report(home)["unfinished"]
        assert (listed["action"], listed["attempted"]["run_id"]) == ("run.start", run_id)
        assert listed["status"] == RUN_FINISHED_UNRECORDED
        text = subprocess.run(cli_argv(home, "audit", "report"), capture_output=True, text=True, env=cli_env(),
                              timeout=300).stdout
        assert f"run.start by {start['actor']} on {start['host']}: {RUN_FINISHED_UNRECORDED}" in text

        again = subprocess.run(run_argv(home), capture_output=True, text=True,
                               env={**cli_env(), "MEDHELM_ACTOR": "bob"}, timeout=300)
        assert again.returncode == 0, again.stderr
    records = _run_records(home.audit_path)
    late = next(r for r in records if r["action"] == "run.finish" and r["objects"].get("intent_seq") == start["seq"])
    assert late["outcome"] == "recovered" and late["actor"].endswith(":bob") and late["role"] == "system"
    assert late["objects"]["run_id"] == run_id and late["objects"]["recorded_late"] is True
    assert late["objects"]["run_status"] == "finished"
    assert unfinished(AuditTrail(home.audit_path).records()) == []
    assert _report(home)["unfinished"] == []
    assert verify_file(home.audit_path, load_signing_key(home.keys_dir).public_key()).intact


def test_a_run_killed_before_its_plan_was_stored_is_reported_never_created_and_concluded_abandoned(
        tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(6))
        _killed(KILLED_BEFORE_PLAN, run_argv(home))
        (start,) = _run_records(home.audit_path)
        orphan = start["objects"]["run_id"]
        with Store.open(home, read_only=True) as store:
            assert store.get_run(orphan) is None

        (listed,) = _report(home)["unfinished"]
        assert (listed["attempted"]["run_id"], listed["status"]) == (orphan, RUN_NEVER_CREATED)
        printable = compliance_report(AuditTrail(home.audit_path).records(), since=None, appliance="a",
                                      run_statuses={})
        table = next(t for t in printable.tables if t.id == "report-unfinished")
        assert table.rows[0][5] == RUN_NEVER_CREATED
        # Without the store to read (a copy of the trail), nothing is claimed beyond the trail.
        assert summarize(AuditTrail(home.audit_path).records(), None).unfinished[0].status == NO_OUTCOME_YET

        again = subprocess.run(run_argv(home), capture_output=True, text=True, env=cli_env(), timeout=300)
        assert again.returncode == 0, again.stderr
    records = _run_records(home.audit_path)
    late = next(r for r in records if r["action"] == "run.finish" and r["objects"].get("intent_seq") == start["seq"])
    assert (late["outcome"], late["objects"]["run_id"]) == ("abandoned", orphan)
    assert late["objects"]["run_in_store"] is False and late["objects"]["recorded_late"] is True
    new_start = [r for r in records if r["action"] == "run.start"][-1]
    assert new_start["objects"]["run_id"] != orphan
    assert unfinished(AuditTrail(home.audit_path).records()) == []
    runs = {r["run_id"]: r for r in _report(home)["runs"]}
    assert runs[orphan]["outcome"] == "abandoned" and runs[new_start["objects"]["run_id"]]["outcome"] == "success"
    assert verify_file(home.audit_path, load_signing_key(home.keys_dir).public_key()).intact


# Holds a run's lock, as a process sending that run does, until its stdin closes.
HOLDS_RUN_LOCK = """
import sys
from pathlib import Path
from medhelm_local.store.runlock import run_lock

with run_lock(Path(sys.argv[1]), sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_runs_merge_concludes_an_abandoned_intent_but_never_one_whose_run_a_process_holds(tmp_path: Path) -> None:
    """The intent of a run being created now (its process holds the run's lock) is not a crash's: left alone."""
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(4))
        run_id = evaluate(app(home), quiet()).run.run_id
    creating = audit_event(home, "alice", "run.start", role="informatics", run_id="run-being-created", model="fake")
    abandoned = audit_event(home, "alice", "run.start", role="informatics", run_id="run-killed", model="fake")
    holder = subprocess.Popen([sys.executable, "-c", HOLDS_RUN_LOCK, str(home.store_path), "run-being-created"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=cli_env())
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        merged = subprocess.run(cli_argv(home, "runs", "merge", run_id), capture_output=True, text=True,
                                env=cli_env(), timeout=300)
        assert merged.returncode == 0, merged.stderr
    finally:
        holder.communicate("", timeout=30)
    records = AuditTrail(home.audit_path).records()
    late = [r for r in records if r["action"] == "run.finish" and r["objects"].get("recorded_late")]
    assert [(r["outcome"], r["objects"]["intent_seq"]) for r in late] == [("abandoned", abandoned["seq"])]
    assert [u.record["seq"] for u in unfinished(records)] == [creating["seq"]]


def test_audit_report_with_a_store_it_cannot_read_says_what_the_trail_says(tmp_path: Path) -> None:
    """The store only adds to the report: one that cannot be read leaves it to the trail, never failing it."""
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(4))
        _killed(KILLED_BEFORE_PLAN, run_argv(home))
    home.store_path.write_bytes(b"not a store")
    (listed,) = _report(home)["unfinished"]
    assert listed["status"] == NO_OUTCOME_YET


def test_only_the_trails_recent_records_are_read_for_intents_left_open(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Every `run` looks for intents a crash left open, so it reads only the trail's last RECENT_TRAIL_BYTES: read
    whole, a trail of 100,000 records cost each run 1.7 s. An intent older than that window stays open (and `audit
    report`, which reads the whole trail, still says how its run ended); one inside it is concluded."""
    from medhelm_local.application import run_intents

    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(4))
    old = audit_event(home, "alice", "run.start", role="informatics", run_id="run-killed-long-ago", model="fake")
    for _ in range(8):  # later activity pushes it out of a small window
        audit_event(home, "alice", "leaderboard.view", role="informatics")
    recent = audit_event(home, "alice", "run.start", role="informatics", run_id="run-killed-just-now", model="fake")
    trail = AuditTrail(home.audit_path)
    data = home.audit_path.read_bytes()
    starts = [0, *(i + 1 for i, byte in enumerate(data) if byte == 0x0A)][:-1]
    (at,) = [start for start in starts if json.loads(data[start:data.index(b"\n", start)])["seq"] == recent["seq"]]
    window = len(data) - at  # the recent intent whole, nothing older
    assert next(r["seq"] for r in trail.recent_records(window)) == recent["seq"]
    monkeypatch.setattr(run_intents, "RECENT_TRAIL_BYTES", window)

    with Store.open(home) as store:
        assert run_intents.conclude_left_open(app(home), store) == 1
    records = trail.records()
    late = [r for r in records if r["action"] == "run.finish" and r["objects"].get("recorded_late")]
    assert [(r["outcome"], r["objects"]["intent_seq"]) for r in late] == [("abandoned", recent["seq"])]
    assert [u.record["seq"] for u in unfinished(records)] == [old["seq"]]


def test_recent_records_are_whole_records_only(tmp_path: Path) -> None:
    """A window that starts inside a record leaves that record out rather than parse half of it."""
    path = tmp_path / "trail.jsonl"
    lines = [json.dumps({"seq": i, "action": "x", "pad": "p" * 50}) for i in range(5)]
    path.write_text("\n".join(lines) + "\n")
    trail = AuditTrail(path)
    assert [r["seq"] for r in trail.recent_records(10 ** 6)] == [0, 1, 2, 3, 4]
    assert [r["seq"] for r in trail.recent_records(len(lines[-1]) + 1)] == [4]
    assert [r["seq"] for r in trail.recent_records(len(lines[-1]) + 2)] == [4]  # starts at the newline before it
    assert [r["seq"] for r in trail.recent_records(len(lines[-1]) + 3)] == [4]  # starts inside record 3
    assert [r["seq"] for r in trail.recent_records(len(lines[-1]) + len(lines[-2]) + 2)] == [3, 4]
    assert AuditTrail(tmp_path / "none.jsonl").recent_records(100) == []
