"""Sharded runs: ``run --shard I/N`` on N pods of a Kubernetes Indexed Job, merged into one run.

Design (DuckDB allows one writer per file, and pods may sit on different nodes of a ReadWriteMany volume):

1. Every shard opens the home's main store briefly (retrying while another pod holds its lock), computes the
   same deterministic plan, and creates the run there if no shard has yet (run id from ``--run-id`` or derived
   from the plan key; looked up again once the shard has asked its servers, while it holds the store until the run
   is stored, so that pods starting together create it once). It takes slice I of the plan's send order, keeps the
   items the main store has no outcome for, and writes them with their instances into its own encrypted store
   file, ``<store dir>/shards/<run id>/shard-I-of-N.duckdb`` (built under a temporary name, then renamed).
2. The shard sends its items against its own file: write-through and resume work as for any run; a restarted
   pod finds its file and sends only what is missing.
3. When done, the shard merges its outcomes into the main store (one transaction; the primary key keeps one
   outcome per item) and deletes its file. The merge that completes the run scores it and marks it finished.

``medhelm-local runs merge RUN_ID`` merges any shard files left behind (e.g. a pod that died after its last
request) and finishes the run when it is complete; so does ``run --resume RUN_ID`` (or ``--retry-errors``) before
it sends, and it is refused while any shard of the run sends (``store.runlock``). Both remove the stores shards were
killed while building (``*.building``: instances no merge takes), as no shard of the run builds meanwhile.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from medhelm_local.audit.sink import system_audit
from medhelm_local.home import Home
from medhelm_local.logs import get_logger
from medhelm_local.runner.plan import shard_range
from medhelm_local.store import runs as runs_db
from medhelm_local.store import shards as shards_db
from medhelm_local.store.connection import StoreError
from medhelm_local.store.runs import PlannedItem
from medhelm_local.store.store import RunInfo, Store

log = get_logger(__name__)


def shards_dir(home: Home, run_id: str) -> Path:
    return home.store_path.parent / "shards" / run_id


def shard_store_path(home: Home, run_id: str, index: int, count: int) -> Path:
    return shards_dir(home, run_id) / f"shard-{index}-of-{count}.duckdb"


@contextmanager
def open_main_store(home: Home, *, wait_s: float = 1800.0) -> Iterator[Store]:
    """The home's main store, waiting (with jitter) while another process holds its write lock."""
    deadline = time.monotonic() + wait_s
    delay = 0.05
    while True:
        try:
            store = Store.open(home, audit=system_audit(home))
            break
        except StoreError as exc:
            if "lock" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(delay / 2, delay))
            delay = min(2.0, delay * 2)
    try:
        yield store
    finally:
        store.close()


def unanswered_slice(main: Store, run_id: str, index: int, count: int) -> list[PlannedItem]:
    """Slice ``index`` of ``count`` of the run's send order (``plan.shard_range``), less the items ``main``
    already has an outcome for."""
    done = shards_db.answered_ids(main, run_id)
    start, stop = shard_range(runs_db.count_items(main, run_id), index, count)
    return [i for i in runs_db.items_in_rank_range(main, run_id, start, stop)
            if (i.benchmark, i.instance_id) not in done]


def build_shard_store(home: Home, main: Store, run: RunInfo, items: list[PlannedItem], path: Path) -> None:
    """Write a shard's own store: the run, its items still unanswered in ``main``, and their instances."""
    tmp = path.with_name(path.name + ".building")
    for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
        leftover.unlink(missing_ok=True)
    meta = runs_db.runner_run(main, run.run_id)
    assert meta is not None, "a sharded run is always planned by the runner"
    plan_key, order_mode, manifest_sha = meta
    try:
        shard = Store.open_file(home, tmp)
        try:
            shards_db.copy_inputs(main, shard, items)
            step = runs_db.ROWS_PER_TRANSACTION
            chunks = (items[start:start + step] for start in range(0, len(items), step))
            runs_db.insert_plan(shard, run, chunks, plan_key=plan_key, order_mode=order_mode,
                                manifest_sha256=manifest_sha)
            shard.checkpoint()
        finally:
            shard.close()
        tmp.replace(path)
    except BaseException:
        remove_shard_files(tmp)
        raise


def merge_shard(main: Store, shard_path: Path, home: Home, run_id: str) -> shards_db.Merged:
    """Merge one shard's outcomes into ``main`` in one transaction; returns the outcomes it added, and those
    ``main`` already had (the file of a shard killed after its merge, before it removed the file)."""
    shard = Store.open_file(home, shard_path, read_only=True)
    try:
        return shards_db.merge_outcomes(shard, main, run_id)
    finally:
        shard.close()


def remove_shard_files(path: Path) -> None:
    for file in (path, path.with_name(path.name + ".wal")):
        file.unlink(missing_ok=True)
    folder = path.parent
    if folder.is_dir() and not any(folder.iterdir()):
        shutil.rmtree(folder, ignore_errors=True)


def remove_abandoned_builds(home: Home, run_id: str) -> None:
    """Remove the shard stores a killed shard left half built (``build_shard_store``'s temporary file, its WAL):
    they hold instances, and no shard ever merges them (the shard restarted builds its own again). Only while the
    run's lock is held (``runs merge``, a resume), when no shard of the run builds."""
    folder = shards_dir(home, run_id)
    for path in sorted(folder.glob("shard-*-of-*.duckdb.building*")) if folder.is_dir() else []:
        remove_shard_files(path)
        log.info("shard.abandoned_build_removed", run_id=run_id, file=path.name)


def pending_shard_files(home: Home, run_id: str) -> list[Path]:
    folder = shards_dir(home, run_id)
    return sorted(folder.glob("shard-*-of-*.duckdb")) if folder.is_dir() else []
