"""Whether the runs a leaderboard compares on a benchmark measured the same thing.

The leaderboard takes each model's newest finished run that scored a benchmark (``aggregate.shown_runs``). Runs of
different models may have been made on different versions of the dataset (registered again after the extract changed),
with different specs (a custom spec edited between the runs, an upgrade that changed a prompt or ``max_tokens``) or on
different instances (``--max-instances`` or ``--seed``). Their scores are then not comparable: the pairing counts as no
win and no loss in either model's win rate, and no paired difference or MDE pairs them (``analysis.leaderboard``); the
leaderboard names what differs and how many pairings each win rate leaves out. A run of a version other than the one
registered last is named too, with no rival: it is not a score on the benchmark as the appliance now holds it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from medhelm_local.analysis.leaderboard import ModelRow
from medhelm_local.prompts.styles import run_snapshot, snapshot_differences
from medhelm_local.store.store import Store


@dataclass(frozen=True)
class RunConditions:
    """What decides a benchmark's scores in one run besides the model."""

    datasets: frozenset[str]  # the dataset versions (fingerprints) its items were planned from: one
    spec: dict[str, Any] | None  # the run's frozen spec (None: a run created before snapshots)
    instances: str  # "all 1000", or "50 sampled with seed 0"

    @classmethod
    def of(cls, store: Store, run_id: str, manifest: Mapping[str, Any], benchmark: str) -> RunConditions:
        entry = (manifest.get("datasets") or {}).get(benchmark) or {}
        eligible = entry.get("style_instances", entry.get("instances"))
        planned = entry.get("planned", eligible)
        seed = (manifest.get("seeds") or {}).get("sampling")
        instances = (f"all {eligible}" if planned == eligible
                     else f"{planned} of {eligible} sampled with seed {seed}")
        # as InstanceSeries.datasets: the store, not the manifest, is what the run scored
        return cls(datasets=store.run_dataset_versions(run_id, benchmark), spec=run_snapshot(benchmark, manifest),
                   instances=instances)


def differences(own: RunConditions, rival: RunConditions) -> list[str]:
    """What differs between two runs' conditions, in words (empty: comparable)."""
    found = []
    if own.datasets != rival.datasets:
        found.append("dataset version")
    if own.spec is not None and rival.spec is not None:
        fields = snapshot_differences(own.spec, rival.spec)
        if fields:
            found.append("spec (" + ", ".join(fields) + ")")
    if own.datasets == rival.datasets and own.instances != rival.instances:  # another version has other instances
        found.append(f"instances ({own.instances} against {rival.instances})")
    return found


@dataclass
class Comparability:
    # (model, benchmark) -> rival -> what differs between their runs; comparable pairs are absent
    unlike: dict[tuple[str, str], dict[str, list[str]]]
    # (model, benchmark) whose run scored a dataset version other than the one registered last
    outdated: set[tuple[str, str]]


def compare_runs(store: Store, chosen: Mapping[tuple[str, str], str]) -> Comparability:
    """The comparability of the leaderboard's runs (``chosen``: ``(model, benchmark) -> run_id``)."""
    manifests = {run_id: (run.manifest if (run := store.get_run(run_id)) else {}) for run_id in set(chosen.values())}
    by_benchmark: dict[str, dict[str, RunConditions]] = defaultdict(dict)
    for (model, benchmark), run_id in chosen.items():
        by_benchmark[benchmark][model] = RunConditions.of(store, run_id, manifests[run_id], benchmark)
    unlike: dict[tuple[str, str], dict[str, list[str]]] = {}
    outdated: set[tuple[str, str]] = set()
    for benchmark, models in by_benchmark.items():
        registered = store.current_dataset(benchmark)
        for model, own in models.items():
            if registered is not None and own.datasets and own.datasets != {registered.fingerprint}:
                outdated.add((model, benchmark))
            rivals = {rival: found for rival, theirs in models.items()
                      if rival != model and (found := differences(own, theirs))}
            if rivals:
                unlike[(model, benchmark)] = dict(sorted(rivals.items()))
    return Comparability(unlike=unlike, outdated=outdated)


def apply_comparability(rows: list[ModelRow], found: Comparability) -> None:
    """Mark each benchmark whose run differs from a rival's in dataset version, spec or instances, and whether it
    scored the dataset version registered last (``found``: :func:`compare_runs` over the rows' runs)."""
    for row in rows:
        row.not_comparable = {b: found.unlike[(row.model, b)] for b in sorted(row.benchmarks)
                              if (row.model, b) in found.unlike}
        row.dataset_current = {b: (row.model, b) not in found.outdated for b in sorted(row.benchmarks)}


def _left_out_line(row: ModelRow) -> str | None:
    """What the model's win rate leaves out, when it has one and leaves out any pairing (a model with none is
    unranked, and its ``unranked_reason`` says so)."""
    left_out = row.win_pairs_left_out
    if not left_out or row.win_rate is None:
        return None
    return (f"{row.model}'s win rate counts {row.win_pairs} of its {row.win_pairs + left_out} (benchmark, rival) "
            f"pairings: {left_out} left out, their runs not comparable")


def comparability_lines(rows: list[ModelRow]) -> list[str]:
    """One sentence per model whose win rate leaves out pairings of runs that are not comparable, and per model and
    benchmark whose run scored another dataset version than the one registered last, or is not comparable with a
    rival's (the table's and the console's)."""
    lines = []
    for row in rows:
        if (said_left_out := _left_out_line(row)) is not None:
            lines.append(said_left_out)
        for benchmark in sorted(b for b, current in row.dataset_current.items() if not current):
            lines.append(f"{row.model} on {benchmark} scored another version of its dataset than the one registered "
                         f"last: run it again (`medhelm-local run --model {row.model} --benchmarks {benchmark}`)")
        for benchmark, rivals in row.not_comparable.items():
            said = "; ".join(f"{rival}: {', '.join(found)}" for rival, found in rivals.items())
            lines.append(f"{row.model} on {benchmark} is not comparable with {said}. Left out of their win rates, "
                         "paired differences and MDE: to compare them, run the models again on the same dataset "
                         "version, spec and instances")
    return lines
