"""`runs list` / `runs show` tell a run a process is sending from one left `running` by a killed process."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from medhelm_local.home import Home
from medhelm_local.home.config import ConsoleRole
from medhelm_local.store import Store
from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
from tests.runner.helpers import cli_argv, cli_env, make_home, register, run_argv, synthetic_instances


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


def _console_page(home: Home, path: str) -> str:
    from starlette.testclient import TestClient

    from medhelm_local.webconsole.app import create_app
    from medhelm_local.webconsole.identity import StandaloneSessions

    sessions = StandaloneSessions(user="ines", roles=frozenset({ConsoleRole.INFORMATICS, ConsoleRole.IT}))
    with TestClient(create_app(Home(home.root), sessions), raise_server_exceptions=False) as client:
        assert client.get(f"/login?token={sessions.new_login_token()}").status_code == 200
        page = client.get(path)
    assert page.status_code == 200, page.text
    return " ".join(page.text.split())


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
            assert "no process is sending it" not in _console_page(home, f"/runs/{run_id}")
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
                in _console_page(home, page)
            ), page
        with Store.open(home, read_only=True) as store:
            stored = store.get_run(run_id)
        assert stored is not None and stored.status == "running", "a reader must not write"

        _cli(home, "run", "--resume", run_id, "--json")
    finished = _listed(home)
    assert (finished["status"], finished["live"]) == ("finished", None)
