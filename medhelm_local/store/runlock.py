"""One process sends a given run at a time.

The store's own lock used to serialise runs as a side effect (a run held it from start to end). Now that a run
holds the store only for short write transactions (so read-only commands work during it), a second ``run``
resuming the same run would send the same requests in parallel; a lock per run id prevents that: one byte of
``<store>.runs.lock``, at an offset derived from the run id (a POSIX record lock, released when the process
ends, however it ends). A second process waits for it up to the store's lock timeout, then fails naming the run.

The shards of a run send in parallel, each from its own store file: each holds a shared lock on another byte of
the run's (:func:`shard_lock`), so that a reader can tell whether any of them is at work. A process holding the run
lock holds that byte exclusively too: a run, resume or retry is refused while any shard of its run sends (it would
send their items again), as is ``runs merge`` (it would take their files from under them), and a shard waits while
one of those holds the run.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from medhelm_local.errors import BadInputError
from medhelm_local.home.config import StoreSettings
from medhelm_local.store.connection import LOCK_TIMEOUT_ENV, StoreError, lock_timeout_s

_POLL_S = 0.2
# A reader's probe holds a run's shard byte for an instant (shard_lock_held), a shard for as long as it sends: a byte
# still held after this many tries, _POLL_S apart, is a shard's.
_SHARD_TRIES = 5


class ShardsSendingError(BadInputError):
    """A run, resume, retry or ``runs merge`` of a run while shards of it send (``run --shard``)."""

RESUME_WOULD = "a run, resume or retry of it would send their items again"


def run_lock_path(store_path: Path) -> Path:
    return store_path.with_name(store_path.name + ".runs.lock")


def _offset(run_id: str) -> int:
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:5], "big")


def _shards_offset(run_id: str) -> int:
    return _offset(run_id + "\0shards")


@contextmanager
def run_lock(store_path: Path, run_id: str, settings: StoreSettings | None = None, *,
             refused_because: str = RESUME_WOULD) -> Iterator[None]:
    """Held by the one process sending ``run_id`` (a run, resume or retry; ``runs merge``) until it ends, however it
    ends; waits for another holding it up to the store's lock timeout. Refused (:class:`ShardsSendingError`, saying
    ``refused_because``) while shards of the run send."""
    path = run_lock_path(store_path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    offset = _offset(run_id)
    try:
        limit = lock_timeout_s(settings)
        deadline = time.monotonic() + limit
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    raise StoreError(f"run {run_id} is being sent by another medhelm-local process; waited "
                                     f"{limit:.0f}s. Wait for it to finish (or set {LOCK_TIMEOUT_ENV} to wait "
                                     "longer)") from None
                time.sleep(_POLL_S)
        _exclude_shards(fd, run_id, refused_because)
        yield
    finally:
        os.close(fd)  # releases the locks


def _exclude_shards(fd: int, run_id: str, refused_because: str) -> None:
    """Take the run's shard byte exclusively on ``fd`` (which holds the run lock), or refuse: shards send the run."""
    for attempt in range(_SHARD_TRIES):
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _shards_offset(run_id))
            return
        except OSError:
            if attempt + 1 < _SHARD_TRIES:
                time.sleep(_POLL_S)
    raise ShardsSendingError(
        f"run {run_id} has shards sending it now (run --shard): {refused_because}. Wait until none does "
        f"(`medhelm-local runs show {run_id}` shows it running while any shard sends, and interrupted once none "
        "does), then try again")


@contextmanager
def shard_lock(store_path: Path, run_id: str, settings: StoreSettings | None = None) -> Iterator[None]:
    """Held by each shard of a sharded run, from the moment it knows its run until it has merged and concluded,
    however it ends. Shared: the shards of one run hold it together; :func:`shard_lock_held` tells whether any does.
    A process holding the run's lock (a run, resume or retry of it; ``runs merge``) holds it exclusively: this
    waits for that up to the store's lock timeout, then fails naming the run."""
    path = run_lock_path(store_path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        limit = lock_timeout_s(settings)
        deadline = time.monotonic() + limit
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, _shards_offset(run_id))
                break
            except OSError:
                if time.monotonic() >= deadline:
                    raise StoreError(f"run {run_id} is being sent by a run, resume or retry of it, or merged by "
                                     f"runs merge; waited {limit:.0f}s. Its shards join it once that ends: see "
                                     f"`medhelm-local runs show {run_id}`, then start them again (or set "
                                     f"{LOCK_TIMEOUT_ENV} to wait longer)") from None
                time.sleep(_POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock


def run_in_progress(store_path: Path, run_id: str) -> bool:
    """Whether a process sends ``run_id`` now: it holds the run's lock, or a shard of it holds its shard lock
    (False when that cannot be told: see :func:`run_lock_held` and :func:`shard_lock_held`)."""
    return run_lock_held(store_path, run_id) is True or shard_lock_held(store_path, run_id) is True


def run_lock_held(store_path: Path, run_id: str) -> bool | None:
    """Whether a process holds ``run_id``'s lock now: True, False, or None when that cannot be told (no lock file,
    which every process that sends a run creates first; a file this process may not read; no locks there).

    Probed by taking a shared lock (a read-only home allows it) and giving it back at once. Closing the file drops
    every lock this process holds on it, so the caller must never be a process that sends runs (``audit report``,
    ``runs list``/``show``, the console are not)."""
    return _probe(store_path, os.O_RDONLY, fcntl.LOCK_SH, _offset(run_id))


def shard_lock_held(store_path: Path, run_id: str) -> bool | None:
    """Whether any process holds ``run_id``'s shard lock now (:func:`shard_lock`): True, False, or None when that
    cannot be told (no lock file; one this process may not write, as an exclusive probe needs; no locks there).

    Probed by taking the byte exclusively, which fails while any shard holds it shared, and giving it back at once
    (a shard starting meanwhile waits that instant). As for :func:`run_lock_held`, the caller must never be a
    process that sends runs."""
    return _probe(store_path, os.O_RDWR, fcntl.LOCK_EX, _shards_offset(run_id))


def _probe(store_path: Path, open_flags: int, lock: int, offset: int) -> bool | None:
    """Whether another process holds the lock file's byte ``offset`` against a ``lock`` (taken without waiting and
    given back at once): True, False, or None when that cannot be told (no lock file, or one this process cannot
    open with ``open_flags``; no locks there)."""
    try:
        fd = os.open(run_lock_path(store_path), open_flags)
    except OSError:
        return None
    try:
        fcntl.lockf(fd, lock | fcntl.LOCK_NB, 1, offset)
    except OSError as exc:
        return True if exc.errno in (errno.EACCES, errno.EAGAIN) else None
    finally:
        os.close(fd)
    return False
