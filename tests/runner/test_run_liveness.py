"""`runs list` / `runs show` tell a run a process is sending from one left `running` by a killed process."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from medhelm_local.home import Home
from medhelm_local.store import Store
from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
from tests.runner.helpers import (
    cli_argv,
    cli_env,
    console_page,
    make_home,
    register,
    run_argv,
    synthetic_instances,
)


def _cli(home: Home, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        cli_argv(home, *args),
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def _listed(home: Home) -> dict[str, Any]:
    (row,) = json.loads(_cli(home, "runs", "list", "--json").stdout)
    return dict(row)


def test_a_killed_run_is_shown_as_not_sent_and_a_live_one_as_sent(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=hash_responder(), latency_s=0.2, slots=8) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(300, contexts=30))
        proc = subprocess.Popen(run_argv(home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env())
        try:
            deadline = time.monotonic() + 120
            while server.stats()["requests_seen"] < 16:
                assert proc.poll() is None and time.monotonic() < deadline, "the runner never started sending"
                time.sleep(0.01)
            sending = _listed(home)
            run_id = sending["run_id"]
            assert (sending["status"], sending["live"]) == ("running", True)
            shown = json.loads(_cli(home, "runs", "show", run_id, "--json").stdout)
            assert (shown["status"], shown["live"]) == ("running", True)
            assert "no process is sending it" not in console_page(home, f"/runs/{run_id}")
            assert proc.poll() is None, "the run must still be sending while it is read"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)

        killed = _listed(home)
        assert (killed["status"], killed["live"]) == ("running", False)  # the stored status, untouched
        shown = json.loads(_cli(home, "runs", "show", run_id, "--json").stdout)
        assert (shown["status"], shown["live"]) == ("running", False)
        text = _cli(home, "runs", "show", run_id).stdout
        assert f"medhelm-local run --resume {run_id}" in " ".join(text.split())
        for page in ("/runs", f"/runs/{run_id}", "/system"):
            assert (
                f"interrupted (no process is sending it; resume with: medhelm-local run --resume {run_id})"
                in console_page(home, page)
            ), page
        with Store.open(home, read_only=True) as store:
            stored = store.get_run(run_id)
        assert stored is not None and stored.status == "running", "a reader must not write"

        _cli(home, "run", "--resume", run_id, "--json")
    finished = _listed(home)
    assert (finished["status"], finished["live"]) == ("finished", None)


def test_a_sharded_run_is_live_while_any_shard_sends_and_interrupted_once_none_does(tmp_path: Path) -> None:
    """Shards send without the run lock: a sharded run was shown 'running (unknown whether a process is sending
    it now)' (`live` null) whether its shards were at work or all killed. Each shard holds the run's shard lock
    now: live while any does, interrupted once none does, with the commands that resume it."""
    from medhelm_local.audit.report import NO_OUTCOME_YET, RUN_IN_PROGRESS
    from medhelm_local.runner import shard as sharding

    with FakeOpenAIServer(responder=hash_responder(), hold_after=0) as server:  # every request waits unanswered
        home = make_home(tmp_path / "home", [server.base_url], timeout_s=60)
        register(home, synthetic_instances(40))
        shards = [subprocess.Popen(run_argv(home, "--shard", f"{i}/2", "--run-id", "ward-7"),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env())
                  for i in range(2)]
        try:
            deadline = time.monotonic() + 120
            while len(sharding.pending_shard_files(home, "ward-7")) < 2 or server.held == 0:
                assert all(p.poll() is None for p in shards) and time.monotonic() < deadline, "the shards never sent"
                time.sleep(0.02)
            assert (_listed(home)["status"], _listed(home)["live"]) == ("running", True)
            (unfinished,) = json.loads(_cli(home, "audit", "report", "--json").stdout)["unfinished"]
            assert unfinished["status"] == RUN_IN_PROGRESS
            shards[0].send_signal(signal.SIGKILL)
            shards[0].wait(timeout=30)
            assert _listed(home)["live"] is True, "shard 1/2 still sends"
            assert shards[1].poll() is None
        finally:
            for proc in shards:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
            server.release_held()

        killed = _listed(home)
        assert (killed["status"], killed["live"]) == ("running", False)
        advice = ("interrupted (no process is sending it; resume with: medhelm-local runs merge ward-7, then "
                  "medhelm-local run --resume ward-7 if it is still unfinished)")
        assert killed["status_text"] == advice
        assert advice in console_page(home, "/runs/ward-7")
        (unfinished,) = json.loads(_cli(home, "audit", "report", "--json").stdout)["unfinished"]
        assert unfinished["status"] == NO_OUTCOME_YET

        _cli(home, "runs", "merge", "ward-7", "--json")  # what the advice says, in that order
        assert _listed(home)["status_text"] == ("interrupted (no process is sending it; resume with: medhelm-local "
                                                "run --resume ward-7)")
        _cli(home, "run", "--resume", "ward-7", "--json")
    finished = _listed(home)
    assert (finished["status"], finished["live"], finished["answered"]) == ("finished", None, 40)
