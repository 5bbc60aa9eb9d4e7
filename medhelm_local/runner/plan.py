"""Planning a run: which instances of which dataset versions, fixed before any request is sent."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from medhelm_local import __version__
from medhelm_local.benchmarks.registry import get_spec
from medhelm_local.benchmarks.sampling import sample_ids
from medhelm_local.errors import BadInputError
from medhelm_local.home.config import ModelEndpoint
from medhelm_local.prompts.build import template_hash
from medhelm_local.store.store import RunInfo, Store, utcnow


def new_run_id() -> str:
    return datetime.now(UTC).strftime("run-%Y%m%dT%H%M%SZ-") + secrets.token_hex(3)


def plan_run(store: Store, endpoint: ModelEndpoint, benchmarks: list[str], *, max_instances: int | None,
             seed: int) -> RunInfo:
    if not benchmarks:
        raise BadInputError("--benchmarks: name at least one benchmark")
    if len(set(benchmarks)) != len(benchmarks):
        raise BadInputError("--benchmarks: a benchmark is named twice")
    items: list[tuple[str, str, str, int]] = []
    datasets = {}
    for benchmark in benchmarks:
        spec = get_spec(benchmark)
        dataset = store.current_dataset(benchmark)
        if dataset is None:
            raise BadInputError(
                f"benchmark {benchmark} has no registered dataset; run `medhelm-local datasets register "
                f"{benchmark} PATH` first"
            )
        datasets[benchmark] = {"fingerprint": dataset.fingerprint, "template_sha256": template_hash(spec),
                               "instances": dataset.n_instances}
        chosen = sample_ids(store.instance_labels(benchmark, dataset.fingerprint), max_instances, seed)
        items.extend((benchmark, iid, dataset.fingerprint, pos) for pos, iid in enumerate(chosen))
    manifest = {
        "appliance_version": __version__,
        "model": {"name": endpoint.name, "kind": endpoint.kind.value, "served_model": endpoint.model_id},
        "datasets": datasets,
        "decoding": {"temperature": 0.0, "seed": seed},
        "max_instances": max_instances,
    }
    run = RunInfo(
        run_id=new_run_id(), model=endpoint.name, benchmarks=benchmarks, created_at=utcnow(), finished_at=None,
        status="planned", max_instances=max_instances, seed=seed, manifest=manifest,
    )
    store.create_run(run, items)
    return run
