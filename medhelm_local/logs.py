"""structlog, configured once. A guard processor keeps patient text out of every log record.

The guard is an allowlist, not a blocklist: an event name must look like an identifier, and a string value
survives only if it looks like an id, hash, path, URL or status (no whitespace, bounded length). Anything
else, and any key that names text (prompt, output, context ...), is replaced by a redaction marker with the
value's length. Exceptions are reduced to their type: their messages and tracebacks can quote data.

structlog itself (with the rich modules its console renderer and tracebacks bring: about 25 ms) is imported only
when a first record passes the configured level: a command that logs nothing (``run --json``; any command on a
terminal, whose default level is WARNING) never pays for it. A record logged before ``configure_logging`` was
called is written under the defaults, through the guard like any other.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import MutableMapping
from typing import Any

_SAFE_STRING = re.compile(r"^[\w.:/@+=,%\-\[\]]{0,256}$")
_SAFE_EVENT = re.compile(r"^[a-z][a-z0-9_.\-]{0,80}$")
TEXT_KEYS = frozenset(
    {
        "prompt", "prompts", "messages", "message_content", "content", "output", "outputs", "text",
        "completion", "response", "response_text", "context", "note", "note_text", "question", "answer",
        "reference", "references", "gold", "explanation", "row", "record", "value", "values", "body",
    }
)
_PASS_KEYS = frozenset({"timestamp", "level", "logger"})
_configured = False


def _redact(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value if _SAFE_STRING.match(value) else f"[redacted str len={len(value)}]"
    if isinstance(value, list | tuple) and len(value) <= 64:
        return [_redact(v) for v in value]
    if isinstance(value, dict) and len(value) <= 64:
        return {str(k): ("[redacted]" if str(k) in TEXT_KEYS else _redact(v)) for k, v in value.items()}
    return f"[redacted {type(value).__name__}]"


def phi_guard(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    exc_info = event_dict.pop("exc_info", None)
    event_dict.pop("exception", None)
    event_dict.pop("stack", None)
    if exc_info:
        exc = sys.exc_info()[1] if exc_info is True else (exc_info[1] if isinstance(exc_info, tuple) else exc_info)
        if isinstance(exc, BaseException):
            event_dict["error_type"] = type(exc).__name__
    for key in list(event_dict):
        if key in _PASS_KEYS:
            continue
        value = event_dict[key]
        if key == "event":
            if not (isinstance(value, str) and _SAFE_EVENT.match(value)):
                event_dict[key] = "[redacted event]"
        elif key in TEXT_KEYS:
            event_dict[key] = f"[redacted {key}]"
        else:
            event_dict[key] = _redact(value)
    return event_dict


def configure_logging(level: str | None = None, *, json_lines: bool | None = None, force: bool = False) -> None:
    """Configure logging once: JSON lines to stderr when not a TTY, a console renderer otherwise (structlog is set
    up with these settings at the first record that passes ``level``, or at once where it already is)."""
    global _configured, _settings
    if _configured and not force:
        return
    _settings = _chosen(level, json_lines)
    # Third-party loggers (httpx logs every request line) stay quiet; they go through the same guard if raised.
    for noisy in ("httpx", "httpcore", "urllib3", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    _configured = True
    if _structlog_set_up:
        _set_up_structlog()


_settings: tuple[int, bool] | None = None  # (level, JSON lines) as configure_logging chose them
_structlog_set_up = False


def _chosen(level: str | None, json_lines: bool | None) -> tuple[int, bool]:
    tty = sys.stderr.isatty()
    json_lines = (not tty) if json_lines is None else json_lines
    level_name = (level or os.environ.get("MEDHELM_LOG_LEVEL") or ("WARNING" if tty else "INFO")).upper()
    numeric = logging.getLevelName(level_name)
    if not isinstance(numeric, int):
        numeric = logging.INFO
    return numeric, json_lines


def _set_up_structlog() -> None:
    global _structlog_set_up
    import structlog

    assert _settings is not None
    numeric, json_lines = _settings
    renderer: Any = structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            phi_guard,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # Resolve sys.stderr at each use, so a replaced stderr (tests, daemons) is honoured.
        logger_factory=lambda *_args: structlog.PrintLogger(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    _structlog_set_up = True


def _level() -> int:
    global _settings
    if _settings is None:  # a record before configure_logging: the defaults, which configure_logging may replace
        _settings = _chosen(None, None)
    return _settings[0]


class Logger:
    """A named logger whose records go through structlog (and the guard); structlog is imported and set up at the
    first record that passes the configured level."""

    __slots__ = ("_name",)

    def __init__(self, name: str | None) -> None:
        self._name = name

    def _emit(self, method: str, level: int, event: str, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
        if level < _level():
            return
        if not _structlog_set_up:
            _set_up_structlog()
        import structlog

        getattr(structlog.get_logger(self._name), method)(event, *args, **kw)

    def debug(self, event: str, *args: Any, **kw: Any) -> None:
        self._emit("debug", logging.DEBUG, event, args, kw)

    def info(self, event: str, *args: Any, **kw: Any) -> None:
        self._emit("info", logging.INFO, event, args, kw)

    def warning(self, event: str, *args: Any, **kw: Any) -> None:
        self._emit("warning", logging.WARNING, event, args, kw)

    def error(self, event: str, *args: Any, **kw: Any) -> None:
        self._emit("error", logging.ERROR, event, args, kw)

    def exception(self, event: str, *args: Any, **kw: Any) -> None:
        self._emit("exception", logging.ERROR, event, args, kw)

    def critical(self, event: str, *args: Any, **kw: Any) -> None:
        self._emit("critical", logging.CRITICAL, event, args, kw)


def get_logger(name: str | None = None) -> Logger:
    return Logger(name)
