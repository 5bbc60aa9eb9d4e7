"""The command line surface: commands listed, exit codes (2 for bad input), the version."""

from __future__ import annotations

import re

from tests.conftest import Cli

REQUIRED = ["init", "demo", "models", "benchmarks", "datasets", "run", "score", "leaderboard", "audit", "export"]


def test_help_lists_every_command(cli: Cli) -> None:
    result = cli("--help")
    assert result.code == 0
    listed = set(re.findall(r"^\W*(\w+)\s{2,}", result.stdout, flags=re.MULTILINE))
    missing = [c for c in REQUIRED if c not in listed]
    assert not missing, result.stdout


def test_usage_error_exits_2(cli: Cli) -> None:
    assert cli("run", "--no-such-option").code == 2


def test_unknown_benchmark_exits_2(home_cli: Cli) -> None:
    result = home_cli("benchmarks", "show", "no_such_benchmark")
    assert result.code == 2
    assert "unknown benchmark" in result.stderr


def test_unknown_model_exits_2(home_cli: Cli) -> None:
    result = home_cli("run", "--model", "ghost", "--benchmarks", "pubmedqa")
    assert result.code == 2
    assert "ghost" in result.stderr


def test_version(cli: Cli) -> None:
    result = cli("--version")
    assert result.code == 0
    assert result.stdout.startswith("medhelm-local ")


def test_help_shows_the_defaults_in_brackets(cli: Cli) -> None:
    # "[default: ...]" in an option's help is rich markup unless escaped: it vanished, leaving "seed ."
    result = cli("run", "--help")
    assert result.code == 0, result.stderr
    text = " ".join(result.stdout.replace("│", " ").split())
    assert "[default: config]" in text and " ." not in text.replace("...", "")
