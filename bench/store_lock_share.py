"""How long a run holds the store's lock, and what re-attaching costs, measured inside one `run`.

Usage (repository root): ``PYTHONPATH=. python bench/store_lock_share.py N LATENCY_S``. Prints one JSON line:
attaches, mean attach / detach / held milliseconds, and the share of the send phase during which the store's
lock is free for readers (doctor, leaderboard, runs, datasets list, the console).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from medhelm_local.application.evaluation import EvaluationRequest, Selection, Sending, evaluate
from medhelm_local.store import connection
from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
from tests.runner.helpers import app, make_home, register, synthetic_instances

STATS: dict[str, list[float]] = {"attach": [], "detach": [], "held": []}
_SINCE: dict[int, float] = {}
_ATTACH = connection.EncryptedDatabase.attach
_DETACH = connection.EncryptedDatabase.detach


def _attach(self: connection.EncryptedDatabase, **kwargs: Any) -> None:
    started = time.perf_counter()
    _ATTACH(self, **kwargs)
    STATS["attach"].append(time.perf_counter() - started)
    _SINCE[id(self)] = time.perf_counter()


def _detach(self: connection.EncryptedDatabase) -> None:
    was_attached = self.attached
    started = time.perf_counter()
    _DETACH(self)
    if was_attached:
        STATS["detach"].append(time.perf_counter() - started)
        STATS["held"].append(time.perf_counter() - _SINCE.pop(id(self), started))


def _ms(values: list[float]) -> float:
    return round(1000 * sum(values) / max(1, len(values)), 1)


def main() -> None:
    n, latency = int(sys.argv[1]), float(sys.argv[2])
    connection.EncryptedDatabase.attach = _attach  # type: ignore[method-assign]
    connection.EncryptedDatabase.detach = _detach  # type: ignore[method-assign]
    with FakeOpenAIServer(responder=hash_responder(), latency_s=latency, slots=32) as server:
        home = make_home(Path(tempfile.mkdtemp()) / "home", [server.base_url])
        register(home, synthetic_instances(n))
        for values in STATS.values():
            values.clear()
        outcome = evaluate(app(home), EvaluationRequest(Selection(model="fake", benchmarks=["pubmedqa"]),
                                                        Sending(concurrency=32, show_progress=False), score=False))
    assert outcome.report is not None
    wall = outcome.report.wall_s
    print(json.dumps({
        "n": n, "latency_s": latency, "send_wall_s": round(wall, 2), "req_per_s": round(n / wall, 1),
        "attaches": len(STATS["attach"]), "attach_ms_mean": _ms(STATS["attach"]),
        "detach_ms_mean": _ms(STATS["detach"]), "held_ms_mean": _ms(STATS["held"]),
        "held_s_total": round(sum(STATS["held"]), 2),
        "lock_free_share_of_send": round(1 - sum(STATS["held"]) / wall, 3),
    }))


if __name__ == "__main__":
    main()
