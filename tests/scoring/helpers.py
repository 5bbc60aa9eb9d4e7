"""Helpers for scoring and analysis tests: a home, a registered dataset, runs written straight into the store."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from medhelm_local.home import Home
from medhelm_local.home.config import ModelEndpoint, RunnerSettings
from medhelm_local.prompts.build import build_request
from medhelm_local.records import InferenceResult, Instance
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from medhelm_local.store.runs import PlannedItem
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
    # versioned datasets: the fingerprint covers the source and the loader
    fingerprint = store.register_dataset(benchmark, digest, "test-loader", "test", instances, {}).fingerprint
    return fingerprint


def _write_run(store: Store, run: RunInfo,
               plan: Mapping[str, tuple[str, list[Instance], Mapping[str, str | None]]], *,
               prompt_tokens: int | None = None, completion_tokens: int | None = None) -> str:
    """Plan ``run`` and commit its outcomes through the runner's own write path (None output: a failed request)."""
    from medhelm_local.benchmarks.registry import shipped_spec

    items = [PlannedItem(benchmark, inst.id, fingerprint, pos, f"{index:04d}")
             for index, (benchmark, (fingerprint, instances, _)) in enumerate(plan.items())
             for pos, inst in enumerate(instances)]
    runs_db.insert_plan(store, run, [items], plan_key=f"test-{run.run_id}", order_mode="plan",
                        manifest_sha256="0" * 64)
    runs_db.start_session(store, run.run_id, "test", mode="new", shard=None, endpoints=[])
    outcomes = []
    for benchmark, (_, instances, outputs) in plan.items():
        spec = shipped_spec(benchmark)
        for inst in instances:
            request = build_request(spec, inst, seed=run.seed)  # as the runner builds it
            output = outputs.get(inst.id)
            result = (InferenceResult(text=output, latency_s=0.1, prompt_tokens=prompt_tokens,
                                      completion_tokens=completion_tokens) if output is not None
                      else InferenceResult(error="http_503", latency_s=0.1))
            outcomes.append(runs_db.Outcome(request, result))
    runs_db.commit_outcomes(store, run.run_id, "test", 1.0, outcomes, replace_errors=False)
    return run.run_id


def _run_info(model: str, benchmarks: list[str], status: str) -> RunInfo:
    now = datetime.now(UTC).replace(tzinfo=None)
    return RunInfo(run_id=f"run-{uuid.uuid4().hex[:12]}", model=model, benchmarks=benchmarks, created_at=now,
                   finished_at=now, status=status, max_instances=None, seed=0, manifest={})


def add_run(store: Store, model: str, benchmark: str, fingerprint: str, instances: list[Instance],
            outputs: Mapping[str, str | None], *, status: str = "finished", prompt_tokens: int | None = None,
            completion_tokens: int | None = None) -> str:
    """A run of ``model`` whose responses are ``outputs`` (None: a failed request)."""
    return _write_run(store, _run_info(model, [benchmark], status), {benchmark: (fingerprint, instances, outputs)},
                      prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)


def add_multi_run(store: Store, model: str,
                  plan: Mapping[str, tuple[str, list[Instance], Mapping[str, str | None]]]) -> str:
    """One finished run over several benchmarks: ``{benchmark: (fingerprint, instances, outputs)}``."""
    return _write_run(store, _run_info(model, list(plan), "finished"), plan)
