"""Token budgets for long patient records: keep the most recent events, say how many were left out.

Token counts here are estimated without a tokenizer (about four characters per token for English clinical
text), so these budgets are approximations that keep a loader's fields to a sensible size, not the model's limit.
That limit is applied later, per request, by the runner (:mod:`medhelm_local.runner.fitting`): it counts tokens
as the serving engine does (its tokenizer, else a conservative estimate), cuts the spec's ``truncate`` field
further if it must, and records a prompt that still cannot fit as ``prompt_too_long`` instead of sending it
(runs created before prompt fitting excepted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CHARS_PER_TOKEN = 4


def approx_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


@dataclass
class Truncated:
    text: str
    kept: int
    dropped: int


def keep_recent_lines(lines: Sequence[str], budget_tokens: int, header: str = "") -> Truncated:
    """Join ``lines`` (oldest first), dropping the oldest until the text fits ``budget_tokens``.

    A note at the top says how many earlier events were omitted. ``header`` (demographics) is always kept.
    """
    budget = budget_tokens - approx_tokens(header)
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        cost = approx_tokens(line) + 1
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    kept.reverse()
    dropped = len(lines) - len(kept)
    parts = [header] if header else []
    if dropped:
        parts.append(f"[{dropped} earlier events omitted to fit the context budget]")
    parts.extend(kept)
    return Truncated(text="\n".join(parts), kept=len(kept), dropped=dropped)


def keep_recent_text(text: str, budget_tokens: int, boundary: str = "\n") -> Truncated:
    """The end of ``text`` that fits the budget, cut at a ``boundary`` so no line is split."""
    limit = budget_tokens * CHARS_PER_TOKEN
    if len(text) <= limit:
        return Truncated(text=text, kept=len(text), dropped=0)
    start = len(text) - limit
    cut = text.find(boundary, start)
    tail = text[cut + len(boundary) :] if cut != -1 else text[start:]
    dropped = len(text) - len(tail)
    marker = f"[{dropped} earlier characters omitted to fit the context budget]\n"
    return Truncated(text=marker + tail, kept=len(tail), dropped=dropped)
