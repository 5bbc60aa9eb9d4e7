"""A name of the wrong shape (a benchmark id, a metric, a model) is explained in words, not with pydantic's regular
expression: ``My-Benchmark`` used to get "String should match pattern '^[a-z][a-z0-9_]*$'"."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import medhelm_local
from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.patterns import WORDS
from medhelm_local.prompts.styles import spec_snapshot
from tests.conftest import Cli

PACKAGE = Path(medhelm_local.__file__).parent


def test_every_constrained_name_in_the_package_has_words() -> None:
    """A pattern written in place would fall back to the regular expression: every one comes from patterns.py."""
    literal = re.compile(r"""pattern\s*=\s*r?["']""")
    found = [f"{p.relative_to(PACKAGE)}:{n}" for p in PACKAGE.rglob("*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1) if literal.search(line)]
    assert found == []
    assert all(words and "^" not in words for words in WORDS.values())


def test_a_custom_spec_with_a_misshapen_id_or_metric_is_explained(home_cli: Cli, tmp_path: Path) -> None:
    data = spec_snapshot(shipped_spec("pubmedqa"))
    for field, value, where in (("id", "My-Benchmark", "field id"),
                                ("metrics", [{"name": "Exact-Match", "main": True}], "field metrics[0].name")):
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump({**data, "id": "my_pubmedqa", field: value}), encoding="utf-8")
        result = home_cli("benchmarks", "add", str(spec))
        assert result.code == 2
        assert f"{where}: expected lower-case letters, digits and _, starting with a letter" in result.stderr
        assert "pattern" not in result.stderr and "[a-z]" not in result.stderr
