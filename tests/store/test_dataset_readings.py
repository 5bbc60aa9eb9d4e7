"""A dataset version's instances as read (``instances_sha256``): the same source and loader settings read into
other instances are a new version; read into the same instances, the version already stored. Stores from before
the digest get it from their stored instances when first opened for writing."""

from __future__ import annotations

from pathlib import Path

from medhelm_local.records import Instance
from medhelm_local.store import Store
from medhelm_local.store.store import dataset_version, stored_form
from tests.scoring.helpers import make_home

SOURCE, LOADER = "a" * 64, "loader-settings"


def _data(n: int = 4) -> list[Instance]:
    return [Instance(benchmark="pubmedqa", id=f"p{i}", fields={"question": f"q{i}?", "context": f"c{i}"},
                     references=["yes"], label="yes", meta={"year": 2020 + i}) for i in range(n)]


def _register(store: Store, instances: list[Instance]) -> tuple[str, bool]:
    stored = store.register_dataset("pubmedqa", SOURCE, LOADER, "x.json", instances, {})
    return stored.fingerprint, stored.new


def test_a_store_from_before_gets_each_versions_digest_and_keeps_its_versions(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    data = _data()
    with Store.open(home) as store:  # as a release before the digest left it
        first, _ = _register(store, data)
        store.conn.execute("DELETE FROM meta WHERE key = 'schema_digest'")
        store.conn.execute("DROP TABLE dataset_readings")
    with Store.open(home) as store:
        current = store.current_dataset("pubmedqa")
        assert current is not None
        assert current.instances_sha256 == store.digest_instances(stored_form(i) for i in data)
        assert _register(store, data) == (first, False)  # the same reading: the version it was
        assert first == dataset_version(SOURCE, LOADER)
        changed = [data[0].model_copy(update={"label": "no"}), *data[1:]]
        second, new = _register(store, changed)
        assert new and second == dataset_version(SOURCE, LOADER,
                                                 store.digest_instances(stored_form(i) for i in changed))
        assert [d.fingerprint for d in store.list_datasets()] == [second, first]


def test_the_same_instances_serialized_otherwise_are_the_version_already_stored(tmp_path: Path) -> None:
    """A release whose loader builds the same fields in another order serializes them otherwise: not a new
    reading."""
    home = make_home(tmp_path / "home")
    data = _data()
    reordered_keys = [i.model_copy(update={"fields": dict(reversed(i.fields.items()))}) for i in data]
    assert stored_form(reordered_keys[0]) != stored_form(data[0])
    with Store.open(home) as store:
        first, _ = _register(store, data)
        stored = store.register_dataset("pubmedqa", SOURCE, LOADER, "x.json", reordered_keys, {})
        assert (stored.fingerprint, stored.new, stored.reading_changed) == (first, False, None)
        # Equal in Python, not in JSON: a year read as 2020.0 is another reading.
        as_float = [data[0].model_copy(update={"meta": {"year": 2020.0}}), *data[1:]]
        assert as_float[0].meta == data[0].meta
        changed = store.register_dataset("pubmedqa", SOURCE, LOADER, "x.json", as_float, {}).reading_changed
        assert changed is not None and (changed.differing, changed.compared) == (1, 4)


def test_a_new_reading_counts_the_instances_that_differ(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    data = _data()
    with Store.open(home) as store:
        first, _ = _register(store, data)
        # p1's label changed, p3 no longer read, p9 read now: 3 of the 5 ids differ.
        other = [data[0], data[1].model_copy(update={"label": "no"}), data[2],
                 data[2].model_copy(update={"id": "p9"})]
        changed = store.register_dataset("pubmedqa", SOURCE, LOADER, "x.json", other, {}).reading_changed
        assert changed is not None
        assert (changed.previous, changed.differing, changed.compared, changed.reordered) == (first, 3, 5, False)
        # The same instances in another order: a new reading too (runs plan by position).
        again = store.register_dataset("pubmedqa", SOURCE, LOADER, "x.json", list(reversed(data)), {})
        assert again.new and again.reading_changed is not None
        assert again.reading_changed.previous != first  # the newest reading of this source is compared with
        assert (again.reading_changed.differing, again.reading_changed.reordered) == (3, True)


def test_going_back_to_an_earlier_reading_makes_its_version_current_again(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    data = _data()
    changed = [i.model_copy(update={"references": ["no"]}) for i in data]
    with Store.open(home) as store:
        first, _ = _register(store, data)
        second, _ = _register(store, changed)
        assert _register(store, data) == (first, False)
        current = store.current_dataset("pubmedqa")
        assert current is not None and current.fingerprint == first
        assert _register(store, changed) == (second, False)
        assert len(store.list_datasets()) == 2
        # Another source, or other loader settings, are other versions, as before.
        other = store.register_dataset("pubmedqa", "b" * 64, LOADER, "y.json", data, {})
        assert other.new and other.reading_changed is None and other.fingerprint == dataset_version("b" * 64, LOADER)
