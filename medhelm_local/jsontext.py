"""JSON text read into strings the store can keep: Python's parser reads a ``\\uD800``-``\\uDFFF`` escape that is
not half of a surrogate pair into a string that cannot be written as UTF-8, and the store refuses it (DuckDB:
"no low surrogate in string", its message quoting the text). Used for what users give (a cell of a dataset) and
what servers send (a completion, a judge's rating)."""

from __future__ import annotations

import json
import re
from typing import Any

# A \uD800-\uDFFF escape, and the low half that may pair with it.
_SURROGATE_ESCAPE = re.compile(r"\\u([dD][89a-fA-F][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?")


def lone_surrogate_line(text: str) -> int | None:
    """The line (from 1) of the first ``\\uD800``-``\\uDFFF`` escape in JSON text that is not half of a surrogate pair:
    Python's parser reads it into a string that cannot be written as UTF-8 (the store refuses it). None: there is none.
    """
    position = 0
    while (match := _SURROGATE_ESCAPE.search(text, position)) is not None:
        start = before = match.start()
        while before > 0 and text[before - 1] == "\\":
            before -= 1
        if (start - before) % 2:  # an escaped backslash, then the letters "u", "d", ...
            position = start + 2
            continue
        if match.group(1)[1].lower() not in "89ab" or match.group(2) is None:
            return text.count("\n", 0, start) + 1
        position = match.end()
    return None


def loads_strict(text: str | bytes) -> Any:
    """``json.loads``, and a ``ValueError`` for an unpaired surrogate escape too (see :func:`lone_surrogate_line`),
    as for text that is not JSON. Bytes are decoded as ``json.loads`` decodes them (UTF-8, -16 or -32)."""
    if isinstance(text, bytes):
        text = text.decode(json.detect_encoding(text))
    if lone_surrogate_line(text) is not None:
        raise ValueError("an unpaired surrogate escape")
    return json.loads(text)
