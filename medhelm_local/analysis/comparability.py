"""Whether the runs a leaderboard compares on a benchmark measured the same thing.

The leaderboard takes each model's latest finished run of a benchmark. Runs of different models may have been
made on different versions of the dataset (registered again after the extract changed), with different specs (a
custom spec edited between the runs, an upgrade that changed a prompt or ``max_tokens``) or on different
instances (``--max-instances`` or ``--seed``). Their scores are then not comparable, yet a win rate or a paired
difference would compare them: the leaderboard names what differs, so nobody reads such a comparison as a result.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from medhelm_local.prompts.styles import run_snapshot, snapshot_differences
from medhelm_local.store.store import Store


@dataclass(frozen=True)
class RunConditions:
    """What decides a benchmark's scores in one run besides the model."""

    dataset: str | None  # the registered dataset's fingerprint (its version)
    spec: dict[str, Any] | None  # the run's frozen spec (None: a run created before snapshots)
    instances: str  # "all 1000", or "50 sampled with seed 0"

    @classmethod
    def of(cls, manifest: Mapping[str, Any], benchmark: str) -> RunConditions:
        entry = (manifest.get("datasets") or {}).get(benchmark) or {}
        eligible = entry.get("style_instances", entry.get("instances"))
        planned = entry.get("planned", eligible)
        seed = (manifest.get("seeds") or {}).get("sampling")
        instances = (f"all {eligible}" if planned == eligible
                     else f"{planned} of {eligible} sampled with seed {seed}")
        fingerprint = entry.get("fingerprint")
        return cls(dataset=None if fingerprint is None else str(fingerprint), spec=run_snapshot(benchmark, manifest),
                   instances=instances)


def differences(own: RunConditions, rival: RunConditions) -> list[str]:
    """What differs between two runs' conditions, in words (empty: comparable)."""
    found = []
    if own.dataset != rival.dataset:
        found.append("dataset version")
    if own.spec is not None and rival.spec is not None:
        fields = snapshot_differences(own.spec, rival.spec)
        if fields:
            found.append("spec (" + ", ".join(fields) + ")")
    if own.dataset == rival.dataset and own.instances != rival.instances:  # another version has other instances
        found.append(f"instances ({own.instances} against {rival.instances})")
    return found


def incomparable(store: Store, chosen: Mapping[tuple[str, str], str]) -> dict[tuple[str, str], dict[str, list[str]]]:
    """``(model, benchmark) -> {rival: what differs}`` for each model whose run of a benchmark differs from a
    rival's (``chosen``: the leaderboard's runs, ``(model, benchmark) -> run_id``); comparable pairs are absent."""
    manifests = {run_id: (run.manifest if (run := store.get_run(run_id)) else {}) for run_id in set(chosen.values())}
    by_benchmark: dict[str, dict[str, RunConditions]] = defaultdict(dict)
    for (model, benchmark), run_id in chosen.items():
        by_benchmark[benchmark][model] = RunConditions.of(manifests[run_id], benchmark)
    out: dict[tuple[str, str], dict[str, list[str]]] = {}
    for benchmark, models in by_benchmark.items():
        for model, own in models.items():
            rivals = {rival: found for rival, theirs in models.items()
                      if rival != model and (found := differences(own, theirs))}
            if rivals:
                out[(model, benchmark)] = dict(sorted(rivals.items()))
    return out
