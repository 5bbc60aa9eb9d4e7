"""Benchmark specs (data) and the registry that reads them."""

from medhelm_local.benchmarks.registry import all_specs, get_spec
from medhelm_local.benchmarks.spec import BenchmarkSpec, OutputType

__all__ = ["BenchmarkSpec", "OutputType", "all_specs", "get_spec"]
