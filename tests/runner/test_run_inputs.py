"""Bad input to `run` is a clear error with exit code 2; a run only resumes against the same model."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm_local.application.evaluation import Mode, Selection, evaluate
from medhelm_local.errors import BadInputError
from medhelm_local.runner.plan import parse_shard
from medhelm_local.store import Store
from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
from tests.runner.helpers import app, make_home, quiet, register, synthetic_instances


@pytest.mark.parametrize("value", ["3/3", "a/b", "1", "-1/2", "0/0"])
def test_bad_shard_values(value: str) -> None:
    with pytest.raises(BadInputError):
        parse_shard(value)


def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    register(home, synthetic_instances(5))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDHELM_")}
    base = [sys.executable, "-m", "medhelm_local.cli", "--home", str(home.root), "run"]
    for args in (["--benchmarks", "pubmedqa"], ["--model", "fake", "--benchmarks", "pubmedqa", "--shard", "9/2"],
                 ["--model", "fake", "--benchmarks", "pubmedqa", "--order", "random"],
                 ["--model", "fake", "--benchmarks", "pubmedqa", "--run-id", "bad id!"],
                 ["--model", "fake", "--benchmarks", "nope"],
                 ["--resume", "run-a", "--retry-errors", "run-b"],
                 ["--model", "fake", "--benchmarks", "pubmedqa", "--shard", "0/2", "--new-run"]):
        done = subprocess.run([*base, *args], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 2, (args, done.stderr)
        assert "error" in done.stderr and "Traceback" not in done.stderr
    with Store.open(home, read_only=True) as store:
        assert store.list_runs() == []


def test_resume_refuses_a_different_server_version(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=hash_responder(), version="1.0.0") as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(5))
        first = evaluate(app(home), quiet())
        server.version = "2.0.0"
        with pytest.raises(BadInputError, match="server_versions"):
            evaluate(app(home), quiet(Selection(), Mode.resume(first.run.run_id)))
    with Store.open(home, read_only=True) as store:
        run = store.get_run(first.run.run_id)
    assert run is not None and run.status == "finished"  # a refused resume does not touch the run


def test_a_plan_option_given_on_resume_or_retry_must_be_the_runs_own(tmp_path: Path) -> None:
    """`run --resume RUN --max-instances 30` on a run of 10 sent the 10 and exited 0, as if the sample had grown (so
    did another --seed, --benchmarks or --order): the option was silently ignored. It is refused now (exit 2,
    naming the option and the run's own value); the run's own values are accepted."""
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(40))
        first = evaluate(app(home), quiet(Selection(model="fake", benchmarks=["pubmedqa"], max_instances=10, seed=1,
                                                    order="plan")))
        run_id = first.run.run_id
        sent = server.stats()["requests_seen"]
        for other, message in ((dict(max_instances=30), "--max-instances: .* planned with 10, not 30"),
                               (dict(seed=7), "--seed: .* planned with 1, not 7"),
                               (dict(benchmarks=["medcalc_bench"]), "--benchmarks: .* planned with pubmedqa, not "
                                                                    "medcalc_bench"),
                               (dict(order="shuffle"), "--order: .* planned with plan, not shuffle")):
            for mode in (Mode.resume(run_id), Mode.retry_errors(run_id)):
                with pytest.raises(BadInputError, match=message):
                    evaluate(app(home), quiet(Selection(**other), mode))
        own = Selection(model="fake", benchmarks=["pubmedqa"], max_instances=10, seed=1, order="plan")
        again = evaluate(app(home), quiet(own, Mode.resume(run_id)))
        assert again.run.run_id == run_id and server.stats()["requests_seen"] == sent  # nothing left to send
        whole = evaluate(app(home), quiet(Selection(model="fake", benchmarks=["pubmedqa"]), Mode.new(always_new=True)))
        with pytest.raises(BadInputError, match=r"--max-instances: .* planned with all, not 10"):
            evaluate(app(home), quiet(Selection(max_instances=10), Mode.resume(whole.run.run_id)))


def test_skip_scoring_says_how_to_score_the_run_later(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDHELM_")}
    base = [sys.executable, "-m", "medhelm_local.cli"]
    helped = subprocess.run([*base, "run", "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert "medhelm-local score`" not in helped.stdout  # `score` reads a predictions file, never a run
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(5))
        done = subprocess.run([*base, "--home", str(home.root), "run", "--model", "fake", "--benchmarks", "pubmedqa",
                               "--skip-scoring"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    with Store.open(home, read_only=True) as store:
        (run,) = store.list_runs()
    assert run.status == "inferred"
    assert f"`medhelm-local run --resume {run.run_id}` scores it" in done.stderr


def test_skip_scoring_a_jury_benchmark_needs_no_judges_yet(tmp_path: Path) -> None:
    """`--skip-scoring` runs inference only (the jury scores later), yet a jury-scored benchmark was refused for
    want of judges before any request; scoring it still needs them."""
    from medhelm_local.errors import ConfigError
    from medhelm_local.records import Instance

    questions = [Instance(benchmark="medication_qa", id=f"m{i}", fields={"question": f"Can I take drug {i}?"},
                          references=[f"Reference answer {i}."]) for i in range(3)]
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        assert home.config.judges == []
        register(home, questions, benchmark="medication_qa")
        selection = Selection(model="fake", benchmarks=["medication_qa"])
        inferred = evaluate(app(home), dataclasses.replace(quiet(selection), score=False))
        assert inferred.run.status == "inferred" and inferred.report is not None and inferred.report.ok == 3
        with pytest.raises(ConfigError, match="no judges are configured"):
            evaluate(app(home), quiet(selection, Mode.from_flags(resume=inferred.run.run_id)))
