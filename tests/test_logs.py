"""The PHI guard: whatever a caller passes, no free text reaches a log record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


def _fresh_process(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDHELM_")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])


def test_a_command_that_logs_nothing_never_imports_structlog() -> None:
    """structlog (and the rich modules it brings) is imported at the first record that passes the level: `run`
    with its modules imported and logging configured has not, and a record below the level does not."""
    done = _fresh_process(
        "import sys\n"
        "from medhelm_local.cli import register_commands\n"
        "from medhelm_local.logs import configure_logging, get_logger\n"
        "register_commands('run')\n"
        "configure_logging('WARNING', json_lines=True)\n"
        "get_logger('test').info('quiet.event')\n"
        "print('structlog' in sys.modules)\n"
        f"get_logger('test').warning('loud.event', prompt={SECRET!r}, done=3)\n"
        "print('structlog' in sys.modules)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
    (record,) = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert record["event"] == "loud.event" and record["done"] == 3 and record["level"] == "warning"
    assert SECRET not in done.stderr


def test_a_record_logged_before_logging_is_configured_goes_through_the_guard() -> None:
    """... under the default settings, which configuring logging afterwards still replaces."""
    done = _fresh_process(
        "from medhelm_local.logs import configure_logging, get_logger\n"
        f"get_logger('test').warning('early.event', prompt={SECRET!r}, detail={SECRET!r})\n"
        "configure_logging('ERROR', json_lines=True)\n"
        f"get_logger('test').warning('later.event', prompt={SECRET!r})\n"
        "get_logger('test').error('last.event')\n")
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stderr and "Jane" not in done.stderr
    early, last = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert early["event"] == "early.event" and early["prompt"] == "[redacted prompt]"
    assert last["event"] == "last.event" and last["level"] == "error"  # the warning fell below the new level
