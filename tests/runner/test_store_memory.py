"""The store's memory is bounded and a planning killed midway leaves nothing a later run could trip on."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.home import Home
from medhelm_local.runner.plan import compute_plan, plan_items
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from medhelm_local.store.connection import spill_directory
from medhelm_local.store.store import RunInfo, utcnow
from tests.runner.helpers import make_home, register, synthetic_instances


def _small_store(home: Home) -> None:
    config = home.config.model_copy(deep=True)
    config.store.memory_limit_mb = 64
    config.store.threads = 1
    home.save_config(config)


def test_a_query_larger_than_the_memory_limit_spills_inside_the_home(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    _small_store(home)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    with Store.open(Home(home.root)) as store:
        assert store.conn.execute("SELECT current_setting('memory_limit')").fetchone() == ("64.0 MiB",)
        # About 300 MB of rows sorted under a 64 MiB limit: it has to spill, with external access switched off.
        row = store.conn.execute(
            "SELECT count(*), max(s) FROM (SELECT md5(i::VARCHAR) || repeat('x', 250) AS s "
            "FROM range(1200000) r(i) ORDER BY s)"
        ).fetchone()
        assert row is not None and row[0] == 1_200_000
        assert spill_directory(store.path).parent == store.path.parent
        with pytest.raises(Exception, match="disabled"):  # nothing outside the store is reachable
            store.conn.execute(f"COPY (SELECT 1) TO '{workdir / 'out.csv'}'")
    assert os.listdir(workdir) == []  # DuckDB's default spill place (./.tmp) was never used


def _planning_home(tmp_path: Path) -> Home:
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    register(home, synthetic_instances(30))
    return home


def _planned_run(run_id: str) -> RunInfo:
    return RunInfo(run_id=run_id, model="fake", benchmarks=["pubmedqa"], created_at=utcnow(), finished_at=None,
                   status="planned", max_instances=None, seed=0, manifest={})


def _killed_after(items: list[Any], size: int, chunks: int) -> Iterator[list[Any]]:
    """``chunks`` chunks of ``size`` items, then the process dies while planning."""
    for start in range(0, size * chunks, size):
        yield items[start:start + size]
    raise KeyboardInterrupt


def _insert(store: Store, run: RunInfo, chunks: Iterable[Sequence[Any]], plan: Any) -> None:
    runs_db.insert_plan(store, run, chunks, plan_key=plan.plan_key, order_mode="prefix", manifest_sha256="0" * 64)


def _send_ranks(store: Store, run_id: str) -> list[int]:
    return [int(r[0]) for r in store.conn.execute(
        "SELECT send_rank FROM runner_item_order WHERE run_id = ? ORDER BY send_rank", [run_id]).fetchall()]


def test_a_planning_killed_midway_is_invisible_and_cleaned_up(tmp_path: Path) -> None:
    home = _planning_home(tmp_path)
    run = _planned_run("run-fixed")
    with Store.open(home) as store:
        plan = compute_plan(store, SHIPPED, "fake", ["pubmedqa"], max_instances=None, seed=0)
        first = next(plan_items(store, plan))
        with pytest.raises(KeyboardInterrupt):  # killed after its first chunk
            _insert(store, run, _killed_after(first, len(first), 1), plan)
        assert store.get_run(run.run_id) is None and runs_db.find_resumable(store, plan.plan_key) is None
        _insert(store, run, plan_items(store, plan), plan)
        assert runs_db.count_items(store, run.run_id) == 30
        assert _send_ranks(store, run.run_id) == list(range(30))
        assert runs_db.find_resumable(store, plan.plan_key) == run.run_id


def test_a_plan_that_fits_one_transaction_is_stored_whole_or_not_at_all(tmp_path: Path) -> None:
    """Up to ``ROWS_PER_TRANSACTION`` rows, the items, their send order and the run are one commit (one WAL sync,
    not one per chunk): a planning killed midway leaves none of its rows behind, not even for the next to clean."""
    home = _planning_home(tmp_path)
    run = _planned_run("run-whole")
    with Store.open(home) as store:
        plan = compute_plan(store, SHIPPED, "fake", ["pubmedqa"], max_instances=None, seed=0)
        items = [item for chunk in plan_items(store, plan) for item in chunk]
        with pytest.raises(KeyboardInterrupt):
            _insert(store, run, _killed_after(items, 10, 2), plan)
        assert store.conn.execute("SELECT count(*) FROM run_items").fetchone() == (0,)


def test_a_larger_plan_commits_at_most_rows_per_transaction_at_a_time(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    home = _planning_home(tmp_path)
    monkeypatch.setattr(runs_db, "ROWS_PER_TRANSACTION", 10)
    run = _planned_run("run-bounded")
    with Store.open(home) as store:
        plan = compute_plan(store, SHIPPED, "fake", ["pubmedqa"], max_instances=None, seed=0)
        items = [item for chunk in plan_items(store, plan) for item in chunk]
        with pytest.raises(KeyboardInterrupt):  # two chunks of 5 fill the first transaction, the third is rolled back
            _insert(store, run, _killed_after(items, 5, 3), plan)
        assert store.conn.execute("SELECT count(*) FROM run_items").fetchone() == (10,)
        assert store.get_run(run.run_id) is None
        _insert(store, run, [items[start:start + 5] for start in range(0, 30, 5)], plan)
        assert runs_db.count_items(store, run.run_id) == 30
        assert _send_ranks(store, run.run_id) == list(range(30))
        assert runs_db.find_resumable(store, plan.plan_key) == run.run_id


def test_paging_skips_answered_items_and_keeps_going_past_a_fully_answered_page(tmp_path: Path) -> None:
    from medhelm_local.records import ChatMessage, InferenceRequest, InferenceResult

    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    register(home, synthetic_instances(30))
    run = RunInfo(run_id="run-paging", model="fake", benchmarks=["pubmedqa"], created_at=utcnow(), finished_at=None,
                  status="planned", max_instances=None, seed=0, manifest={})
    with Store.open(home) as store:
        plan = compute_plan(store, SHIPPED, "fake", ["pubmedqa"], max_instances=None, seed=0, order_mode="plan")
        runs_db.insert_plan(store, run, plan_items(store, plan), plan_key=plan.plan_key, order_mode="plan",
                            manifest_sha256="0" * 64)
        in_order = [str(r[0]) for r in store.conn.execute(
            "SELECT instance_id FROM runner_item_order WHERE run_id = ? ORDER BY send_rank", [run.run_id]).fetchall()]
        runs_db.start_session(store, run.run_id, "s", mode="new", shard=None, endpoints=[])

        def outcome(instance_id: str, error: str | None) -> runs_db.Outcome:
            request = InferenceRequest(benchmark="pubmedqa", instance_id=instance_id, max_tokens=4,
                                       messages=[ChatMessage(role="user", content="q")])
            result = InferenceResult(text=None if error else "yes", error=error)
            return runs_db.Outcome(request, result)

        # ranks 0-11 answered (10 and 11 with errors), 12-29 still to send
        runs_db.commit_outcomes(store, run.run_id, "s", 1.0,
                                [outcome(i, "http_503" if k >= 10 else None) for k, i in enumerate(in_order[:12])],
                                replace_errors=False)
        todo, last = runs_db.pending_page(store, run.run_id, "pubmedqa", after_rank=-1, limit=10, errors_only=False)
        assert todo == [] and last == 9  # a fully answered page: nothing to send, but paging goes on
        seen: list[str] = []
        after: int | None = last
        while after is not None:
            page, after = runs_db.pending_page(store, run.run_id, "pubmedqa", after_rank=after, limit=10,
                                               errors_only=False)
            seen += [p.instance_id for p in page]
        assert seen == in_order[12:]
        errors, _ = runs_db.pending_page(store, run.run_id, "pubmedqa", after_rank=-1, limit=100, errors_only=True)
        assert [p.instance_id for p in errors] == in_order[10:12]
