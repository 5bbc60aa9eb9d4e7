"""Registering a validated dataset: one function for the CLI and the demo."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from medhelm_local.audit import audit_event
from medhelm_local.benchmarks.registry import register_custom_spec
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.context import AppContext
from medhelm_local.errors import BadInputError
from medhelm_local.loaders.base import LoadResult, load_dataset
from medhelm_local.loaders.io import csv_field_cap
from medhelm_local.loaders.paths import refuse_appliance_files
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


def register_file(app_ctx: AppContext, spec: BenchmarkSpec, path: Path, *, spec_file: Path | None = None
                  ) -> Registration:
    """Validate ``path`` for ``spec`` and store it, audited: intent first (fail closed), then the outcome.

    ``spec_file``: a custom benchmark YAML, stored in the home only once its data has validated.
    """
    home = app_ctx.home
    audit_event(home, app_ctx.actor, "dataset.register", outcome="attempt", role="informatics",
                benchmark=spec.id, source_name=path.name)
    try:
        refuse_appliance_files(home, [path])
        with csv_field_cap(home.config.loaders.csv_field_max_mib):
            result = load_dataset(spec, path)
        refuse_appliance_files(home, result.files)
    except BadInputError as exc:
        # The error's class (SqlRefused, SpecPathError, ExtractError...) is safe to audit; its message is not.
        audit_event(home, app_ctx.actor, "dataset.register", outcome="rejected", role="informatics",
                    benchmark=spec.id, source_name=path.name, reason=type(exc).__name__)
        raise
    if spec_file is not None:
        spec = register_custom_spec(spec_file, home.root)
    with Store.open(home) as store:
        registration = store_dataset(store, spec, path, result)
    audit_event(home, app_ctx.actor, "dataset.register", role="informatics", benchmark=spec.id,
                fingerprint=registration.fingerprint, version=registration.version,
                instances=registration.instances, skipped=sum(registration.skipped.values()))
    return registration
