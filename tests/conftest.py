"""Fixtures shared by the whole suite: the public data, a CLI runner, an initialised home."""

from __future__ import annotations

import json
import os
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
