"""Use case: register a dataset. Validate a file (or an extract) for a benchmark, store its instances (all or
nothing), install a custom spec with them, and audit the intent and the outcome. The CLI and the demo call it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from medhelm_local.audit.intents import announce
from medhelm_local.benchmarks.registry import custom_dir, is_custom, load_custom_spec, register_custom_spec
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.context import AppContext
from medhelm_local.errors import BadInputError
from medhelm_local.home.layout import atomic_write
from medhelm_local.loaders.base import LoadResult, load_dataset
from medhelm_local.loaders.io import csv_field_cap
from medhelm_local.loaders.paths import refuse_appliance_files
from medhelm_local.phi_text import recorded_name
from medhelm_local.prompts.build import TemplateError, instance_templates
from medhelm_local.runner.plan import store_prefix_keys
from medhelm_local.store.store import ReadingChange, Store


class Registration(BaseModel):
    benchmark: str
    instances: int
    skipped: dict[str, int]
    source_sha256: str  # sha256 of the source bytes (several files: of their sorted hashes)
    # The stored dataset version (source bytes + loader configuration): what `datasets list` and run manifests
    # call the dataset's fingerprint. ``version`` is the same value under its earlier name.
    fingerprint: str
    version: str
    new: bool
    # A new version because this release read the same source and loader settings into other instances than the
    # stored version ``reading_changed.previous`` holds (counts only); None otherwise.
    reading_changed: ReadingChange | None = None


def store_dataset(store: Store, spec: BenchmarkSpec, path: Path, result: LoadResult, *,
                  before_commit: Callable[[], None] | None = None) -> Registration:
    source_sha256 = result.fingerprint
    skipped = dict(result.skipped)
    stored = store.register_dataset(
        spec.id, source_sha256, spec.loader_sha256, path.name, result.instances, skipped,
        before_commit=before_commit,
    )
    return Registration(benchmark=spec.id, instances=len(result.instances), skipped=skipped,
                        source_sha256=source_sha256, fingerprint=stored.fingerprint, version=stored.fingerprint,
                        new=stored.new, reading_changed=stored.reading_changed)


def reading_change_audit(change: ReadingChange | None) -> dict[str, Any]:
    """What the audit record of a registration says of a new reading: the version it differs from and counts."""
    if change is None:
        return {}
    return {"new_version_reason": "reading_changed", "previous_version": change.previous,
            "instances_differ": change.differing, "instances_compared": change.compared,
            "order_changed": change.reordered}


class _StagedSpec:
    """A validated custom spec waiting in a staging folder; ``install`` swaps it in (keeping the spec it
    replaces until the transaction has committed), and leaving the ``with`` without a commit undoes it."""

    def __init__(self, spec: BenchmarkSpec, staged: Path, target: Path) -> None:
        self.spec = spec
        self.staged = staged
        self.target = target
        self.previous: bytes | None = None
        self.installed = False
        self.committed = False

    def install(self) -> None:
        self.previous = self.target.read_bytes() if self.target.exists() else None
        self.target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.replace(self.staged, self.target)
        self.installed = True

    def installed_and_committed(self) -> None:
        self.committed = True

    def undo(self) -> None:
        if not self.installed or self.committed:
            return
        if self.previous is None:
            self.target.unlink(missing_ok=True)
        else:
            atomic_write(self.target, self.previous)


@contextmanager
def _staged_spec(spec_file: Path | None, home: Path) -> Iterator[_StagedSpec | None]:
    if spec_file is None:
        yield None
        return
    staging = home / f".staging-{os.getpid()}"
    try:
        spec = register_custom_spec(spec_file, staging)
        staged = _StagedSpec(spec, custom_dir(staging) / f"{spec.id}.yaml", custom_dir(home) / f"{spec.id}.yaml")
        try:
            yield staged
        finally:
            staged.undo()
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _refuse_unfilled_templates(spec: BenchmarkSpec, result: LoadResult, spec_file: Path | None) -> None:
    """A custom spec's template naming a field its loader options do not give (``{note}`` for ``context``) could
    fill no prompt: refused here, naming the template, the field and the fields there are (names, never values),
    rather than at every run."""
    templates = instance_templates(spec)
    for instance in result.instances:
        for name, fields in templates.items():
            missing = sorted(fields - set(instance.fields))
            if missing:
                given = ", ".join(sorted(instance.fields)) or "none"
                raise TemplateError(
                    f"{spec_file or f'benchmark {spec.id}'}: field {name} uses "
                    f"{', '.join('{' + m + '}' for m in missing)}, which the loader does not give its instances "
                    f"(their fields: {given}); map a column to it under loader_options.fields, or use one of those")


def register_file(app_ctx: AppContext, spec: BenchmarkSpec, path: Path, *, spec_file: Path | None = None
                  ) -> Registration:
    """Validate ``path`` for ``spec`` and store it, audited: intent first (fail closed), then the outcome.

    ``spec_file``: a custom benchmark YAML, stored in the home only once its data has validated.
    """
    home = app_ctx.home
    source_name = recorded_name(path.name)
    attempt = announce(home, app_ctx.actor, "dataset.register", role="informatics", opened="attempt",
                       benchmark=spec.id, source_name=source_name)
    try:
        refuse_appliance_files(home, [path])
        with csv_field_cap(home.config.loaders.csv_field_max_mib):
            result = load_dataset(spec, path)
        refuse_appliance_files(home, result.files)
        if spec_file is not None or is_custom(spec.id):
            _refuse_unfilled_templates(spec, result, spec_file)
    except BaseException as exc:  # a refused file, and a Ctrl-C or memory error while reading it: an outcome each
        # The error's class (SqlRefused, SpecPathError, ExtractError...) is safe to audit; its message is not.
        attempt.conclude("rejected" if isinstance(exc, BadInputError) else "failure", benchmark=spec.id,
                         source_name=source_name, reason=type(exc).__name__)
        raise
    # The store first (waiting, bounded, for its lock): a registration that cannot take it writes nothing. The
    # custom spec is validated into a staging folder and moved into place as the data's transaction commits;
    # any failure leaves the home's spec as it was (issue 12 §6).
    # Every attempt ends with an outcome in the trail: the registration once its data is committed (whatever
    # follows), else the failure that stopped it (a store error, Ctrl-C).
    registration: Registration | None = None
    try:
        with app_ctx.open_store() as store:
            with _staged_spec(spec_file, home.root) as staged:
                if staged is not None:
                    spec = staged.spec
                registration = store_dataset(store, spec, path, result,
                                             before_commit=staged.install if staged is not None else None)
                if staged is not None:
                    staged.installed_and_committed()
            # the audit trail's keys keep their meaning: fingerprint is the source's sha256
            attempt.conclude(benchmark=spec.id, fingerprint=registration.source_sha256,
                             version=registration.fingerprint, instances=registration.instances,
                             skipped=sum(registration.skipped.values()),
                             **reading_change_audit(registration.reading_changed))
            # Each prompt's send-order key, once, so that planning a run reads them instead of building every
            # prompt (without them, planning builds the keys itself).
            store_prefix_keys(store, spec, registration.fingerprint, result.instances)
    except BaseException as exc:
        if registration is None:  # a spec refused as it is staged is rejected, as a refused file is
            attempt.conclude("rejected" if isinstance(exc, BadInputError) else "failure", benchmark=spec.id,
                             source_name=source_name, reason=type(exc).__name__)
        raise
    return registration


def register_dataset(app_ctx: AppContext, benchmark: str, path: Path, *, spec_file: Path | None = None
                     ) -> Registration:
    """``datasets register``: the benchmark's spec (built in, or the custom ``spec_file`` that must define
    ``benchmark``), then :func:`register_file`."""
    if spec_file is not None:
        spec = load_custom_spec(spec_file)
        if spec.id != benchmark:
            raise BadInputError(f"{spec_file}: defines benchmark {spec.id!r}, not {benchmark!r}")
    else:
        spec = app_ctx.specs.get(benchmark)
    return register_file(app_ctx, spec, path, spec_file=spec_file)
