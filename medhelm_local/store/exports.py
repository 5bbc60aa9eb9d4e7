"""The export checks' reads and approval's records: registered instances' payloads (for the PHI scan's term
list) and the instance keys of exported cells (for differencing across exports, ``export_released_cells``).

A cell's instance keys are ``sha256(sha256(id) sha256(payload))``, computed inside the store: recording a
released cell passes no instance key through Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from medhelm_local.store.store import Store

KINDS = ("planned", "scored")  # a cell's instances: those planned, and those with a score

_KEY = "sha256(sha256(r.instance_id) || sha256(CAST(i.payload AS VARCHAR)))"
_FROM = ("FROM run_items r JOIN instances i ON i.benchmark = r.benchmark AND i.fingerprint = r.fingerprint "
         "AND i.instance_id = r.instance_id")
_SCORED = (" JOIN scores s ON s.run_id = r.run_id AND s.benchmark = r.benchmark AND s.instance_id = r.instance_id "
           "AND s.metric = ? AND s.value IS NOT NULL")
_WHERE = " WHERE r.run_id = ? AND r.benchmark = ?"


def instance_payloads(store: Store, benchmark: str, fingerprint: str, *, batch: int = 1000
                      ) -> Iterator[tuple[str, str]]:
    """``(instance id, payload JSON)`` of one registered dataset, read in batches (on its own cursor)."""
    cursor = store.conn.cursor()
    try:
        cursor.execute("USE store")
        cursor.execute("SELECT instance_id, payload FROM instances WHERE benchmark = ? AND fingerprint = ?",
                       [benchmark, fingerprint])
        while rows := cursor.fetchmany(batch):
            for instance_id, payload in rows:
                yield str(instance_id), payload
    finally:
        cursor.close()


def _source(kind: str, run_id: str, benchmark: str, metric: str) -> tuple[str, list[str]]:
    """``FROM ... WHERE ...`` selecting one cell's planned or scored instances, and its parameters."""
    if kind == "planned":
        return _FROM + _WHERE, [run_id, benchmark]
    return _FROM + _SCORED + _WHERE, [metric, run_id, benchmark]


def cell_instance_keys(store: Store, run_id: str, benchmark: str, metric: str) -> dict[str, frozenset[str]]:
    """``{kind: instance keys}`` of one cell (a run's benchmark, scored by ``metric``)."""
    sets = {}
    for kind in KINDS:
        source, params = _source(kind, run_id, benchmark, metric)
        sets[kind] = frozenset(r[0] for r in store.conn.execute(f"SELECT {_KEY} {source}", params).fetchall())
    return sets


def released_cells(store: Store, model: str, benchmark: str) -> dict[tuple[str, str], dict[str, frozenset[str]]]:
    """``{(request id, run id): {kind: instance keys}}`` of the released cells of one benchmark and model."""
    rows = store.conn.execute(
        "SELECT request_id, run_id, kind, instance_key FROM export_released_cells WHERE model = ? AND benchmark = ?",
        [model, benchmark]).fetchall()
    out: dict[tuple[str, str], dict[str, set[str]]] = {}
    for request_id, run_id, kind, instance_key in rows:
        out.setdefault((request_id, run_id), {k: set() for k in KINDS})[kind].add(instance_key)
    return {key: {k: frozenset(v) for k, v in sets.items()} for key, sets in out.items()}


def record_released_cells(store: Store, request_id: str, cells: Iterable[tuple[str, str, str, str]]) -> None:
    """Record the instance keys of every released cell, ``(model, benchmark, run id, metric)``, replacing what
    ``request_id`` recorded before (the same queries as :func:`cell_instance_keys`)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    with store.transaction():
        store.conn.execute("DELETE FROM export_released_cells WHERE request_id = ?", [request_id])
        for model, benchmark, run_id, metric in cells:
            for kind in KINDS:
                source, params = _source(kind, run_id, benchmark, metric)
                store.conn.execute(f"INSERT INTO export_released_cells SELECT ?, ?, ?, ?, ?, {_KEY}, ? {source}",
                                   [request_id, model, benchmark, run_id, kind, now, *params])
