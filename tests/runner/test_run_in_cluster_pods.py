"""In the Helm chart's pods, hints to finish a run name a Job from the runner CronJob, and `run` typed in the
toolbox (which reaches DNS only) is refused before anything is sent; so is every other command that asks a model or
judge server there (`jury rescore`, `score` and `runs merge` where judges score, `models wait`)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from medhelm_local.audit.trail import AuditTrail
from medhelm_local.home import Home
from medhelm_local.home.config import EMBEDDED_MODEL_NAME, ModelEndpoint
from medhelm_local.records import Instance
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
from tests.scoring import helpers as scoring_helpers

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


def _judged(messages: list[dict[str, str]]) -> str:
    """The candidate's answers, and the judges' ratings: invalid for drug 1, so `jury rescore` has one to ask."""
    content = messages[-1]["content"]
    if "Evaluation Criteria" not in content:
        return "Take it with food."
    if "drug 1" in content:
        return "not json at all"
    return json.dumps({c: {"score": 4, "explanation": "fine"} for c in ("accuracy", "completeness", "clarity")})


def _stored(home: Home) -> tuple[int, int, list[str]]:
    """What the toolbox's refusals must leave as it was: judgements, runs, the trail's actions."""
    with Store.open(home, read_only=True) as store:
        judgments = store.conn.execute("SELECT count(*) FROM judgments").fetchone()
        runs = store.conn.execute("SELECT count(*) FROM runs").fetchone()
    assert judgments is not None and runs is not None
    return int(judgments[0]), int(runs[0]), [str(r.get("action")) for r in AuditTrail(home.audit_path).records()]


def test_the_toolbox_refuses_every_command_that_asks_a_model_or_judge_server(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=_judged) as server:
        home = scoring_helpers.make_home(tmp_path / "home", {"j1": server.base_url, "j2": server.base_url},
                                         max_retries=0)
        config = home.config.model_copy(deep=True)
        config.models.append(ModelEndpoint(name="candidate", base_urls=[server.base_url], timeout_s=5.0))
        home.save_config(config)
        with Store.open(home) as store:
            scoring_helpers.register(store, "medication_qa", [
                Instance(benchmark="medication_qa", id=f"m{i}", fields={"question": f"Can I take drug {i}?"},
                         references=["Yes, with food."]) for i in range(3)])
        run = _cli(home, "run", "--model", "candidate", "--benchmarks", "medication_qa", "--json", env=IN_CHART)
        assert run.returncode == 0, run.stderr
        run_id = str(json.loads(run.stdout)["run_id"])
        with Store.open(home) as store:  # as a sharded run whose pods died: `runs merge` would finish and score it
            store.set_run_status(run_id, "interrupted")
        predictions = tmp_path / "predictions.jsonl"
        predictions.write_text("".join(json.dumps({"id": f"m{i}", "output": "With food."}) + "\n" for i in range(3)))

        job = f"kubectl create job --from=cronjob/{CRONJOB} JOB_NAME"
        seen, before = server.stats()["requests_seen"], _stored(home)
        for argv, names in (
                (["jury", "rescore", "--run", run_id],
                 f"jury rescore asks the judges (j1, j2), and this pod reaches none (its NetworkPolicies allow DNS "
                 f"only): run it as a Job: set runner.command: [medhelm-local, jury, rescore, --run, {run_id}, "
                 f"--json] in the values, helm upgrade, then {job}"),
                (["jury", "rescore", "--run", run_id, "--benchmark", "medication_qa", "--json"],
                 f"runner.command: [medhelm-local, jury, rescore, --run, {run_id}, --benchmark, medication_qa, "
                 "--json]"),
                (["score", "medication_qa", "--predictions", str(predictions)],
                 f"score asks the judges (j1, j2) to score medication_qa, and this pod reaches none (its "
                 f"NetworkPolicies allow DNS only): run it as a Job: set runner.command: [medhelm-local, score, "
                 f"medication_qa, --predictions, {predictions}, --prompt-style, default, --json] in the values, "
                 f"helm upgrade, then {job}"),
                (["models", "wait", "--timeout", "60"], "models wait probes the model servers, and this pod "
                 "reaches none (its NetworkPolicies allow DNS only): a Job from the runner CronJob waits for them"),
                (["runs", "merge", run_id],
                 f"runs merge scores run {run_id} once complete, asking the judges (j1, j2), and this pod reaches "
                 f"none (its NetworkPolicies allow DNS only): finish it as a Job: set runner.command: [medhelm-local, "
                 f"run, --resume, {run_id}, --json]"),
                # An embedded model is on loopback, but its run, scored now, asks the judges.
                (["run", "--model", EMBEDDED_MODEL_NAME, "--benchmarks", "medication_qa", "--new-run"],
                 "run asks the judges (j1, j2) to score it, and this pod reaches none")):
            refused = _cli(home, *argv, env=IN_TOOLBOX)
            said = " ".join(refused.stderr.split())
            assert refused.returncode == 2 and names in said, (argv, said)
        assert server.stats()["requests_seen"] == seen
        assert _stored(home) == before

        # Nothing to ask: `models wait` of the embedded model alone, `runs merge --skip-scoring`.
        for argv in (["models", "wait", EMBEDDED_MODEL_NAME], ["runs", "merge", run_id, "--skip-scoring"]):
            allowed = _cli(home, *argv, env=IN_TOOLBOX)
            assert allowed.returncode == 0, (argv, allowed.stderr)
        assert server.stats()["requests_seen"] == seen

        # Where the servers are reached (the Job's pod), the same commands ask them.
        rescored = _cli(home, "jury", "rescore", "--run", run_id, "--json", env=IN_CHART)
        assert rescored.returncode == 0, rescored.stderr
        assert [r["reasked"] for r in json.loads(rescored.stdout)] == [2]
        waited = _cli(home, "models", "wait", "candidate", "--timeout", "60", env=IN_CHART)
        assert waited.returncode == 0, waited.stderr
        assert server.stats()["requests_seen"] > seen
