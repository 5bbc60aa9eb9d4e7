"""Differencing across exports: a released cell and a new one of the same benchmark and model must not differ
by 1 to ``min_cell_size - 1`` instances (2/15 then 3/16 reveals the added patient's label).

A cell's instance sets (those planned, and those scored) are keys ``sha256(sha256(id) sha256(payload))`` read
from the encrypted store; approval records the sets of every cell it releases (``export_released_cells``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from medhelm_local.store.store import Store

KINDS = ("planned", "scored")


_KEY = "sha256(sha256(r.instance_id) || sha256(CAST(i.payload AS VARCHAR)))"
_FROM = ("FROM run_items r JOIN instances i ON i.benchmark = r.benchmark AND i.fingerprint = r.fingerprint "
         "AND i.instance_id = r.instance_id")
_SCORED = (" JOIN scores s ON s.run_id = r.run_id AND s.benchmark = r.benchmark AND s.instance_id = r.instance_id "
           "AND s.metric = ? AND s.value IS NOT NULL")
_WHERE = " WHERE r.run_id = ? AND r.benchmark = ?"


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


def _source(kind: str, run_id: str, benchmark: str, metric: str) -> tuple[str, list[str]]:
    """``FROM ... WHERE ...`` selecting one cell's planned or scored instances, and its parameters."""
    if kind == "planned":
        return _FROM + _WHERE, [run_id, benchmark]
    return _FROM + _SCORED + _WHERE, [metric, run_id, benchmark]


def cell_instances(store: Store, index: int, run_id: str, model: str, benchmark: str, metric: str) -> CellInstances:
    sets = {}
    for kind in KINDS:
        source, params = _source(kind, run_id, benchmark, metric)
        sets[kind] = frozenset(r[0] for r in store.conn.execute(f"SELECT {_KEY} {source}", params).fetchall())
    return CellInstances(index=index, run_id=run_id, model=model, benchmark=benchmark, metric=metric,
                         planned=sets["planned"], scored=sets["scored"])


def released(store: Store, model: str, benchmark: str) -> dict[tuple[str, str], dict[str, frozenset[str]]]:
    """``{(request id, run id): {kind: instance keys}}`` of the released cells of one benchmark and model."""
    rows = store.conn.execute(
        "SELECT request_id, run_id, kind, instance_key FROM export_released_cells WHERE model = ? AND benchmark = ?",
        [model, benchmark]).fetchall()
    out: dict[tuple[str, str], dict[str, set[str]]] = {}
    for request_id, run_id, kind, instance_key in rows:
        out.setdefault((request_id, run_id), {k: set() for k in KINDS})[kind].add(instance_key)
    return {key: {k: frozenset(v) for k, v in sets.items()} for key, sets in out.items()}


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
    """Record the instance sets of every released cell (the same queries as :func:`cell_instances`, run inside
    the store: no instance key passes through Python)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    with store.transaction():
        store.conn.execute("DELETE FROM export_released_cells WHERE request_id = ?", [request_id])
        for cell in cells:
            for kind in KINDS:
                source, params = _source(kind, cell.run_id, cell.benchmark, cell.metric)
                store.conn.execute(f"INSERT INTO export_released_cells SELECT ?, ?, ?, ?, ?, {_KEY}, ? {source}",
                                   [request_id, cell.model, cell.benchmark, cell.run_id, kind, now, *params])
