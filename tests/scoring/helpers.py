"""Helpers for scoring and analysis tests: a home, a registered dataset, runs written straight into the store."""

from __future__ import annotations

import hashlib
import inspect
import uuid
from datetime import UTC, datetime
from pathlib import Path

from medhelm_local.home import Home
from medhelm_local.home.config import ModelEndpoint, RunnerSettings
from medhelm_local.prompts.build import build_request, request_hash
from medhelm_local.records import InferenceResult, Instance
from medhelm_local.store import Store
from medhelm_local.store.store import RunInfo


def make_home(root: Path, judges: dict[str, str] | None = None, *, max_retries: int = 1) -> Home:
    """A home whose config has one fake judge model per ``{name: base_url}``, all listed as judges."""
    home = Home(root)
    home.init()
    config = home.config.model_copy(deep=True)
    for name, url in (judges or {}).items():
        config.models.append(ModelEndpoint(name=name, base_urls=[url], timeout_s=5.0))
    config.judges = list(judges or {})
    config.runner = RunnerSettings(max_concurrency=8, max_retries=max_retries, seed=0)
    home.save_config(config)
    return home


def register(store: Store, benchmark: str, instances: list[Instance]) -> str:
    """Register ``instances`` as the benchmark's current dataset; returns the dataset fingerprint."""
    digest = hashlib.sha256(("|".join(i.id for i in instances) + benchmark).encode()).hexdigest()
    if "loader_sha256" in inspect.signature(store.register_dataset).parameters:
        # versioned datasets: the fingerprint covers the source and the loader
        fingerprint, _ = store.register_dataset(benchmark, digest, "test-loader", "test", instances, {})
        return str(fingerprint)
    store.register_dataset(benchmark, digest, "test", instances, {})  # type: ignore[call-arg]
    return digest


def add_run(store: Store, model: str, benchmark: str, fingerprint: str, instances: list[Instance],
            outputs: dict[str, str | None], *, status: str = "finished", prompt_tokens: int | None = None,
            completion_tokens: int | None = None) -> str:
    """A run of ``model`` whose responses are ``outputs`` (None: a failed request)."""
    from medhelm_local.benchmarks.registry import get_spec

    spec = get_spec(benchmark)
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    now = datetime.now(UTC).replace(tzinfo=None)
    store.create_run(RunInfo(run_id=run_id, model=model, benchmarks=[benchmark], created_at=now, finished_at=now,
                             status=status, max_instances=None, seed=0, manifest={}),
                     [(benchmark, inst.id, fingerprint, pos) for pos, inst in enumerate(instances)])
    for inst in instances:
        request = build_request(spec, inst)
        output = outputs.get(inst.id)
        result = InferenceResult(text=output, latency_s=0.1, prompt_tokens=prompt_tokens,
                                 completion_tokens=completion_tokens) if output is not None else InferenceResult(
            error="http_503", latency_s=0.1)
        store.record_response(run_id, request, request_hash(request), result)
    return run_id


def add_multi_run(store: Store, model: str,
                  plan: dict[str, tuple[str, list[Instance], dict[str, str | None]]]) -> str:
    """One finished run over several benchmarks: ``{benchmark: (fingerprint, instances, outputs)}``."""
    from medhelm_local.benchmarks.registry import get_spec

    run_id = f"run-{uuid.uuid4().hex[:12]}"
    now = datetime.now(UTC).replace(tzinfo=None)
    items = [(benchmark, inst.id, fingerprint, pos) for benchmark, (fingerprint, instances, _) in plan.items()
             for pos, inst in enumerate(instances)]
    store.create_run(RunInfo(run_id=run_id, model=model, benchmarks=list(plan), created_at=now, finished_at=now,
                             status="finished", max_instances=None, seed=0, manifest={}), items)
    for benchmark, (_, instances, outputs) in plan.items():
        spec = get_spec(benchmark)
        for inst in instances:
            request = build_request(spec, inst)
            output = outputs.get(inst.id)
            result = (InferenceResult(text=output, latency_s=0.1) if output is not None
                      else InferenceResult(error="http_503", latency_s=0.1))
            store.record_response(run_id, request, request_hash(request), result)
    return run_id
