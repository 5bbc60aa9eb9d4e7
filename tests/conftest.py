"""Fixtures shared by the whole suite: the public data, a CLI runner, an initialised home."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO.parent / "shared" / "data" / "public").resolve()


@pytest.fixture(scope="session")
def public_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"public benchmark data not found at {SHARED_DATA} (shared/ must sit beside the repo)")
    return SHARED_DATA


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:  # whatever the command printed
        return json.loads(self.stdout)


@dataclass
class Cli:
    home: Path
    env: dict[str, str]

    def __call__(self, *args: str, timeout: float = 300, input_text: str | None = None) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "medhelm_local.cli", "--home", str(self.home), *args],
            capture_output=True, text=True, timeout=timeout, env=self.env, input=input_text,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)


def run_read_only(cli: Cli, path: Path, *args: str) -> CliResult:
    """The CLI (a process of its own) with ``path`` (a file, or a folder and all in it) read-only as a ConfigMap's
    or a ``:ro`` mount is: root writes a file whatever its mode, so for root ``path`` is bound read-only over itself
    in a mount namespace of the command's own; another user gets it by its mode and its folder's."""
    command = [sys.executable, "-m", "medhelm_local.cli", "--home", str(cli.home), *args]
    folder = path if path.is_dir() else path.parent
    if os.geteuid() != 0:
        modes = {p: stat.S_IMODE(p.stat().st_mode) for p in (path, folder)}
        path.chmod(0o555 if path.is_dir() else 0o444)
        folder.chmod(0o555)
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=120, env=cli.env)
        finally:
            for changed, mode in modes.items():
                changed.chmod(mode)
        return CliResult(proc.returncode, proc.stdout, proc.stderr)
    read_only = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && '
    written = '"$0/.probe"' if path.is_dir() else '"$0"'
    probe = subprocess.run(["unshare", "-m", "sh", "-c", read_only + f"! (: >> {written}) 2>/dev/null", str(path)],
                           capture_output=True, check=False) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("running as root, and no mount namespace to make a path read-only in (unshare -m)")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", read_only + 'exec "$@"', str(path), *command],
                          capture_output=True, text=True, timeout=120, env=cli.env)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDHELM_")}
    env["MEDHELM_LOG_LEVEL"] = "INFO"
    return env


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """A CLI bound to a fresh home under tmp_path (not yet initialised)."""
    return Cli(home=tmp_path / "home", env=cli_env())


@pytest.fixture
def home_cli(cli: Cli) -> Iterator[Cli]:
    """A CLI bound to an initialised home."""
    result = cli("init")
    assert result.code == 0, result.stderr
    yield cli
