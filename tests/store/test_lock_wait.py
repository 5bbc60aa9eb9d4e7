"""A second writer waits for the store's lock, up to a stated timeout, instead of failing at once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from medhelm_local.home import Home
from medhelm_local.store import Store
from medhelm_local.store.connection import LOCK_TIMEOUT_ENV, StoreError

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from medhelm_local.home import Home
    from medhelm_local.store import Store
    with Store.open(Home(Path(sys.argv[1]))):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def _hold(home: Home, seconds: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(home.root), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


@pytest.fixture()
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "home")
    home.init()
    with Store.open(home):
        pass
    return home


def test_without_waiting_a_held_store_is_refused_with_the_fix(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    holder = _hold(home, 30)
    try:
        monkeypatch.setenv(LOCK_TIMEOUT_ENV, "0")
        with pytest.raises(StoreError, match=f"another medhelm-local process holds it.*{LOCK_TIMEOUT_ENV}"):
            Store.open(home)
    finally:
        holder.kill()
        holder.wait()


def test_a_writer_waits_until_the_holder_lets_go(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    holder = _hold(home, 1.5)
    try:
        monkeypatch.setenv(LOCK_TIMEOUT_ENV, "60")
        started = time.monotonic()
        with Store.open(home) as store:
            assert store.conn.execute("SELECT 1").fetchone() == (1,)
        assert time.monotonic() - started >= 0.5
    finally:
        holder.wait(timeout=60)


def test_a_bad_timeout_value_is_named(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, "soon")
    with pytest.raises(StoreError, match=LOCK_TIMEOUT_ENV):
        Store.open(home)
