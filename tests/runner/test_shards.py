"""`run --shard I/N`: pods split a run and merge into one run, identical to an unsharded one."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.application.evaluation import Mode, evaluate, merge_shards
from medhelm_local.audit.intents import unfinished
from medhelm_local.audit.report import summarize
from medhelm_local.audit.trail import AuditTrail
from medhelm_local.errors import MedhelmError
from medhelm_local.home import Home
from medhelm_local.runner import session
from medhelm_local.runner import shard as sharding
from medhelm_local.runner.plan import parse_shard, shard_range
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from medhelm_local.store import shards as shards_db
from medhelm_local.store.connection import LOCK_TIMEOUT_ENV, StoreError
from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
from tests.runner.helpers import (
    app,
    cli_argv,
    cli_env,
    make_home,
    outcomes,
    quiet,
    register,
    run_argv,
    scores,
    shard_killed_before_merging,
    shard_killed_while_building,
    synthetic_instances,
)
from tests.store import previous_release

N = 150


def _shard_cmd(home: Home, shard: str) -> list[str]:
    return run_argv(home, "--shard", shard)


def test_shard_partition_is_disjoint_and_complete() -> None:
    for n, count in ((100, 3), (7, 4), (0, 2), (5, 5)):
        ranges = [shard_range(n, i, count) for i in range(count)]
        ranks = [r for start, stop in ranges for r in range(start, stop)]
        assert ranks == list(range(n))  # contiguous, disjoint, complete
        sizes = [stop - start for start, stop in ranges]
        assert max(sizes) - min(sizes) <= 1
    assert parse_shard("2/4") == (2, 4)


def test_three_shards_merge_into_one_run_identical_to_unsharded(tmp_path: Path) -> None:
    instances = synthetic_instances(N, contexts=15)
    with FakeOpenAIServer(responder=hash_responder(), latency_s=0.02, slots=16) as server:
        reference = make_home(tmp_path / "reference", [server.base_url])
        register(reference, instances)
        ref = evaluate(app(reference), quiet())

        home = make_home(tmp_path / "home", [server.base_url])
        register(home, instances)
        # Shard 1 is killed once mid-way and restarted, as a Job would restart its pod.
        victim = subprocess.Popen(_shard_cmd(home, "1/3"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env=cli_env())
        target = server.stats()["requests_seen"] + 10
        deadline = time.monotonic() + 120
        while server.stats()["requests_seen"] < target and victim.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        procs = [subprocess.Popen(_shard_cmd(home, f"{i}/3"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=cli_env()) for i in range(3)]
        results = [p.communicate(timeout=300) for p in procs]
        for proc, (_, err) in zip(procs, results, strict=True):
            assert proc.returncode == 0, err

    payloads = [json.loads(out) for out, _ in results]
    run_ids = {p["run_id"] for p in payloads}
    assert len(run_ids) == 1
    (run_id,) = run_ids
    assert sum(1 for p in payloads if p["status"] == "finished" and p["results"]) >= 1
    with Store.open(home, read_only=True) as store:
        runs = store.list_runs()
        assert [r.run_id for r in runs] == [run_id] and runs[0].status == "finished"
        modes = {r[0] for r in store.conn.execute("SELECT shard FROM runner_sessions WHERE run_id = ?",
                                                  [run_id]).fetchall()}
        sent_with = {s["sending"]["concurrency"] for s in runs_db.sessions(store, run_id)}
    assert modes == {"0/3", "1/3", "2/3"}
    assert sent_with == {8}, "each shard's session keeps the options it sent with through the merge"
    assert outcomes(home, run_id) == outcomes(reference, ref.run.run_id)
    assert scores(home, run_id) == scores(reference, ref.run.run_id)
    assert not (home.store_path.parent / "shards" / run_id).exists(), "merged shard files are removed"


def test_a_shard_left_unmerged_is_merged_by_runs_merge(tmp_path: Path) -> None:
    """Two shards in-process; the second dies after its last request (before its merge): its file stays, a
    failure record names the shard, and `runs merge` folds it in and finishes the run."""
    instances = synthetic_instances(40)
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, instances)
        first = evaluate(app(home), quiet(mode=Mode.of_shard(0, 2)))
        run_id = first.run.run_id
        assert (first.mode, first.shard, first.merged, first.complete) == ("shard", "0/2", 20, False)
        assert first.run.status == "running" and first.results == []
        shard_killed_before_merging(home, 1, 2)
        assert [p.name for p in sharding.pending_shard_files(home, run_id)] == ["shard-1-of-2.duckdb"]
        assert server.stats()["requests_seen"] == 40

    merged = merge_shards(app(home), run_id)
    assert (merged.mode, merged.merged, merged.complete, merged.run.status) == ("merge", 20, True, "finished")
    assert [(r.benchmark, r.n) for r in merged.results] == [("pubmedqa", 40)]
    assert sharding.pending_shard_files(home, run_id) == []
    assert sorted(r[1] for r in outcomes(home, run_id)) == sorted(i.id for i in instances)
    again = merge_shards(app(home), run_id)  # nothing left: the finished run stays as it is
    assert (again.merged, again.complete, again.results, again.run.status) == (0, True, [], "finished")
    records = [json.loads(line) for line in home.audit_path.read_text().splitlines()]
    (start,) = [r for r in records if r["action"] == "run.start"]
    failures = [r["objects"] for r in records if r["action"] == "run.finish" and r["outcome"] == "failure"]
    assert failures == [{"shard": "1/2", "error_type": "RuntimeError", "run_id": run_id, "intent_seq": start["seq"]}]
    assert [(r["objects"]["merged"], r["objects"]["already_present"]) for r in records
            if r["action"] == "run.merge"] == [(20, 0), (0, 0)]
    assert start["objects"]["shards"] == 2
    assert unfinished(records) == []
    (run,) = summarize(records, None).runs
    assert (run.run_id, run.outcome) == (run_id, "success")


def test_a_merge_repeated_after_a_crash_reports_the_outcomes_it_added_not_those_it_offered(tmp_path: Path) -> None:
    """A shard killed after its merge committed, before it removed its file, leaves a file whose outcomes the run
    already has. `runs merge` then said `merged 20 outcome(s)` (and audited `run.merge` merged 20) while adding
    none; it reports what it added (0) and, apart, what the run already had."""
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(20))

        def pod_killed(*_args: object, **_kwargs: object) -> None:
            raise RuntimeError("pod killed")

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sharding, "remove_shard_files", pod_killed)
            with pytest.raises(RuntimeError, match="pod killed"):
                evaluate(app(home), quiet(mode=Mode.of_shard(0, 1)))
    with Store.open(home, read_only=True) as store:
        (run,) = store.list_runs()
    assert len(outcomes(home, run.run_id)) == 20, "the shard's merge committed before it was killed"
    assert len(sharding.pending_shard_files(home, run.run_id)) == 1

    done = subprocess.run(cli_argv(home, "runs", "merge", run.run_id, "--json"), capture_output=True, text=True,
                          env=cli_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert (payload["merged"], payload["already_present"], payload["status"]) == (0, 20, "finished")
    assert sharding.pending_shard_files(home, run.run_id) == []
    records = AuditTrail(home.audit_path).records()
    assert [r["objects"] for r in records if r["action"] == "run.merge"] == [
        {"run_id": run.run_id, "merged": 0, "already_present": 20}]


def test_runs_merge_of_a_run_still_missing_items_names_the_resume_that_sends_them(tmp_path: Path) -> None:
    """`runs merge` of a run with items no shard sent said only "run the missing shards": a run whose Job is gone
    (or one never sharded) had no way on named. It names `run --resume RUN_ID` too. It also said "run X is
    running" (the stored status) of a run no process sends: it says interrupted, as `runs list`/`show` do."""
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(20))
        run_id = evaluate(app(home), quiet(mode=Mode.of_shard(0, 2))).run.run_id
    merged = subprocess.run(cli_argv(home, "runs", "merge", run_id), capture_output=True, text=True, env=cli_env(),
                            timeout=300)
    assert merged.returncode == 0, merged.stderr
    # No process sends the run: it is interrupted, as `runs show` says, never "running" (its stored status).
    assert (f"merged 0 outcome(s); run {run_id} is interrupted (no process is sending it; resume with: "
            f"medhelm-local run --resume {run_id})") in merged.stderr, merged.stderr
    assert " is running" not in merged.stderr
    as_json = subprocess.run(cli_argv(home, "runs", "merge", run_id, "--json"), capture_output=True, text=True,
                             env=cli_env(), timeout=300)
    payload = json.loads(as_json.stdout)
    assert (payload["status"], payload["live"]) == ("running", False)
    assert payload["status_text"].startswith("interrupted (no process is sending it")


def test_a_store_a_killed_shard_left_half_built_is_removed_by_runs_merge_and_by_a_resume(tmp_path: Path) -> None:
    """A shard killed while building its store left `shard-I-of-N.duckdb.building` (the slice's instances) in the
    run's shard folder; no merge ever took it, and it stayed after the run finished. `runs merge` and a resume (the
    run's lock held: no shard builds) remove it; a build that fails (not killed) removes its own."""
    instances = synthetic_instances(40)
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, instances)
        run_id = evaluate(app(home), quiet(mode=Mode.of_shard(0, 2))).run.run_id
        folder = sharding.shards_dir(home, run_id)

        def failing(*_args: object) -> None:
            raise RuntimeError("copy failed")

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(shards_db, "copy_inputs", failing)
            with pytest.raises(RuntimeError, match="copy failed"):
                evaluate(app(home), quiet(mode=Mode.of_shard(1, 2)))
        assert not folder.exists()

        shard_killed_while_building(home, 1, 2)
        assert sorted(p.name for p in folder.iterdir()) == ["shard-1-of-2.duckdb.building",
                                                            "shard-1-of-2.duckdb.building.wal"]
        merge = subprocess.run(cli_argv(home, "runs", "merge", run_id, "--json"), capture_output=True, text=True,
                               env=cli_env(), timeout=120)
        assert merge.returncode == 0, merge.stderr
        assert (json.loads(merge.stdout)["complete"], folder.exists()) == (False, False)

        shard_killed_while_building(home, 1, 2)
        assert folder.exists()
        resumed = evaluate(app(home), quiet(mode=Mode.resume(run_id)))
        assert (resumed.run.status, folder.exists()) == ("finished", False)
    assert sorted(r[1] for r in outcomes(home, run_id)) == sorted(i.id for i in instances)


def test_a_shard_file_built_before_sessions_kept_their_options_still_merges(tmp_path: Path) -> None:
    """Sessions gained their sending options (a table of their own); a shard file left by the previous release has
    no such table, and `runs merge` after the upgrade still folds it in (the shard's file is migrated first)."""
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(20))
        shard_killed_before_merging(home, 0, 1)
    with Store.open(home, read_only=True) as store:
        (run,) = store.list_runs()
    run_id = run.run_id
    (path,) = sharding.pending_shard_files(home, run_id)
    with Store.open_file(home, path) as shard:
        previous_release.downgrade(shard.conn)
    merged = merge_shards(app(home), run_id)
    assert (merged.merged, merged.complete, merged.run.status) == (20, True, "finished")
    with Store.open(home, read_only=True) as store:
        sessions = runs_db.sessions(store, run_id)
    assert [(s["shard"], s["responses"], s["sending"]) for s in sessions] == [("0/1", 20, None)]


def test_a_failed_shard_concludes_its_runs_start_and_the_shard_taken_up_again_finishes_it(tmp_path: Path) -> None:
    """A shard failing (its model's server down) recorded a `run.finish` failure naming only the shard: the run's
    `run.start` stayed open, and `audit report` listed it with no outcome yet, forever. The failure concludes the
    run's open intent now, naming it; the shard run again announces itself (`run.resume`, mode shard) and the run's
    end concludes that."""
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(20))
        first = evaluate(app(home), quiet(mode=Mode.of_shard(0, 2)))
        port = server.port
    run_id = first.run.run_id
    for _ in range(2):  # the second failure finds the run's intent concluded already
        with pytest.raises(MedhelmError):
            evaluate(app(home), quiet(mode=Mode.of_shard(1, 2)))
    records = AuditTrail(home.audit_path).records()
    (start,) = [r for r in records if r["action"] == "run.start"]
    failures = [r["objects"] for r in records if r["action"] == "run.finish"]
    error = failures[0]["error_type"]
    assert failures == [{"shard": "1/2", "error_type": error, "run_id": run_id, "intent_seq": start["seq"]},
                        {"shard": "1/2", "error_type": error}]
    assert unfinished(records) == []
    assert [(r.run_id, r.outcome) for r in summarize(records, None).runs] == [(run_id, "failure")]

    with FakeOpenAIServer(responder=hash_responder(), port=port):
        again = evaluate(app(home), quiet(mode=Mode.of_shard(1, 2)))
    assert (again.merged, again.complete, again.run.status) == (10, True, "finished")
    records = AuditTrail(home.audit_path).records()
    runs = [(r["action"], r["outcome"], r["objects"].get("mode"), r["objects"].get("shard"))
            for r in records if r["action"].startswith("run.")]
    assert runs[-2:] == [("run.resume", "success", "shard", "1/2"), ("run.finish", "success", None, None)]
    resume = next(r for r in records if r["action"] == "run.resume" and r["outcome"] == "success")
    before_end = records[:records.index(next(r for r in reversed(records) if r["action"] == "run.finish"))]
    assert [u.record["seq"] for u in unfinished(before_end)] == [resume["seq"]], "a shard killed there stays open"
    assert unfinished(records) == []
    (run,) = summarize(records, None).runs
    assert (run.outcome, run.resumed, run.scored) == ("success", 1, 20)
    assert "Question number" not in home.audit_path.read_text()


def test_a_shard_whose_run_another_shard_created_meanwhile_joins_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The pods of an Indexed Job start together: two shards could both find no run, and both create it (the main
    store is given back while a shard asks its servers who they are). The second's plan then collided with the
    first's: it died with an internal error (ConstraintException), after a second `run.start`. It joins the run
    the other shard created meanwhile now."""
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(20))
        describe = session.describe
        other: list[subprocess.CompletedProcess[str]] = []

        async def other_shard_first(*args: Any, **kwargs: Any) -> Any:
            described = await describe(*args, **kwargs)  # the store is given back here, as in production
            if not other:
                other.append(subprocess.run(_shard_cmd(home, "0/2"), capture_output=True, text=True, env=cli_env(),
                                            timeout=300))
            return described

        monkeypatch.setattr(session, "describe", other_shard_first)
        second = evaluate(app(home), quiet(mode=Mode.of_shard(1, 2)))
    (first,) = other
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["run_id"] == second.run.run_id
    assert (second.merged, second.complete, second.run.status) == (10, True, "finished")
    records = AuditTrail(home.audit_path).records()
    assert [r["action"] for r in records if r["action"] in ("run.start", "run.resume")] == ["run.start"]
    assert unfinished(records) == []


def _wait_until(condition: Callable[[], bool], what: str, procs: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert all(p.poll() is None for p in procs), f"a process ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_resume_or_retry_is_refused_while_shards_send(tmp_path: Path) -> None:
    """An unsharded `run --resume` (or `--retry-errors`) of a sharded run took the run lock, which no shard holds,
    and sent the items the shards were sending: each was requested twice, and the merges' outcomes lost to the
    resume's. It is refused now (exit 2) while any shard sends, naming `runs show`, and sends nothing. So is
    `runs merge`, which folded in the files the shards were writing and removed them: the shards then failed, their
    answers lost."""
    with FakeOpenAIServer(responder=hash_responder(), hold_after=0) as server:  # every request waits unanswered
        home = make_home(tmp_path / "home", [server.base_url], timeout_s=60)
        register(home, synthetic_instances(40))
        shards = [subprocess.Popen([*_shard_cmd(home, f"{i}/2"), "--run-id", "ward-7"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=cli_env()) for i in range(2)]
        try:
            _wait_until(lambda: len(sharding.pending_shard_files(home, "ward-7")) == 2 and server.held > 0,
                        "the shards sent", shards)
            for command in (["run", "--resume"], ["run", "--retry-errors"], ["runs", "merge"]):
                refused = subprocess.run(cli_argv(home, *command, "ward-7", "--json"), capture_output=True,
                                         text=True, env=cli_env(), timeout=120)
                assert refused.returncode == 2, (command, refused.stderr)
                assert "run ward-7 has shards sending it now" in refused.stderr
                assert "medhelm-local runs show ward-7" in refused.stderr
                assert "Question number" not in refused.stderr
                assert len(sharding.pending_shard_files(home, "ward-7")) == 2, "the shards' files are theirs"
        finally:
            server.release_held()
        for proc in shards:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
        assert server.stats()["requests_seen"] == 40, "each item is requested once"
    assert len(outcomes(home, "ward-7")) == 40
    records = AuditTrail(home.audit_path).records()
    assert [r["action"] for r in records if r["action"] in ("run.start", "run.resume")] == ["run.start"]
    assert unfinished(records) == []


def test_a_shard_waits_for_a_resume_of_its_run_and_is_refused_clearly_past_the_lock_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard starting while an unsharded resume sends its run took its shard lock freely and sent the items the
    resume was sending. It waits for the resume now, up to the store's lock timeout, then fails naming the run
    (exit 1), taking no part in the run: its failure concludes nothing of the resume's in the trail."""
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url], timeout_s=60)
        register(home, synthetic_instances(40))
        first = evaluate(app(home), quiet(mode=Mode.of_shard(0, 2)))
        run_id = first.run.run_id
        server.hold_after = server.stats()["requests_seen"]  # the resume's requests wait unanswered
        resume = subprocess.Popen(cli_argv(home, "run", "--resume", run_id, "--json"), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=cli_env())
        try:
            _wait_until(lambda: server.held > 0, "the resume sent", [resume])
            monkeypatch.setenv(LOCK_TIMEOUT_ENV, "1")
            with pytest.raises(StoreError, match=f"run {run_id} is being sent by a run, resume or retry of it"):
                evaluate(app(home), quiet(mode=Mode.of_shard(1, 2)))
            monkeypatch.setenv(LOCK_TIMEOUT_ENV, "120")
            waiting = subprocess.Popen(_shard_cmd(home, "1/2"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, env={**cli_env(), LOCK_TIMEOUT_ENV: "120"})
            time.sleep(2)
            assert waiting.poll() is None, "the shard waits for the resume"
        finally:
            server.release_held()
        _, err = resume.communicate(timeout=300)
        assert resume.returncode == 0, err
        out, err = waiting.communicate(timeout=300)
        assert waiting.returncode == 0, err
        assert (json.loads(out)["merged"], json.loads(out)["status"]) == (0, "finished")
        assert server.stats()["requests_seen"] == 40, "each item is requested once"
    records = AuditTrail(home.audit_path).records()
    refusal = next(r["objects"] for r in records if r["action"] == "run.finish" and r["outcome"] == "failure")
    assert refusal == {"shard": "1/2", "error_type": "StoreError"}, "the refused shard concludes nothing"
    assert unfinished(records) == []
    (run,) = summarize(records, None).runs
    assert (run.outcome, run.resumed, run.scored) == ("success", 1, 40)


def test_a_resume_merges_the_shard_files_dead_shards_left_first(tmp_path: Path) -> None:
    """A shard that died after its last request left its file unmerged; `run --resume` sent that file's items again
    (the merge after kept the resume's outcomes). It merges the file first now and sends only what no shard
    answered."""
    instances = synthetic_instances(40)
    with FakeOpenAIServer(responder=hash_responder()) as server:
        reference = make_home(tmp_path / "reference", [server.base_url])
        register(reference, instances)
        ref = evaluate(app(reference), quiet())
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, instances)
        before = server.stats()["requests_seen"]
        shard_killed_before_merging(home, 0, 2)
        with Store.open(home, read_only=True) as store:
            (run,) = store.list_runs()
        assert len(sharding.pending_shard_files(home, run.run_id)) == 1
        resumed = evaluate(app(home), quiet(mode=Mode.resume(run.run_id)))
        assert server.stats()["requests_seen"] - before == 40, "each item is requested once"
    assert (resumed.run.status, [(r.benchmark, r.n) for r in resumed.results]) == ("finished", [("pubmedqa", 40)])
    assert sharding.pending_shard_files(home, run.run_id) == []
    assert outcomes(home, run.run_id) == outcomes(reference, ref.run.run_id)
    assert scores(home, run.run_id) == scores(reference, ref.run.run_id)
    records = AuditTrail(home.audit_path).records()
    steps = [(r["action"], r["objects"].get("merged")) for r in records if r["action"] in ("run.merge", "run.resume")]
    assert steps == [("run.merge", 20), ("run.resume", None)]
    assert unfinished(records) == []
