"""Reads the benchmark specs shipped in ``specs/`` (one YAML file per benchmark)."""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml
from pydantic import ValidationError

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import NotFoundError


class SpecError(RuntimeError):
    """A shipped spec is invalid: a packaging bug, not user input."""


def parse_spec(text: str, source: str) -> BenchmarkSpec:
    try:
        return BenchmarkSpec.model_validate(yaml.safe_load(text))
    except (yaml.YAMLError, ValidationError) as exc:
        raise SpecError(f"benchmark spec {source} is invalid: {exc}") from exc


@cache
def _builtin_specs() -> dict[str, BenchmarkSpec]:
    specs: dict[str, BenchmarkSpec] = {}
    folder = resources.files("medhelm_local.benchmarks") / "specs"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        spec = parse_spec(entry.read_text(encoding="utf-8"), entry.name)
        if entry.name != f"{spec.id}.yaml":
            raise SpecError(f"benchmark spec file {entry.name} holds id {spec.id!r}")
        specs[spec.id] = spec
    return specs


def all_specs() -> list[BenchmarkSpec]:
    return list(_builtin_specs().values())


def get_spec(benchmark_id: str) -> BenchmarkSpec:
    spec = _builtin_specs().get(benchmark_id)
    if spec is None:
        raise NotFoundError(f"unknown benchmark {benchmark_id!r}; see `medhelm-local benchmarks list`")
    return spec
