"""Planning a run: which instances of which dataset versions, in which send order, fixed before any request.

The plan is a pure function of the store's current datasets and the run's parameters, so every shard of a run
(and every restart of a killed run) computes the same plan and the same ``plan_key``.

Send order: ``prefix`` (default) sorts requests by a chained hash of their leading text blocks, so requests
that share a long instruction or context prefix go out together and the server's prefix cache hits; ``plan``
keeps the dataset order; ``shuffle`` is a seeded random order (for comparison).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from medhelm_local.benchmarks.registry import SpecRegistry, is_custom
from medhelm_local.benchmarks.sampling import sample_ids
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError
from medhelm_local.prompts.build import TemplateError, build_request, instance_templates, template_hash
from medhelm_local.prompts.styles import DEFAULT_STYLE, check_style, styled_spec
from medhelm_local.records import InferenceRequest, Instance
from medhelm_local.runner.manifest import canonical_json
from medhelm_local.store import runs as runs_db
from medhelm_local.store.runs import PlannedItem
from medhelm_local.store.store import Store

ORDER_MODES = ("prefix", "plan", "shuffle")
PREFIX_BLOCK_CHARS = 256
PREFIX_LEVELS = 16
_CHUNK = 2000


_NEW_RUN_ID = re.compile(r"run-\d{8}T\d{6}Z-[0-9a-f]{6}")  # new_run_id's form


def new_run_id() -> str:
    return datetime.now(UTC).strftime("run-%Y%m%dT%H%M%SZ-") + secrets.token_hex(3)


def derived_run_id(plan_key: str) -> str:
    """The run id every shard of the same plan agrees on without talking to the others."""
    return f"run-{plan_key[:24]}"


def is_generated_run_id(run_id: str, plan_key: str | None) -> bool:
    """Whether ``run_id`` has a form the runner generates: :func:`new_run_id`'s, or the one
    :func:`derived_run_id` gives the run's own plan (``plan_key``; None: a run the runner did not plan)."""
    return _NEW_RUN_ID.fullmatch(run_id) is not None or (plan_key is not None and run_id == derived_run_id(plan_key))


@dataclass
class Plan:
    """What a run evaluates and its key; the items themselves stream from the store (``plan_items``)."""

    benchmarks: list[str]
    datasets: dict[str, dict[str, Any]]
    plan_key: str
    order_mode: str
    seed: int
    max_instances: int | None
    prompt_style: str = DEFAULT_STYLE
    # Each benchmark's spec as this run uses it (the prompt style applied), read once from the caller's registry.
    specs: dict[str, BenchmarkSpec] = field(default_factory=dict)
    # Shard ``(index, count)`` of the run this invocation sends (``run --shard I/N``): slice ``index`` of the
    # send order (``shard_range``). Not part of the plan key: every shard plans the same run.
    shard: tuple[int, int] | None = None


def prefix_key(request: InferenceRequest) -> str:
    """A sortable key: items sharing their first k text blocks share the key's first k segments."""
    text = "\x1e".join(f"{m.role}\x1f{m.content}" for m in request.messages)
    digest = hashlib.blake2b(digest_size=4)
    parts = []
    for level in range(PREFIX_LEVELS):
        block = text[level * PREFIX_BLOCK_CHARS:(level + 1) * PREFIX_BLOCK_CHARS]
        if not block:
            break
        digest.update(block.encode())
        parts.append(digest.copy().hexdigest())
    return "".join(parts)


def _shuffle_key(seed: int, instance_id: str) -> str:
    return hashlib.sha256(f"shuffle:{seed}:{instance_id}".encode()).hexdigest()


def validate_benchmarks(benchmarks: list[str], specs: SpecRegistry) -> None:
    if not benchmarks:
        raise BadInputError("--benchmarks: name at least one benchmark")
    if len(set(benchmarks)) != len(benchmarks):
        raise BadInputError("--benchmarks: a benchmark is named twice")
    for benchmark in benchmarks:
        specs.get(benchmark)


def compute_plan(store: Store, specs: SpecRegistry, model: str, benchmarks: list[str], *,
                 max_instances: int | None, seed: int,
                 order_mode: str = "prefix", prompt_style: str = DEFAULT_STYLE,
                 shard: tuple[int, int] | None = None) -> Plan:
    validate_benchmarks(benchmarks, specs)
    check_style(prompt_style)
    if order_mode not in ORDER_MODES:
        raise BadInputError(f"--order: expected one of {', '.join(ORDER_MODES)}")
    datasets: dict[str, dict[str, Any]] = {}
    styled: dict[str, BenchmarkSpec] = {}
    for benchmark in benchmarks:
        registered = specs.get(benchmark)
        spec = styled[benchmark] = styled_spec(registered, prompt_style)  # exit 2 where no parity
        dataset = store.current_dataset(benchmark)
        if dataset is None:
            raise BadInputError(
                f"benchmark {benchmark} has no registered dataset; run `medhelm-local datasets register "
                f"{benchmark} PATH` first"
            )
        if is_custom(benchmark) and not dataset.read_with(registered.loader_sha256):
            # A custom spec is installed with its data, in one step; a registration killed between the two leaves
            # a spec that did not load the data it would be run on.
            raise BadInputError(
                f"benchmark {benchmark}: its spec's loader settings (input format, loader options, labels, label "
                "map) are not the ones its current dataset was registered with (was a registration interrupted?); "
                f"run `medhelm-local datasets register {benchmark} PATH --spec FILE` again")
        if prompt_style != DEFAULT_STYLE:
            check_style_fields(store, spec, dataset.fingerprint)
        eligible = dataset.n_instances
        if spec.instances_where is not None:
            eligible = len(_eligible_labels(store, spec, dataset.fingerprint))
            if not eligible:
                raise BadInputError(f"benchmark {benchmark}: none of the {dataset.n_instances} registered instances "
                                    f"is one this prompt style runs (meta {spec.instances_where!r}: MedHELM's "
                                    "scenario keeps none of them)")
        planned = eligible if max_instances is None else max(0, min(max_instances, eligible))
        datasets[benchmark] = {"fingerprint": dataset.fingerprint, "template_sha256": template_hash(spec),
                               "instances": dataset.n_instances, "planned": planned}
        if spec.instances_where is not None:  # the style keeps only some instances (MTSamples: HELM's reports)
            datasets[benchmark]["style_instances"] = eligible
    key_material = {"model": model, "benchmarks": benchmarks, "seed": seed, "max_instances": max_instances,
                    "order": order_mode,
                    "datasets": {b: d["fingerprint"] for b, d in datasets.items()},
                    "templates": {b: d["template_sha256"] for b, d in datasets.items()}}
    if prompt_style != DEFAULT_STYLE:  # default-style plans keep the keys they had before styles existed
        key_material["prompt_style"] = prompt_style
    plan_key = hashlib.sha256(canonical_json(key_material)).hexdigest()
    return Plan(benchmarks=list(benchmarks), datasets=datasets, plan_key=plan_key, order_mode=order_mode,
                seed=seed, max_instances=max_instances, prompt_style=prompt_style, specs=styled, shard=shard)


def check_style_fields(store: Store, spec: BenchmarkSpec, fingerprint: str) -> None:
    """A styled prompt may need fields an older loader did not store (PubMedQA's ``labelled_context``): refuse
    before any request, naming the fix, rather than fail on the first prompt."""
    first = next(iter(store.iter_instances(spec.id, fingerprint, chunk=1)), [])
    if not first:
        return
    needed = set().union(*instance_templates(spec).values())
    missing = sorted(needed - set(first[0].fields))
    if missing:
        raise BadInputError(f"benchmark {spec.id}: its registered dataset lacks field(s) {missing} that this prompt "
                            f"style needs (registered by an older loader); register it again: `medhelm-local "
                            f"datasets register {spec.id} PATH`")


def _kept(spec: BenchmarkSpec, instance: Instance) -> bool:
    return spec.instances_where is None or instance.meta.get(spec.instances_where) is True


def _eligible_labels(store: Store, spec: BenchmarkSpec, fingerprint: str) -> list[tuple[str, str | None]]:
    """(id, label) of the instances the styled spec keeps (``instances_where``), in dataset order."""
    return [(i.id, i.label) for chunk in store.iter_instances(spec.id, fingerprint, chunk=_CHUNK)
            for i in chunk if _kept(spec, i)]


def _chosen_chunks(store: Store, spec: BenchmarkSpec, fingerprint: str, max_instances: int | None, seed: int
                   ) -> Iterator[list[Instance]]:
    """The chosen instances in dataset order, a chunk at a time: a full run never holds its dataset in memory.
    A styled spec with ``instances_where`` chooses among the instances it keeps only."""
    benchmark = spec.id
    if max_instances is None:
        for chunk in store.iter_instances(benchmark, fingerprint, chunk=_CHUNK):
            kept = [i for i in chunk if _kept(spec, i)]
            if kept:
                yield kept
        return
    for ids in _sampled_id_chunks(store, spec, fingerprint, max_instances, seed):
        by_id = store.get_instances(benchmark, fingerprint, ids)
        yield [by_id[i] for i in ids]


def _sampled_id_chunks(store: Store, spec: BenchmarkSpec, fingerprint: str, max_instances: int, seed: int
                       ) -> Iterator[list[str]]:
    labels = (store.instance_labels(spec.id, fingerprint) if spec.instances_where is None
              else _eligible_labels(store, spec, fingerprint))
    chosen = sample_ids(labels, max_instances, seed)
    for start in range(0, len(chosen), _CHUNK):
        yield chosen[start:start + _CHUNK]


def _stored_key_chunks(store: Store, spec: BenchmarkSpec, fingerprint: str, max_instances: int | None, seed: int
                       ) -> Iterator[list[tuple[str, str]]] | None:
    """``(instance_id, prefix key)`` of the chosen instances from the keys stored at registration
    (:func:`store_prefix_keys`), in dataset order, a chunk at a time; None where they are not stored for this
    template (or the spec keeps only some instances, which needs them read)."""
    template = template_hash(spec)
    if spec.instances_where is not None or not runs_db.has_prefix_keys(store, spec.id, fingerprint, template):
        return None

    def chunks() -> Iterator[list[tuple[str, str]]]:
        if max_instances is None:
            start = 0
            while keyed := runs_db.prefix_keys_in_order(store, spec.id, fingerprint, template, start=start,
                                                        stop=start + _CHUNK):
                yield keyed
                if len(keyed) < _CHUNK:  # positions run 0..n-1 and every one has its key: that was the last
                    return
                start += _CHUNK
            return
        for ids in _sampled_id_chunks(store, spec, fingerprint, max_instances, seed):
            keys = runs_db.prefix_keys_of(store, spec.id, fingerprint, template, ids)
            yield [(i, keys[i]) for i in ids]

    return chunks()


def _keyed_chunks(store: Store, plan: Plan, spec: BenchmarkSpec, fingerprint: str
                  ) -> Iterator[list[tuple[str, str]]]:
    """``(instance_id, sort key)`` of the chosen instances in dataset order, a chunk at a time."""
    if plan.order_mode == "prefix":
        stored = _stored_key_chunks(store, spec, fingerprint, plan.max_instances, plan.seed)
        if stored is not None:
            yield from stored
            return
    for chunk in _chosen_chunks(store, spec, fingerprint, plan.max_instances, plan.seed):
        if plan.order_mode == "prefix":
            yield [(i.id, prefix_key(build_request(spec, i))) for i in chunk]
        elif plan.order_mode == "shuffle":
            yield [(i.id, _shuffle_key(plan.seed, i.id)) for i in chunk]
        else:
            yield [(i.id, "") for i in chunk]


def plan_items(store: Store, plan: Plan) -> Iterator[list[PlannedItem]]:
    """The plan's items in chunks, each with its sort key; the store ranks them into the send order.

    Send order: benchmarks in the order named, then the mode's key, then dataset order.
    """
    for index, benchmark in enumerate(plan.benchmarks):
        fingerprint = plan.datasets[benchmark]["fingerprint"]
        position = 0
        for chunk in _keyed_chunks(store, plan, plan.specs[benchmark], fingerprint):
            yield [PlannedItem(benchmark, instance_id, fingerprint, position + n, f"{index:04d}:{key}")
                   for n, (instance_id, key) in enumerate(chunk)]
            position += len(chunk)


def prefix_keys(spec: BenchmarkSpec, instances: Iterable[Instance]) -> list[tuple[str, str]]:
    """``(instance_id, prefix key)`` of each instance's prompt under ``spec`` (the seed is not in the prompt)."""
    return [(i.id, prefix_key(build_request(spec, i))) for i in instances]


def store_prefix_keys(store: Store, spec: BenchmarkSpec, fingerprint: str, instances: Sequence[Instance]) -> bool:
    """Compute and store a dataset version's send-order keys under ``spec``'s prompt, unless already stored.

    Returns whether they are stored. Prompts the template cannot fill (a field the loader did not provide) are
    not keyed: planning builds them and reports that error to whoever runs the benchmark, as it always has.
    """
    template = template_hash(spec)
    if runs_db.has_prefix_keys(store, spec.id, fingerprint, template):
        return True
    try:
        keys = prefix_keys(spec, instances)
    except TemplateError:
        return False
    runs_db.store_prefix_keys(store, spec.id, fingerprint, template, keys)
    return True


def shard_range(count_items: int, index: int, count: int) -> tuple[int, int]:
    """Send ranks ``[start, stop)`` of shard ``index`` of ``count``: a balanced partition of the send order."""
    # Contiguous slices of the send order keep prefix groups together within a shard.
    return count_items * index // count, count_items * (index + 1) // count


def parse_shard(value: str) -> tuple[int, int]:
    try:
        index_s, count_s = value.split("/")
        index, count = int(index_s), int(count_s)
    except ValueError:
        raise BadInputError(f"--shard: expected I/N (e.g. 0/4), got {value!r}") from None
    if count < 1 or not 0 <= index < count:
        raise BadInputError(f"--shard: index must be in 0..N-1 and N >= 1, got {value!r}")
    return index, count
