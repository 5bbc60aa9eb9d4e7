"""Shared helpers for the runner tests: a home wired to fake servers, synthetic datasets."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.application.evaluation import EvaluationRequest, Mode, Selection, Sending, evaluate
from medhelm_local.context import AppContext
from medhelm_local.home import Home
from medhelm_local.home.config import ConsoleRole, ModelEndpoint, RunnerSettings
from medhelm_local.records import Instance
from medhelm_local.runner import shard as sharding
from medhelm_local.store import Store

LABELS = ("yes", "no", "maybe")


def synthetic_instances(n: int, *, contexts: int | None = None, context_chars: int = 400) -> list[Instance]:
    """``n`` PubMedQA-shaped instances; with ``contexts``, groups of instances share one long context."""
    out = []
    for i in range(n):
        c = i % contexts if contexts else i
        context = (f"Synthetic abstract {c}. " * (context_chars // 22 + 1))[:context_chars]
        label = LABELS[int(hashlib.sha256(str(i).encode()).hexdigest(), 16) % 3]
        out.append(Instance(benchmark="pubmedqa", id=f"q{i:06d}", fields={"context": context,
                                                                         "question": f"Question number {i}?"},
                            references=[label], label=label))
    return out


def make_home(root: Path, base_urls: list[str], *, served_model: str = "fake-model", timeout_s: float = 5.0,
              max_concurrency: int = 64, max_retries: int = 6, extra: dict[str, Any] | None = None) -> Home:
    home = Home(root)
    home.init()
    config = home.config.model_copy(deep=True)
    config.models.append(ModelEndpoint(name="fake", base_urls=base_urls, served_model=served_model,
                                       timeout_s=timeout_s, **(extra or {})))
    config.runner = RunnerSettings(max_concurrency=max_concurrency, max_retries=max_retries, seed=0)
    home.save_config(config)
    return home


def register(home: Home, instances: list[Instance], benchmark: str = "pubmedqa") -> None:
    source_sha = hashlib.sha256("".join(i.id for i in instances).encode()).hexdigest()
    with Store.open(home) as store:
        store.register_dataset(benchmark, source_sha, "synthetic-loader", "synthetic.json", instances, {})


FAKE_PUBMEDQA = Selection(model="fake", benchmarks=["pubmedqa"])


def quiet(selection: Selection = FAKE_PUBMEDQA, mode: Mode | None = None, *, backoff_base_s: float = 0.5
          ) -> EvaluationRequest:
    """An evaluation request without progress bars: the fake model on PubMedQA unless told otherwise."""
    return EvaluationRequest(selection, Sending(show_progress=False, backoff_base_s=backoff_base_s), mode or Mode())


def app(home: Home) -> AppContext:
    return AppContext(home=home, actor="tester")


def outcomes(home: Home, run_id: str) -> list[tuple[str, str, str | None, str | None]]:
    with Store.open(home, read_only=True) as store:
        rows = store.conn.execute(
            "SELECT benchmark, instance_id, output, error FROM responses WHERE run_id = ? "
            "ORDER BY benchmark, instance_id", [run_id]).fetchall()
    return [(str(r[0]), str(r[1]), r[2], r[3]) for r in rows]


def scores(home: Home, run_id: str) -> list[tuple[str, str, float | None]]:
    with Store.open(home, read_only=True) as store:
        rows = store.conn.execute(
            "SELECT benchmark, instance_id, value FROM scores WHERE run_id = ? ORDER BY benchmark, instance_id",
            [run_id]).fetchall()
    return [(str(r[0]), str(r[1]), r[2]) for r in rows]


class Clock:
    """A settable clock for the limiter's tests: ``now`` is what it reads."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def cli_env() -> dict[str, str]:
    """The environment of a CLI subprocess: this process's, without its MEDHELM_* settings, logging warnings only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDHELM_")}
    env["MEDHELM_LOG_LEVEL"] = "WARNING"
    return env


def cli_argv(home: Home, *args: str) -> list[str]:
    """The command line of the CLI on ``home``: ``medhelm-local --home HOME ARGS``."""
    return [sys.executable, "-m", "medhelm_local.cli", "--home", str(home.root), *args]


def run_argv(home: Home, *extra: str) -> list[str]:
    """``run`` of the fake model on PubMedQA, 8 in flight, as JSON."""
    return cli_argv(home, "run", "--model", "fake", "--benchmarks", "pubmedqa", "--concurrency", "8", "--json", *extra)


def shard_killed_before_merging(home: Home, index: int, count: int) -> None:
    """Shard ``index``/``count`` sends its slice and its pod is killed before it merges: its file is left."""

    def pod_killed(*_args: object, **_kwargs: object) -> int:
        raise RuntimeError("pod killed")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sharding, "merge_shard", pod_killed)
        with pytest.raises(RuntimeError, match="pod killed"):
            evaluate(app(home), quiet(mode=Mode.of_shard(index, count)))


# A shard process (its own, as a pod is) SIGKILLed while it builds its store: once the instances are copied in.
_KILLED_WHILE_BUILDING = """
import os, signal, sys
from pathlib import Path
from medhelm_local.application.evaluation import Mode, evaluate
from medhelm_local.home import Home
from medhelm_local.store import shards as shards_db
from tests.runner.helpers import app, quiet

copy_inputs = shards_db.copy_inputs

def killed(main, shard, items):
    copy_inputs(main, shard, items)
    os.kill(os.getpid(), signal.SIGKILL)

shards_db.copy_inputs = killed
evaluate(app(Home(Path(sys.argv[1]))), quiet(mode=Mode.of_shard(int(sys.argv[2]), int(sys.argv[3]))))
"""


def shard_killed_while_building(home: Home, index: int, count: int) -> None:
    """Shard ``index``/``count``'s pod is killed (SIGKILL) while it builds its store: its half-built file is left."""
    proc = subprocess.run([sys.executable, "-c", _KILLED_WHILE_BUILDING, str(home.root), str(index), str(count)],
                          capture_output=True, text=True, env=cli_env(), timeout=120)
    assert proc.returncode == -9, proc.stderr


def console_page(home: Home, path: str) -> str:
    """The console's page at ``path`` for an informatics and IT user (standalone sign-in), its text on one line."""
    from starlette.testclient import TestClient

    from medhelm_local.webconsole.app import create_app
    from medhelm_local.webconsole.identity import StandaloneSessions

    sessions = StandaloneSessions(user="ines", roles=frozenset({ConsoleRole.INFORMATICS, ConsoleRole.IT}))
    with TestClient(create_app(Home(home.root), sessions), raise_server_exceptions=False) as client:
        assert client.get(f"/login?token={sessions.new_login_token()}").status_code == 200
        page = client.get(path)
    assert page.status_code == 200, page.text
    return " ".join(page.text.split())
