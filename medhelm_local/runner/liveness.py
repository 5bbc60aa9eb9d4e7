"""Whether a ``running`` run is being sent now, for the commands and pages that only read the store.

A run killed outright (SIGKILL, out of memory, a node lost) keeps the stored status ``running``: nothing was left
to record an end. Readers must not write, so they say what they see instead: its run lock, which every process
sending an unsharded run holds until it ends, however it ends. Shards send without that lock: for a sharded run
it cannot be told.
"""

from __future__ import annotations

from medhelm_local.home import Home
from medhelm_local.runner import shard as sharding
from medhelm_local.runner.plan import derived_run_id
from medhelm_local.store import runs as runs_db
from medhelm_local.store.runlock import run_lock_held
from medhelm_local.store.store import RunInfo, Store


def run_live(home: Home, store: Store, run: RunInfo) -> bool | None:
    """For a ``running`` run: True while a process sends it, False when none does (it was killed: resume it),
    None when that cannot be told (a sharded run, a lock that cannot be probed). None for any other status."""
    if run.status != "running" or _sharded(home, store, run):
        return None
    return run_lock_held(home.store_path, run.run_id)


def status_text(run: RunInfo, live: bool | None) -> str:
    """The status as shown to a person: ``running`` is qualified when no process is sending the run."""
    if run.status != "running" or live is True:
        return run.status
    if live is False:
        return f"interrupted (no process is sending it; resume with: medhelm-local run --resume {run.run_id})"
    return "running (unknown whether a process is sending it now)"


def _sharded(home: Home, store: Store, run: RunInfo) -> bool:
    if sharding.pending_shard_files(home, run.run_id):
        return True
    if any(s["shard"] for s in runs_db.sessions(store, run.run_id)):
        return True
    meta = runs_db.runner_run(store, run.run_id)
    return meta is not None and run.run_id == derived_run_id(meta[0])
