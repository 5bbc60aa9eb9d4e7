"""Deterministic, label-stratified sampling for ``--max-instances``."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence


def _rank(seed: int, instance_id: str) -> str:
    return hashlib.sha256(f"{seed}:{instance_id}".encode()).hexdigest()


def sample_ids(ids_with_labels: Sequence[tuple[str, str | None]], n: int | None, seed: int) -> list[str]:
    """Choose ``n`` ids, stratified by label in proportion to each label's share.

    The choice depends only on the ids, labels, ``n`` and ``seed`` (not on input order), so the same seed
    picks the same instances on every machine. The result keeps the input order.
    """
    if n is None or n >= len(ids_with_labels):
        return [i for i, _ in ids_with_labels]
    if n <= 0:
        return []
    strata: dict[str | None, list[str]] = defaultdict(list)
    for instance_id, label in ids_with_labels:
        strata[label].append(instance_id)
    for members in strata.values():
        members.sort(key=lambda i: _rank(seed, i))
    total = len(ids_with_labels)
    # Largest-remainder apportionment of n over the strata.
    quotas = {label: n * len(members) / total for label, members in strata.items()}
    counts = {label: int(q) for label, q in quotas.items()}
    leftover = n - sum(counts.values())
    by_remainder = sorted(strata, key=lambda lab: (-(quotas[lab] - counts[lab]), str(lab)))
    for label in by_remainder[:leftover]:
        counts[label] += 1
    chosen = {i for label, members in strata.items() for i in members[: counts[label]]}
    return [i for i, _ in ids_with_labels if i in chosen]
