"""Store.reopen: the runner hands back DuckDB's cache after planning; the store must be the same afterwards."""

from __future__ import annotations

from pathlib import Path

from medhelm_local.home import Home
from medhelm_local.records import Instance
from medhelm_local.store import Store


def test_reopen_keeps_data_and_settings_and_accepts_writes(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.init()
    config = home.config.model_copy(deep=True)
    config.store.memory_limit_mb = 96
    home.save_config(config)
    instances = [Instance(benchmark="pubmedqa", id=f"q{i}", fields={"question": f"q{i}?"}, references=["yes"],
                          label="yes") for i in range(3)]
    with Store.open(home) as store:
        fingerprint = store.register_dataset("pubmedqa", "a" * 64, "loader", "x.json", instances, {}).fingerprint
        before = store.conn
        store.reopen()
        assert store.conn is not before
        assert sorted(store.get_instances("pubmedqa", fingerprint, ["q0", "q2"])) == ["q0", "q2"]
        limit = store.conn.execute("SELECT current_setting('memory_limit')").fetchone()
        assert limit is not None and limit[0] == "96.0 MiB"
        external = store.conn.execute("SELECT current_setting('enable_external_access')").fetchone()
        assert external == (False,)
        store.register_dataset("medcalc_bench", "b" * 64, "loader", "y.json",
                               [i.model_copy(update={"benchmark": "medcalc_bench"}) for i in instances], {})
    with Store.open(home) as store:
        assert {d.benchmark for d in store.list_datasets()} == {"pubmedqa", "medcalc_bench"}
