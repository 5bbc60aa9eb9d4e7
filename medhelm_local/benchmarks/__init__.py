"""Benchmark specs (data) and the registry that reads them."""

from medhelm_local.benchmarks.registry import SpecRegistry, shipped_spec, shipped_specs
from medhelm_local.benchmarks.spec import BenchmarkSpec, OutputType

__all__ = ["BenchmarkSpec", "OutputType", "SpecRegistry", "shipped_spec", "shipped_specs"]
