"""End to end through ``run``: a jury-scored benchmark is judged by the configured judges after inference, and
the leaderboard shows the jury score with its failures counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from medhelm_local.home.config import ModelEndpoint
from medhelm_local.records import Instance
from medhelm_local.store import Store
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.conftest import Cli, cli_env
from tests.scoring.helpers import make_home, register

SECRET = "Ottoline-Brackwater"


def respond(messages: list[dict[str, Any]]) -> str:
    content = messages[-1]["content"]
    if "Evaluation Criteria" in content:  # a judge prompt
        if "drug 2" in content:
            return "not json at all"
        return json.dumps({c: {"score": 4, "explanation": f"{SECRET} fine"}
                           for c in ("accuracy", "completeness", "clarity")})
    return f"Take it with food, {SECRET}."


def test_run_scores_an_open_ended_benchmark_with_the_jury(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=respond) as server:
        home = make_home(tmp_path / "home", {"j1": server.base_url, "j2": server.base_url}, max_retries=0)
        config = home.config.model_copy(deep=True)
        config.models.append(ModelEndpoint(name="candidate", base_urls=[server.base_url], timeout_s=5.0))
        home.save_config(config)
        data = [Instance(benchmark="medication_qa", id=f"m{i}", fields={"question": f"Can I take drug {i}?"},
                         references=["Yes, with food."]) for i in range(4)]
        with Store.open(home) as store:
            register(store, "medication_qa", data)
        cli = Cli(home=home.root, env=cli_env())
        run = cli("run", "--model", "candidate", "--benchmarks", "medication_qa", "--json")
        assert run.code == 0, run.stderr
        board = cli("leaderboard", "--json", "--resamples", "50")
        failures = cli("jury", "failures", "--json")
    (result,) = run.json()["results"]
    assert result["metric"] == "jury"
    # drug 2: both judges replied with invalid JSON, so that answer has no valid rating: excluded and counted
    assert result["n"] == 3 and result["n_failed"] == 1
    assert result["score"] == 0.75  # every valid rating is 4; invalid replies add nothing
    rows = board.json()
    assert isinstance(rows, list)
    assert rows[0]["benchmarks"]["medication_qa"]["score"] == 0.75
    assert rows[0]["benchmarks"]["medication_qa"]["judge_failure_rates"] == {"j1": 0.25, "j2": 0.25}
    rates = failures.json()
    assert isinstance(rates, list)
    assert {(r["judge"], r["invalid_reply"], r["total"]) for r in rates} == {("j1", 1, 4), ("j2", 1, 4)}
    for output in (run.stdout, run.stderr, board.stdout, board.stderr, failures.stdout):
        assert SECRET not in output


def test_readers_get_the_store_while_the_judges_think(tmp_path: Path) -> None:
    """While a run waits on its judge, another process can read the store (the jury gives its lock back between
    judgements, as the runner does between commit rounds)."""
    import os
    import subprocess
    import sys

    readers: list[int] = []
    home_root = tmp_path / "home"

    def judge_then_read(messages: list[dict[str, Any]]) -> str:
        if "Evaluation Criteria" in messages[-1]["content"]:
            env = {**os.environ, **cli_env(), "MEDHELM_LOCK_TIMEOUT_S": "0"}
            listed = subprocess.run([sys.executable, "-m", "medhelm_local.cli", "--home", str(home_root), "runs",
                                     "list", "--json"], capture_output=True, text=True, env=env, timeout=120)
            readers.append(listed.returncode)
            return json.dumps({c: {"score": 4, "explanation": "fine"} for c in ("accuracy", "completeness",
                                                                               "clarity")})
        return "Take it with food."

    with FakeOpenAIServer(responder=judge_then_read) as server:
        home = make_home(home_root, {"j1": server.base_url}, max_retries=0)
        config = home.config.model_copy(deep=True)
        config.models.append(ModelEndpoint(name="candidate", base_urls=[server.base_url], timeout_s=120.0))
        config.models = [m.model_copy(update={"timeout_s": 120.0}) for m in config.models]
        home.save_config(config)
        data = [Instance(benchmark="medication_qa", id="m0", fields={"question": "Can I take drug 0?"},
                         references=["Yes, with food."])]
        with Store.open(home) as store:
            register(store, "medication_qa", data)
        run = Cli(home=home.root, env=cli_env())("run", "--model", "candidate", "--benchmarks", "medication_qa",
                                                 "--json")
    assert run.code == 0, run.stderr
    assert readers == [0]


def test_jury_failures_of_an_unknown_run_or_benchmark_is_bad_input(home_cli: Cli) -> None:
    # a mistyped run id must not read as "no failures" (an empty table, exit 0)
    for args, message in ((("--run", "run-typo"), "no run 'run-typo'"), (("--benchmark", "medication_q"),
                                                                        "unknown benchmark 'medication_q'")):
        result = home_cli("jury", "failures", *args, "--json")
        assert result.code == 2 and message in result.stderr, result.stderr
        assert result.stdout == "" and "Traceback" not in result.stderr
    assert home_cli("jury", "failures", "--json").code == 0


def test_a_judge_done_before_a_kill_keeps_its_manifest_entry(tmp_path: Path) -> None:
    """kill -9 while a slow judge is still judging, after a fast one has judged everything: the resumed run's
    manifest names both judges (``jury.judges``), as an uninterrupted run's does; the fast judge, with nothing
    left to ask, must not lose its entry."""
    import signal
    import subprocess
    import sys
    import time

    n = 6
    valid = json.dumps({c: {"score": 4, "explanation": "fine"} for c in ("accuracy", "completeness", "clarity")})

    def answer(messages: list[dict[str, Any]]) -> str:
        return valid if "Evaluation Criteria" in messages[-1]["content"] else "Take it with food."

    with FakeOpenAIServer(responder=answer) as fast, \
            FakeOpenAIServer(responder=answer, latency_s=0.5, slots=1) as slow:
        home = make_home(tmp_path / "home", {"j1": fast.base_url, "j2": slow.base_url}, max_retries=0)
        config = home.config.model_copy(deep=True)
        config.models.append(ModelEndpoint(name="candidate", base_urls=[fast.base_url], timeout_s=5.0))
        home.save_config(config)
        data = [Instance(benchmark="medication_qa", id=f"m{i}", fields={"question": f"Can I take drug {i}?"},
                         references=["Yes, with food."]) for i in range(n)]
        with Store.open(home) as store:
            register(store, "medication_qa", data)
        command = [sys.executable, "-m", "medhelm_local.cli", "--home", str(home.root), "run", "--model",
                   "candidate", "--benchmarks", "medication_qa", "--json"]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env())
        deadline = time.monotonic() + 120
        # every answer and every j1 judgement done; j2 part-way
        while (fast.stats()["completions_sent"] < 2 * n or slow.stats()["completions_sent"] < 2) \
                and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.1)  # j1's last judgement committed
        assert proc.poll() is None and slow.stats()["completions_sent"] < n
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        resumed = Cli(home=home.root, env=cli_env())("run", "--model", "candidate", "--benchmarks", "medication_qa",
                                                     "--json")
        assert resumed.code == 0, resumed.stderr
    run_id = resumed.json()["run_id"]
    with Store.open(home, read_only=True) as store:
        run = store.get_run(run_id)
        statuses = store.conn.execute("SELECT judge, count(*) FROM judgments WHERE run_id = ? AND status = 'ok' "
                                      "GROUP BY judge ORDER BY judge", [run_id]).fetchall()
    assert statuses == [("j1", n), ("j2", n)]
    assert run is not None
    assert sorted(run.manifest["jury"]["judges"]) == ["j1", "j2"]


def test_the_run_says_judgements_failed_not_requests(capsys: Any) -> None:
    """Answers with no valid jury rating are not failed requests: `run` names the jury commands that say why and
    ask again, not "request(s) failed after retries" (which sent the user to `run --retry-errors`, with nothing to
    re-send); a benchmark with both says both."""
    from datetime import datetime

    from medhelm_local.application.evaluation import RunOutcome
    from medhelm_local.commands.run import print_outcome
    from medhelm_local.records import BenchmarkScore
    from medhelm_local.store.store import RunInfo

    run = RunInfo(run_id="run-1", model="m", benchmarks=["summary", "followup"], created_at=datetime(2026, 1, 1),
                  finished_at=None, status="finished", max_instances=None, seed=0, manifest={})
    results = [BenchmarkScore(model="m", benchmark="summary", metric="jury", score=0.5, n=30, n_failed=9),
               BenchmarkScore(model="m", benchmark="followup", metric="exact_match", score=0.5, n=10, n_failed=2)]
    print_outcome(RunOutcome(run=run, mode="new", results=results,
                             errors={"summary": {"timeout": 2}, "followup": {"http_5xx": 2}}))
    err = capsys.readouterr().err
    assert "4 request(s) failed after retries" in err, err
    assert "7 answer(s) got no valid jury rating" in err and "jury failures" in err
    assert "jury rescore --run run-1" in err
