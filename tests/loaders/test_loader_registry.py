"""The loader registry imports a loader's module when a spec names its input format: every built-in loader is still
found, and checking specs imports only the loaders they name."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import medhelm_local.loaders
from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.errors import BadInputError
from medhelm_local.loaders import base

CHECK_THREE_SPECS = r"""
import sys
from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.scoring.checks import check_spec, provided_fields
specs = SpecRegistry()
for name in ("pubmedqa", "medqa", "medcalc_bench"):
    check_spec(specs.get(name))
    assert provided_fields(specs.get(name))
shared = ("base", "paths", "io", "records")
names = (m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("medhelm_local.loaders."))
print(sorted(name for name in names if name not in shared))
"""


def test_every_built_in_loader_is_found_under_its_input_format() -> None:
    for module in pkgutil.iter_modules(medhelm_local.loaders.__path__):
        importlib.import_module(f"medhelm_local.loaders.{module.name}")
    assert base._LOADER_MODULES.keys() == base._LOADERS.keys()
    for name, loader in base._LOADERS.items():
        assert loader.__module__ == base._LOADER_MODULES[name], name
    assert base.available_loaders() == sorted(base._LOADERS)


def test_checking_specs_imports_only_the_loaders_they_name() -> None:
    done = subprocess.run([sys.executable, "-c", CHECK_THREE_SPECS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == "['pubmedqa', 'tabular']"


def test_a_format_no_loader_reads_is_still_refused_by_name(tmp_path: Path) -> None:
    spec = SpecRegistry().get("pubmedqa").model_copy(update={"input_format": "no_such_format"})
    extract = tmp_path / "extract.json"
    extract.write_text("{}", encoding="utf-8")
    assert base.declared_fields("no_such_format") is None
    with pytest.raises(BadInputError, match="no loader for input format 'no_such_format'"):
        base.load_dataset(spec, extract)
