"""Differencing across exports: a released cell and a new one of the same benchmark and model must not differ
by 1 to ``min_cell_size - 1`` instances (2/15 then 3/16 reveals the added patient's label).

A cell's instance sets (those planned, and those scored) are keys ``sha256(sha256(id) sha256(payload))`` read
from the encrypted store; approval records the sets of every cell it releases (``export_released_cells``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from medhelm_local.store.exports import KINDS, cell_instance_keys, record_released_cells, released_cells
from medhelm_local.store.store import Store


@dataclass(frozen=True)
class CellInstances:
    index: int  # position in the export's cells
    run_id: str
    model: str
    benchmark: str
    metric: str
    planned: frozenset[str]
    scored: frozenset[str]

    def kind(self, name: str) -> frozenset[str]:
        return self.planned if name == "planned" else self.scored


def cell_instances(store: Store, index: int, run_id: str, model: str, benchmark: str, metric: str) -> CellInstances:
    sets = cell_instance_keys(store, run_id, benchmark, metric)
    return CellInstances(index=index, run_id=run_id, model=model, benchmark=benchmark, metric=metric,
                         planned=sets["planned"], scored=sets["scored"])


def released(store: Store, model: str, benchmark: str) -> dict[tuple[str, str], dict[str, frozenset[str]]]:
    """``{(request id, run id): {kind: instance keys}}`` of the released cells of one benchmark and model."""
    return released_cells(store, model, benchmark)


def close_pairs(cells: list[CellInstances], store: Store, min_cell_size: int) -> list[tuple[int, str]]:
    """``(cell index, what it is too close to)`` for every cell whose planned or scored instances differ from a
    released cell, or another cell of this export, of the same benchmark and model by 1 to min - 1."""
    problems: list[tuple[int, str]] = []

    def close(a: CellInstances, other: dict[str, frozenset[str]]) -> bool:
        return any(0 < len(a.kind(k) ^ other[k]) < min_cell_size for k in KINDS)

    cache: dict[tuple[str, str], dict[tuple[str, str], dict[str, frozenset[str]]]] = {}
    for cell in cells:
        key = (cell.model, cell.benchmark)
        if key not in cache:
            cache[key] = released(store, *key)
        for (request_id, _run_id), sets in sorted(cache[key].items()):
            if close(cell, sets):
                problems.append((cell.index, f"released in {request_id}"))
        for other in cells:
            if other.index != cell.index and (other.model, other.benchmark) == key and close(
                    cell, {k: other.kind(k) for k in KINDS}):
                problems.append((cell.index, f"$.cells[{other.index}] of this export"))
    return problems


def record_released(store: Store, request_id: str, cells: Iterable[CellInstances]) -> None:
    """Record the instance sets of every released cell (computed inside the store: no instance key passes
    through Python)."""
    record_released_cells(store, request_id, [(c.model, c.benchmark, c.run_id, c.metric) for c in cells])
