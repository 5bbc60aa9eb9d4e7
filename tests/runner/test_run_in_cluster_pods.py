"""In the Helm chart's pods, hints to finish a run name a Job from the runner CronJob, and `run` typed in the
toolbox (which reaches DNS only) is refused before anything is sent."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

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

CRONJOB = "medhelm-medhelm-local-runner"
IN_CHART = {"MEDHELM_RUNNER_CRONJOB": CRONJOB}
IN_TOOLBOX = IN_CHART | {"MEDHELM_NO_MODEL_EGRESS": "1"}


def _cli(home: Home, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli_argv(home, *args), capture_output=True, text=True, env=cli_env() | (env or {}),
                          timeout=120)


def _killed_run(home: Home, server: FakeOpenAIServer) -> str:
    """A run whose process was killed mid-way: stored `running`, no process sending it."""
    proc = subprocess.Popen(run_argv(home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env())
    try:
        deadline = time.monotonic() + 120
        while server.stats()["requests_seen"] < 16:
            assert proc.poll() is None and time.monotonic() < deadline, "the runner never started sending"
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    (row,) = json.loads(_cli(home, "runs", "list", "--json").stdout)
    return str(row["run_id"])


def test_in_the_chart_hints_name_a_job_and_the_toolbox_refuses_to_send(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    job = (f"runner.command: [medhelm-local, run, --resume, {{run}}, --json] in the values, helm upgrade, then "
           f"kubectl create job --from=cronjob/{CRONJOB} JOB_NAME")
    with FakeOpenAIServer(responder=hash_responder(), latency_s=0.2, slots=8) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(300, contexts=30))
        run_id = _killed_run(home, server)
        job = job.format(run=run_id)

        # Elsewhere (workstation, compose): the command itself.
        (row,) = json.loads(_cli(home, "runs", "list", "--json").stdout)
        assert f"resume with: medhelm-local run --resume {run_id})" in row["status_text"]

        # In the chart's pods: a Job from the runner CronJob, in `runs list`, `runs show` and the console.
        (row,) = json.loads(_cli(home, "runs", "list", "--json", env=IN_TOOLBOX).stdout)
        assert job in row["status_text"] and "resume with: medhelm-local run" not in row["status_text"]
        shown = " ".join(_cli(home, "runs", "show", run_id, env=IN_TOOLBOX).stdout.split())
        assert job in shown and f"medhelm-local run --resume {run_id}" not in shown
        monkeypatch.setenv("MEDHELM_RUNNER_CRONJOB", CRONJOB)
        for page in ("/runs", f"/runs/{run_id}", "/system"):
            text = console_page(home, page)
            assert job in text and f"medhelm-local run --resume {run_id}" not in text, page

        # `run --resume` typed in the toolbox: refused, exit 2, nothing sent, the run left as it was.
        seen = server.stats()["requests_seen"]
        for argv, names in ((["run", "--resume", run_id], job),
                            (["run", "--retry-errors", run_id], job.replace("--resume", "--retry-errors")),
                            (["run", "--model", "fake", "--benchmarks", "pubmedqa", "--new-run"],
                             "set runner.model and runner.benchmarks (or runner.command)")):
            refused = _cli(home, *argv, env=IN_TOOLBOX)
            assert refused.returncode == 2, refused.stderr
            said = " ".join(refused.stderr.split())
            assert "this pod reaches none" in said and names in said, said
            assert f"kubectl create job --from=cronjob/{CRONJOB} JOB_NAME" in said, said
        assert server.stats()["requests_seen"] == seen
        with Store.open(home, read_only=True) as store:
            runs = store.list_runs()
        assert [(r.run_id, r.status) for r in runs] == [(run_id, "running")]

        # The Job's pod (no MEDHELM_NO_MODEL_EGRESS) finishes it.
        finished = _cli(home, "run", "--resume", run_id, "--json", env=IN_CHART)
        assert finished.returncode == 0, finished.stderr
    (row,) = json.loads(_cli(home, "runs", "list", "--json").stdout)
    assert row["status"] == "finished"
