"""`run --shard I/N`: pods split a run and merge into one run, identical to an unsharded one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from medhelm_local.application.evaluation import evaluate
from medhelm_local.home import Home
from medhelm_local.runner.plan import parse_shard, shard_range
from medhelm_local.store import Store
from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
from tests.runner.helpers import app, make_home, outcomes, quiet, register, scores, synthetic_instances

N = 150


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDHELM_")}
    env["MEDHELM_LOG_LEVEL"] = "WARNING"
    return env


def _shard_cmd(home: Home, shard: str) -> list[str]:
    return [sys.executable, "-m", "medhelm_local.cli", "--home", str(home.root), "run", "--model", "fake",
            "--benchmarks", "pubmedqa", "--shard", shard, "--concurrency", "8", "--json"]


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
                                  env=_env())
        target = server.stats()["requests_seen"] + 10
        deadline = time.monotonic() + 120
        while server.stats()["requests_seen"] < target and victim.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        procs = [subprocess.Popen(_shard_cmd(home, f"{i}/3"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=_env()) for i in range(3)]
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
    assert modes == {"0/3", "1/3", "2/3"}
    assert outcomes(home, run_id) == outcomes(reference, ref.run.run_id)
    assert scores(home, run_id) == scores(reference, ref.run.run_id)
    assert not (home.store_path.parent / "shards" / run_id).exists(), "merged shard files are removed"
