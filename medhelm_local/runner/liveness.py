"""Whether a ``running`` run is being sent now, for the commands and pages that only read the store.

A run killed outright (SIGKILL, out of memory, a node lost) keeps the stored status ``running``: nothing was left
to record an end. Readers must not write, so they say what they see instead: the run's locks, which every process
sending it holds until it ends, however it ends: its run lock (a run, a resume, a retry, ``runs merge``) and its
shard lock (each shard of a sharded run, shared).
"""

from __future__ import annotations

from medhelm_local.deployment import send_again_hint
from medhelm_local.home import Home
from medhelm_local.runner import shard as sharding
from medhelm_local.runner.plan import derived_run_id
from medhelm_local.store import runs as runs_db
from medhelm_local.store.runlock import run_lock_held, shard_lock_held
from medhelm_local.store.store import RunInfo, Store


def run_live(home: Home, store: Store, run: RunInfo) -> bool | None:
    """For a ``running`` run: True while a process sends it, False when none does (it was killed: resume it),
    None when that cannot be told (a lock file this process cannot probe). None for any other status."""
    if run.status != "running":
        return None
    whole = run_lock_held(home.store_path, run.run_id)
    shards = shard_lock_held(home.store_path, run.run_id)
    if whole or shards:
        return True
    if shards is None and _sharded(home, store, run):
        return None  # its shards' lock needs a lock file this process may write: the unsharded probe cannot tell
    return whole


def status_text(home: Home, store: Store, run: RunInfo, live: bool | None) -> str:
    """The status as shown to a person: ``running`` is qualified when no process is sending the run, with the
    commands that resume it (shard files left behind are merged first, or a resume would send their items again; a
    retry of its errors killed is retried again: a resume sends only items without an outcome)."""
    if run.status != "running" or live is True:
        return run.status
    if live is False:
        sessions = runs_db.sessions(store, run.run_id)
        again = "--retry-errors" if sessions and sessions[-1]["mode"] == "retry_errors" else "--resume"
        resume = send_again_hint(run.run_id, again)
        if sharding.pending_shard_files(home, run.run_id):
            resume = f"medhelm-local runs merge {run.run_id}, then {resume} if it is still unfinished"
        return f"interrupted (no process is sending it; resume with: {resume})"
    return "running (unknown whether a process is sending it now)"


def _sharded(home: Home, store: Store, run: RunInfo) -> bool:
    if sharding.pending_shard_files(home, run.run_id):
        return True
    if any(s["shard"] for s in runs_db.sessions(store, run.run_id)):
        return True
    meta = runs_db.runner_run(store, run.run_id)
    return meta is not None and run.run_id == derived_run_id(meta[0])
