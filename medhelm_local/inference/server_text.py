"""What the appliance records of the text a model server chose: its version, the models it lists, a finish reason.

A model server sees every prompt; a hostile or compromised one can answer ``/version`` or ``/v1/models`` with
text derived from them. The audit trail, the logs, the run's manifest and the store's metadata keep such a string
only where it is one the appliance can vouch for: a version shaped like one (digits first, a few short suffixes,
at most one git hash, ``MAX_VERSION_CHARS`` in all), a model name that appliance.yaml configures, a finish reason
of the OpenAI API. Any other is ``unrecognised``, with nothing of its content, not even its length. A version's
shape bounds what it can carry; it cannot rule out a server choosing among version-shaped strings: their digits
can still spell some 100 bits of its choosing (a dozen characters' worth) in each record of a version.

An HTTP status is a number the server chooses too (any from 100 to 999: some 10 bits in each failure it records):
it is recorded as sent only where the appliance tells it apart (``RECORDED_STATUSES``), else by its class alone
(``4xx_other``, ``5xx_other``, ``other``)."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any

UNRECOGNISED = "unrecognised"
MAX_SERVER_TEXT = 128
MAX_VERSION_CHARS = 32  # the longest release tags (``0.10.1.post1.dev12+g1a2b3c4d5``) fit

# ``0.10.1``, ``v0.6.3.post1``, ``0.11.0+cu128``, ``0.10.1.dev12+g1a2b3c4``, ``0.0.0-fake``: numbers first, then
# at most three suffixes, each a word release tags use followed by a few digits, and hex digits only in one git
# hash (``g`` and 7 to 12 of them): runs of hex, which three suffixes of 16 allowed, spell any text byte for byte.
_SUFFIX = r"[.+-](post|dev|rc|a|b|alpha|beta|cu|rocm|cpu|xpu|hpu|tpu|fake)?\d{0,4}"
_GIT_HASH = r"[.+-]g[0-9a-f]{7,12}"
_VERSION = re.compile(rf"v?\d{{1,4}}(\.\d{{1,4}}){{0,3}}({_SUFFIX}){{0,3}}({_GIT_HASH})?({_SUFFIX}){{0,2}}",
                      re.IGNORECASE)
_MODEL_NAME = re.compile(r"[A-Za-z0-9/._:+-]+")
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call", "abort"})
# Statuses the appliance treats apart: a success; retried (408, 409, 425, 429, 500, 502, 503, 504: the client's
# RETRYABLE_STATUS); a replica down (502 to 504); a structured-output refusal (400, 422, 500); a request or
# configuration to fix (400, 401, 403, 404, 413, 422: the hints of ``jury failures``).
RECORDED_STATUSES = frozenset({200, 400, 401, 403, 404, 408, 409, 413, 422, 425, 429, 500, 502, 503, 504})


def recorded_version(value: Any) -> str | None:
    """A server's version as recorded: None where it sent none, else the version if shaped like one, else
    ``unrecognised``."""
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= MAX_VERSION_CHARS and _VERSION.fullmatch(value):
        return value
    return UNRECOGNISED


def recorded_model_name(value: Any, configured: Collection[str]) -> str:
    """A model name a server sent, as recorded: the name where appliance.yaml configures it (and it is a plain
    name), else ``unrecognised``."""
    if (
        isinstance(value, str)
        and value in configured
        and len(value) <= MAX_SERVER_TEXT
        and _MODEL_NAME.fullmatch(value)
    ):
        return value
    return UNRECOGNISED


def recorded_models(names: Iterable[Any], configured: Collection[str]) -> list[str]:
    """The models a server listed, as recorded: the configured ones, sorted, then ``unrecognised`` once where it
    listed any other (how many others is not kept either)."""
    shown = {recorded_model_name(name, configured) for name in names}
    return sorted(shown - {UNRECOGNISED}) + ([UNRECOGNISED] if UNRECOGNISED in shown else [])


def recorded_finish_reason(value: Any) -> str | None:
    """A reply's ``finish_reason`` as recorded: None where it is not a string (no reason), the reason where the
    OpenAI API defines it, else ``unrecognised``."""
    if not isinstance(value, str):
        return None
    return value if value in FINISH_REASONS else UNRECOGNISED


def recorded_status(status: int) -> str:
    """An HTTP status as recorded (in a failure category, ``http_503``; in a message): the code where the appliance
    tells it apart (``RECORDED_STATUSES``), else ``4xx_other`` or ``5xx_other``, else ``other`` (1xx, 3xx, a 2xx
    other than 200, 600 to 999)."""
    if status in RECORDED_STATUSES:
        return str(status)
    if 400 <= status <= 599:
        return f"{status // 100}xx_other"
    return "other"
