"""A run keeps the options it sends with (concurrency, initial concurrency, request timeout, retries): after a crash,
`run --resume` and `run --retry-errors` send as the first invocation did, never with the defaults; an option given
again is used, becomes the run's, and is audited."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from medhelm_local.home import Home
from medhelm_local.store import Store
from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
from tests.runner.helpers import cli_argv, cli_env, make_home, register, synthetic_instances
from tests.store import previous_release

N = 160


def _json(home: Home, *args: str) -> Any:
    done = subprocess.run(cli_argv(home, *args, "--json"), capture_output=True, text=True, env=cli_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _killed_when_full(server: FakeOpenAIServer, home: Home, cap: int, *args: str) -> int:
    """Run ``run ARGS``; once ten more requests were answered, the server holds every further one: when ``cap`` of
    them wait (the session's whole allowance), the process is killed, as a crash would. Returns the peak in
    flight the server saw."""
    server.max_in_flight = 0
    server.hold_after = server.stats()["requests_seen"] + 10
    proc = subprocess.Popen(cli_argv(home, "run", *args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=cli_env())
    deadline = time.monotonic() + 120
    try:
        while server.held < cap and proc.poll() is None:
            assert time.monotonic() < deadline, "the runner never filled its allowance"
            time.sleep(0.005)
        time.sleep(0.2)  # time to send more than the cap, were it not kept
        peak = server.max_in_flight
    finally:
        proc.kill()
        proc.wait()
        server.hold_after = None
        server.release_held()
    return peak


def _run_id(home: Home) -> str:
    with Store.open(home, read_only=True) as store:
        (run,) = store.list_runs()
    return run.run_id


def _audited(home: Home, action: str) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in home.audit_path.read_text().splitlines()]
    return [r["objects"] for r in records if r.get("action") == action]


def test_a_resumed_run_sends_as_it_was_started_unless_an_option_is_given_again(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=hash_responder(), latency_s=0.02) as server:
        home = make_home(tmp_path / "home", [server.base_url], max_concurrency=64, timeout_s=5.0, max_retries=6)
        register(home, synthetic_instances(N))
        first = _killed_when_full(
            server,
            home,
            2,
            "--model",
            "fake",
            "--benchmarks",
            "pubmedqa",
            "--concurrency",
            "2",
            "--request-timeout",
            "7",
            "--max-retries",
            "1",
        )
        assert first == 2
        run_id = _run_id(home)
        # Resumed without the options: the run's own, not the config's 64 (the old behaviour: up to 64 in flight).
        assert _killed_when_full(server, home, 2, "--resume", run_id) == 2
        started = {"concurrency": 2, "initial_concurrency": None, "request_timeout_s": 7.0, "max_retries": 1}
        assert _json(home, "runs", "show", run_id)["sending"] == started

        # Given again: used, kept as the run's, audited.
        assert _killed_when_full(server, home, 3, "--resume", run_id, "--concurrency", "3") == 3
        now = {**started, "concurrency": 3}
        shown = _json(home, "runs", "show", run_id)
        assert shown["sending"] == now
        assert [s["sending"] for s in shown["sessions"]] == [started, started, now]

        server.max_in_flight = 0
        finished = _json(home, "run", "--resume", run_id)
        assert finished["status"] == "finished" and finished["sending"] == now
        assert 0 < server.max_in_flight <= 3
        retried = _json(home, "run", "--retry-errors", run_id)
        assert retried["sending"] == now

    assert _audited(home, "run.start")[0]["sending"] == started
    resumes = _audited(home, "run.resume")
    assert [r["sending"] for r in resumes] == [started, now, now, now]
    assert [r.get("sending_changed") for r in resumes] == [None, {"concurrency": [2, 3]}, None, None]


def test_a_run_from_before_runs_kept_their_options_still_opens_and_keeps_them_from_its_next_resume(
    tmp_path: Path,
) -> None:
    with FakeOpenAIServer(responder=hash_responder(), latency_s=0.01) as server:
        home = make_home(tmp_path / "home", [server.base_url], max_concurrency=8, timeout_s=5.0, max_retries=2)
        register(home, synthetic_instances(60))
        _killed_when_full(server, home, 4, "--model", "fake", "--benchmarks", "pubmedqa", "--concurrency", "4")
        run_id = _run_id(home)
        with Store.open(home) as store:  # the store as the previous release left it
            previous_release.downgrade(store.conn)

        shown = _json(home, "runs", "show", run_id)  # a reader, first after the upgrade: migrated first
        assert shown["sending"] is None and [s["sending"] for s in shown["sessions"]] == [None]

        finished = _json(home, "run", "--resume", run_id)  # nothing kept: the defaults, kept from now on
        defaults = {"concurrency": 8, "initial_concurrency": None, "request_timeout_s": 5.0, "max_retries": 2}
        assert finished["status"] == "finished" and finished["sending"] == defaults
        shown = _json(home, "runs", "show", run_id)
        assert shown["sending"] == defaults
        assert [s["sending"] for s in shown["sessions"]] == [None, defaults]
