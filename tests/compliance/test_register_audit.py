"""Every dataset registration attempt ends with its outcome in the audit trail: the registration once its data is
committed, whatever fails after it, and the failure that stopped it before. A failure after the validation (a
store error, Ctrl-C, an error building the send-order keys) left only the ``attempt`` record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medhelm_local.application import datasets
from medhelm_local.context import AppContext
from medhelm_local.home import Home
from medhelm_local.store import Store


def _registrations(home: Home) -> list[dict[str, object]]:
    records = [json.loads(line) for line in home.audit_path.read_text().splitlines()]
    return [r for r in records if r.get("action") == "dataset.register"]


def _outcomes(home: Home) -> list[object]:
    return [r.get("outcome") for r in _registrations(home)]


def _assert_interrupted_attempt_concluded(home: Home) -> None:
    """The registration's attempt, then its failure naming the interruption and the attempt it closes."""
    assert _outcomes(home) == ["attempt", "failure"]
    attempt, failure = _registrations(home)
    assert failure["objects"] == {"benchmark": "pubmedqa", "source_name": _sample().name,
                                  "reason": "KeyboardInterrupt", "intent_seq": attempt["seq"]}


def _sample() -> Path:
    from medhelm_local.demo.run_demo import pubmedqa_sample_path

    return pubmedqa_sample_path()


@pytest.fixture
def ctx(tmp_path: Path) -> AppContext:
    home = Home(tmp_path / "home")
    home.init()
    return AppContext(home=home, actor="analyst")


def test_a_failure_before_the_data_is_committed_is_audited(ctx: AppContext, monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    def store_fails(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt  # Ctrl-C while the store is written: nothing is committed

    monkeypatch.setattr(datasets, "store_dataset", store_fails)
    with pytest.raises(KeyboardInterrupt):
        datasets.register_dataset(ctx, "pubmedqa", _sample())
    _assert_interrupted_attempt_concluded(ctx.home)


def test_a_failure_while_the_file_is_read_is_audited(ctx: AppContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (or a memory error) while the file was read left the `attempt` alone in the trail: only a refused
    file (BadInputError) was recorded, and `audit report` now lists an attempt with no outcome as unfinished."""
    from medhelm_local.audit.report import summarize
    from medhelm_local.audit.trail import AuditTrail

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(datasets, "load_dataset", interrupted)
    with pytest.raises(KeyboardInterrupt):
        datasets.register_dataset(ctx, "pubmedqa", _sample())
    _assert_interrupted_attempt_concluded(ctx.home)
    assert summarize(AuditTrail(ctx.home.audit_path).records(), None).unfinished == []


def test_a_failure_after_the_data_is_committed_still_records_the_registration(
        ctx: AppContext, monkeypatch: pytest.MonkeyPatch) -> None:
    def keys_fail(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("building the send-order keys failed")

    monkeypatch.setattr(datasets, "store_prefix_keys", keys_fail)
    with pytest.raises(RuntimeError):
        datasets.register_dataset(ctx, "pubmedqa", _sample())
    with Store.open(ctx.home, read_only=True) as store:
        registered = store.current_dataset("pubmedqa")
    assert registered is not None  # the data was committed: planning builds the keys it lacks
    assert _outcomes(ctx.home) == ["attempt", "success"]  # the registration itself, with its version
    objects = _registrations(ctx.home)[-1]["objects"]
    assert isinstance(objects, dict) and objects["version"] == registered.fingerprint


def test_the_report_says_why_a_missing_or_appliance_file_was_refused(ctx: AppContext, tmp_path: Path) -> None:
    """A registration naming a file that does not exist (the commonest slip) or one of the appliance's own files
    (its keys folder) was listed by `audit report` as "rejected: BadInputError", a Python class name where the
    compliance officer reads why it was refused; now each says so in words."""
    from medhelm_local.audit.report import render_text, summarize
    from medhelm_local.audit.trail import AuditTrail
    from medhelm_local.errors import BadInputError

    key_copy = ctx.home.keys_dir / "notes.json"
    key_copy.write_bytes(_sample().read_bytes())
    for path in (tmp_path / "missing.json", key_copy):
        with pytest.raises(BadInputError):
            datasets.register_dataset(ctx, "pubmedqa", path)
    assert [r["objects"]["reason"] for r in _registrations(ctx.home) if r["outcome"] == "rejected"] == [
        "NotFoundError", "ApplianceFileRefused"]
    text = render_text(summarize(AuditTrail(ctx.home.audit_path).records(), None))
    assert "Error" not in text
    assert "missing.json  rejected: the file or benchmark was not found" in text
    assert "notes.json  rejected: the file is one of the appliance's own (keys, store, audit trail)" in text
