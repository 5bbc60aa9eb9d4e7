"""The PHI guard: whatever a caller passes, no free text reaches a log record."""

from __future__ import annotations

import json

import pytest

from medhelm_local.logs import configure_logging, get_logger

SECRET = "Mrs Jane Q Example, DOB 1950-01-02, metastatic disease"


@pytest.fixture
def json_log(capsys: pytest.CaptureFixture[str]):
    configure_logging("DEBUG", json_lines=True, force=True)

    def records() -> list[dict[str, object]]:
        return [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.strip()]

    yield records
    configure_logging(force=True)


def test_text_fields_are_redacted_ids_survive(json_log) -> None:
    log = get_logger("test")
    log.info("run.progress", run_id="run-20260101T000000Z-abc123", benchmark="pubmedqa", done=3, total=10,
             prompt=SECRET, output=SECRET, context=SECRET, explanation=SECRET, detail=SECRET,
             nested={"note_text": SECRET, "count": 2, "why": SECRET}, items=[SECRET, "ok-id"])
    (record,) = json_log()
    assert SECRET not in json.dumps(record)
    assert "Jane" not in json.dumps(record)
    assert record["run_id"] == "run-20260101T000000Z-abc123"
    assert record["benchmark"] == "pubmedqa" and record["done"] == 3
    assert record["nested"] == {"note_text": "[redacted]", "count": 2, "why": f"[redacted str len={len(SECRET)}]"}
    assert record["items"][1] == "ok-id"


def test_free_text_event_names_are_redacted(json_log) -> None:
    get_logger("test").warning(f"could not parse {SECRET}")
    (record,) = json_log()
    assert record["event"] == "[redacted event]"
    assert SECRET not in json.dumps(record)


def test_exceptions_are_reduced_to_their_type(json_log) -> None:
    log = get_logger("test")
    try:
        raise ValueError(f"bad row: {SECRET}")
    except ValueError:
        log.exception("loader.failed")
    (record,) = json_log()
    assert record["error_type"] == "ValueError"
    assert SECRET not in json.dumps(record)
    assert "Traceback" not in json.dumps(record)


def test_level_filtering(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("WARNING", json_lines=True, force=True)
    log = get_logger("test")
    log.info("quiet.event")
    log.warning("loud.event")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert [r["event"] for r in lines] == ["loud.event"]
    configure_logging(force=True)
