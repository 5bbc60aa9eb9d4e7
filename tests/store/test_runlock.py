"""One process sends a given run at a time, now that a run no longer holds the store from start to end."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from medhelm_local.store.connection import LOCK_TIMEOUT_ENV, StoreError
from medhelm_local.store.runlock import run_lock

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from medhelm_local.store.runlock import run_lock
    with run_lock(Path(sys.argv[1]), sys.argv[2]):
        print("held", flush=True)
        time.sleep(float(sys.argv[3]))
""")


def test_a_second_process_waits_for_the_same_run_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store" / "medhelm.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(store), "run-a", "3"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setenv(LOCK_TIMEOUT_ENV, "0.3")
        with run_lock(store, "run-b"):  # another run is not held up
            pass
        with pytest.raises(StoreError, match="run run-a is being sent by another"), run_lock(store, "run-a"):
            pass
        monkeypatch.setenv(LOCK_TIMEOUT_ENV, "60")
        started = time.monotonic()
        with run_lock(store, "run-a"):
            assert time.monotonic() - started > 0.5
    finally:
        holder.wait(timeout=60)
    assert sorted(p.name for p in store.parent.iterdir()) == ["medhelm.duckdb.runs.lock"]
