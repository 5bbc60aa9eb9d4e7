"""Registering a validated dataset: one function for the CLI and the demo."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.loaders.base import LoadResult
from medhelm_local.store.store import Store


class Registration(BaseModel):
    benchmark: str
    instances: int
    skipped: dict[str, int]
    fingerprint: str  # sha256 of the source bytes
    version: str  # the stored dataset version (source bytes + loader configuration)
    new: bool


def store_dataset(store: Store, spec: BenchmarkSpec, path: Path, result: LoadResult) -> Registration:
    source_sha256 = result.fingerprint
    skipped = dict(result.skipped)
    version, new = store.register_dataset(
        spec.id, source_sha256, spec.loader_sha256, path.name, result.instances, skipped
    )
    return Registration(benchmark=spec.id, instances=len(result.instances), skipped=skipped,
                        fingerprint=source_sha256, version=version, new=new)
