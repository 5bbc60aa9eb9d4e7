"""Pulling a closed-ended answer out of a model's free-form output."""

from __future__ import annotations

import re
from collections.abc import Sequence

_REASONING = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.IGNORECASE | re.DOTALL)
_ANSWER_IS = re.compile(r"answer\s*(?:is|:)?\s*[:\-]?\s*\(?\**\s*([A-Za-z]+)\b", re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    text = _REASONING.sub(" ", text)
    # An unclosed reasoning block (truncated output) holds no answer.
    return re.split(r"<(?:think|thinking|reasoning)>", text, flags=re.IGNORECASE)[0]


def extract_label(output: str, labels: Sequence[str]) -> tuple[str | None, bool]:
    """Return ``(label, strict)``: the chosen label (or None) and whether the output was exactly the label.

    Tolerates chatty answers: "The answer is (B).", "**yes**", "B) Refer to hospice".
    """
    text = strip_reasoning(output).strip()
    by_lower = {label.lower(): label for label in labels}
    bare = text.strip(" \t\n.:*()[]\"'").lower()
    if bare in by_lower:
        return by_lower[bare], text == by_lower[bare]
    match = _ANSWER_IS.search(text)
    if match and match.group(1).lower() in by_lower:
        return by_lower[match.group(1).lower()], False
    # First standalone label token ("B) ...", "Yes, because ...").
    pattern = r"(?<![A-Za-z])(" + "|".join(re.escape(lab) for lab in labels) + r")(?![A-Za-z])"
    flags = 0 if all(len(lab) == 1 for lab in labels) else re.IGNORECASE
    first = re.search(pattern, text, flags)
    if first:
        return by_lower[first.group(1).lower()], False
    return None, False
