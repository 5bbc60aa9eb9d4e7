"""Send-order keys stored at registration: planning reads them instead of building every prompt, and the plan is
the one that building the prompts gives, whatever the keys' state (stored, partial, for another template)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.application.datasets import register_dataset
from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.prompts.build import template_hash
from medhelm_local.runner import plan as plan_mod
from medhelm_local.runner.plan import compute_plan, plan_items
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from tests.runner.helpers import app, make_home

FILES = {"pubmedqa": "pubmedqa/ori_pqal.json", "medqa": "medqa/phrases_no_exclude_test.jsonl"}
SAMPLES = Path(str(resources.files("medhelm_local.data") / "samples"))


def _order(store: Store, specs: SpecRegistry, benchmarks: list[str], max_instances: int | None
           ) -> list[tuple[str, str, int, str]]:
    plan = compute_plan(store, specs, "fake", benchmarks, max_instances=max_instances, seed=3)
    return [(i.benchmark, i.instance_id, i.position, i.order_key) for chunk in plan_items(store, plan) for i in chunk]


def _prompts_built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    built: list[str] = []
    original = plan_mod.build_request

    def spy(spec: Any, instance: Any, **kwargs: Any) -> Any:
        built.append(instance.id)
        return original(spec, instance, **kwargs)

    monkeypatch.setattr(plan_mod, "build_request", spy)
    return built


@pytest.fixture
def registered(tmp_path: Path, public_data: Path) -> Any:
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    for benchmark, rel in FILES.items():
        register_dataset(app(home), benchmark, public_data / rel)
    return home


def _key_rows(store: Store) -> int:
    row = store.conn.execute("SELECT count(*) FROM prefix_keys").fetchone()
    return int(row[0]) if row else 0


@pytest.mark.parametrize("max_instances", [None, 37])
def test_a_plan_from_stored_keys_is_the_plan_built_from_the_prompts(
        registered: Any, monkeypatch: pytest.MonkeyPatch, max_instances: int | None) -> None:
    specs = app(registered).specs
    benchmarks = list(FILES)
    built = _prompts_built(monkeypatch)
    with Store.open(registered) as store:
        for benchmark in benchmarks:
            dataset = store.current_dataset(benchmark)
            assert dataset is not None
            assert runs_db.has_prefix_keys(store, benchmark, dataset.fingerprint, template_hash(specs.get(benchmark)))
        from_keys = _order(store, specs, benchmarks, max_instances)
        assert built == [], "no prompt is built when the keys are stored"
        store.conn.execute("DELETE FROM prefix_keys")
        from_prompts = _order(store, specs, benchmarks, max_instances)
    assert len(built) == len(from_prompts) > 0
    assert from_keys == from_prompts
    assert len(from_keys) == (1000 + 1273 if max_instances is None else 2 * max_instances)


def test_stored_keys_are_read_in_chunks_without_a_query_past_the_end(
        registered: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 100: PubMedQA's 1,000 keys fill ten (and one query finds there is no eleventh), MedQA's 1,273
    end with a short one, after which nothing more is asked; the plan is the one built from the prompts."""
    specs = app(registered).specs
    benchmarks = list(FILES)
    monkeypatch.setattr(plan_mod, "_CHUNK", 100)
    reads: list[str] = []
    original = runs_db.prefix_keys_in_order

    def spy(store: Store, benchmark: str, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        reads.append(benchmark)
        return original(store, benchmark, *args, **kwargs)

    monkeypatch.setattr(runs_db, "prefix_keys_in_order", spy)
    with Store.open(registered) as store:
        from_keys = _order(store, specs, benchmarks, None)
        store.conn.execute("DELETE FROM prefix_keys")
        from_prompts = _order(store, specs, benchmarks, None)
    assert from_keys == from_prompts and len(from_keys) == 1000 + 1273
    assert reads == ["pubmedqa"] * 11 + ["medqa"] * 13


def test_a_partial_key_set_is_not_used(registered: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = app(registered).specs
    with Store.open(registered) as store:
        whole = _order(store, specs, ["pubmedqa"], None)
        store.conn.execute("DELETE FROM prefix_keys WHERE benchmark = 'pubmedqa' AND instance_id = "
                           "(SELECT min(instance_id) FROM prefix_keys WHERE benchmark = 'pubmedqa')")
        built = _prompts_built(monkeypatch)
        assert _order(store, specs, ["pubmedqa"], None) == whole
    assert len(built) == 1000


def test_keys_are_stored_whole_or_not_at_all(tmp_path: Path, public_data: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    real = runs_db.PREFIX_KEYS
    binds: list[int] = []

    class FailsSecondBatch:
        source = real.source

        def bind(self, **values: Any) -> str:
            binds.append(len(values["instance_id"]))
            if len(binds) == 2:
                raise OSError("disk full")
            return real.bind(**values)

    monkeypatch.setattr(runs_db, "KEYS_PER_BATCH", 300)
    monkeypatch.setattr(runs_db, "PREFIX_KEYS", FailsSecondBatch())
    with pytest.raises(OSError, match="disk full"):
        register_dataset(app(home), "pubmedqa", public_data / FILES["pubmedqa"])
    monkeypatch.undo()
    specs = app(home).specs
    with Store.open(home) as store:
        assert _key_rows(store) == 0, "the first batch was rolled back with the second"
        assert store.current_dataset("pubmedqa") is not None, "the dataset itself was committed before"
        built = _prompts_built(monkeypatch)
        assert len(_order(store, specs, ["pubmedqa"], None)) == 1000
    assert len(built) == 1000


def test_a_changed_prompt_gets_its_own_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    spec_file, data = SAMPLES / "followup_needed.yaml", SAMPLES / "followup_needed.csv"
    register_dataset(app(home), "followup_needed", data, spec_file=spec_file)
    changed = tmp_path / "followup_needed.yaml"
    text = spec_file.read_text(encoding="utf-8")
    assert "You are a care coordinator" in text
    changed.write_text(text.replace("You are a care coordinator", "You are a discharge nurse"), encoding="utf-8")
    before = app(home).specs.get("followup_needed")
    register_dataset(app(home), "followup_needed", data, spec_file=changed)  # the same data, a new prompt
    after = app(home).specs.get("followup_needed")
    assert template_hash(before) != template_hash(after)
    with Store.open(home) as store:
        dataset = store.current_dataset("followup_needed")
        assert dataset is not None
        for spec in (before, after):
            assert runs_db.has_prefix_keys(store, spec.id, dataset.fingerprint, template_hash(spec))
        built = _prompts_built(monkeypatch)
        from_keys = _order(store, app(home).specs, ["followup_needed"], None)
        assert built == []
        store.conn.execute("DELETE FROM prefix_keys")
        assert _order(store, app(home).specs, ["followup_needed"], None) == from_keys
    assert len(built) == dataset.n_instances
