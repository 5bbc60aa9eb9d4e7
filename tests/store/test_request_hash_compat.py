"""``requests.request_hash`` is no longer written (nothing read it; it can be recomputed from ``request``): stores
created before, where the column is NOT NULL, still open, keep their hashes and take new outcomes."""

from __future__ import annotations

from pathlib import Path

from medhelm_local.records import Instance
from medhelm_local.store import Store
from tests.scoring.helpers import add_run, make_home, register

NULLABLE = ("SELECT is_nullable FROM information_schema.columns WHERE table_name = 'requests' "
            "AND column_name = 'request_hash'")


def test_a_store_with_the_old_not_null_column_takes_new_outcomes(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:  # as a store created before: the column NOT NULL, a row with its hash
        store.conn.execute("ALTER TABLE requests ALTER COLUMN request_hash SET NOT NULL")
        store.conn.execute("INSERT INTO requests VALUES ('run-old', 'pubmedqa', 'p0', '{}', 'ab12')")
        assert store.conn.execute(NULLABLE).fetchone() == ("NO",)
    data = [Instance(benchmark="pubmedqa", id=f"p{i}", fields={"question": "q", "context": "c"},
                     references=["yes"]) for i in range(3)]
    with Store.open(home) as store:
        assert store.conn.execute(NULLABLE).fetchone() == ("YES",)
        fingerprint = register(store, "pubmedqa", data)
        run_id = add_run(store, "m", "pubmedqa", fingerprint, data, {i.id: "yes" for i in data})
        rows = store.conn.execute("SELECT run_id, instance_id, request_hash, request IS NOT NULL FROM requests "
                                  "ORDER BY run_id, instance_id").fetchall()
    assert sorted(rows) == sorted([("run-old", "p0", "ab12", True)] + [(run_id, f"p{i}", None, True) for i in range(3)])
