"""Judge prompts that fit the judge (issue 18 §2): the rubric, question, response and gold must fit the judge's
context with room for its reply.

The designated long fields of a judge prompt are ``question`` (the prompt the model saw: often a whole note),
``response`` (the model's answer) and ``gold_response`` (the reference). When the whole prompt does not fit the
budget (the judge's context minus its reply's ``max_tokens``), the room left by the template and the short fields
is shared among the long ones by water-filling: a field shorter than its fair share keeps all of it, and what it
leaves goes to the others; each longer field is cut (its end dropped, at a word boundary) to its share with the
judge server's own tokenizer (``inference/tokens.py``). The cut is recorded per judgement (characters and tokens
kept of each field). A prompt whose template alone does not fit raises ``PromptTooLong``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from medhelm_local.inference.tokens import PromptTooLong, TokenCounter, fit_field
from medhelm_local.records import ChatMessage

LONG_FIELDS = ("question", "response", "gold_response")


@dataclass(frozen=True)
class FittedPrompt:
    prompt: str
    tokens: int | None  # the fitted prompt's count (None: not counted, its byte bound already fits)
    truncation: dict[str, Any] | None  # None: nothing was cut; else what was kept of each cut field


def water_fill(sizes: dict[str, int], room: int) -> dict[str, int]:
    """Token caps for fields of ``sizes`` sharing ``room``: smallest first, each keeps min(size, fair share)."""
    caps: dict[str, int] = {}
    remaining = max(0, room)
    pending = sorted(sizes, key=lambda name: (sizes[name], name))
    while pending:
        share = remaining // len(pending)
        smallest = pending[0]
        if sizes[smallest] <= share:
            caps[smallest] = sizes[smallest]
            remaining -= sizes[smallest]
            pending.pop(0)
            continue
        for name in pending:
            caps[name] = share
        break
    return caps


async def fit_judge_prompt(counter: TokenCounter, render: Callable[[dict[str, str]], str], values: dict[str, str],
                           budget: int) -> FittedPrompt:
    """``render(values)`` fitted into ``budget`` tokens by cutting the long fields (see the module docstring)."""

    def messages(vals: dict[str, str]) -> list[ChatMessage]:
        return [ChatMessage(role="user", content=render(vals))]

    def with_piece(vals: dict[str, str], name: str) -> Callable[[str], list[ChatMessage]]:
        return lambda piece: messages({**vals, name: piece})

    whole = messages(values)
    if await counter.upper_bound(whole) <= budget:
        return FittedPrompt(whole[0].content, None, None)
    total = await counter.count(whole)
    if total <= budget:
        return FittedPrompt(whole[0].content, total, None)
    long = [name for name in LONG_FIELDS if values.get(name)]
    empty = {**values, **{name: "" for name in long}}
    base = await counter.count(messages(empty))
    if base > budget:
        raise PromptTooLong()
    sizes = {name: max(0, await counter.count(messages({**empty, name: values[name]})) - base) for name in long}
    caps = water_fill(sizes, budget - base)
    current = dict(values)
    cut: dict[str, dict[str, int]] = {}
    for name in long:
        if sizes[name] <= caps[name]:
            continue
        text = values[name]
        alone = await fit_field(counter, with_piece(empty, name), text, base + caps[name])
        current[name] = text[:len(text) - alone.removed_chars]
        cut[name] = {"chars": len(text), "kept_chars": len(current[name]), "tokens": sizes[name],
                     "kept_tokens": (alone.tokens - base) if alone.tokens is not None else sizes[name]}
    fitted = messages(current)
    tokens = await counter.count(fitted)
    if tokens > budget:  # the fields' counts do not add up exactly (merges at their edges): cut the largest again
        name = max(cut or long, key=lambda n: len(current[n]))
        text = current[name]
        again = await fit_field(counter, with_piece(current, name), text, budget)
        current[name] = text[:len(text) - again.removed_chars]
        original = values[name]
        entry = cut.setdefault(name, {"chars": len(original), "tokens": sizes[name]})
        entry["kept_chars"] = len(current[name])
        entry["kept_tokens"] = max(0, entry.get("kept_tokens", sizes[name]) - again.removed_tokens)
        fitted = again.messages
        tokens = again.tokens if again.tokens is not None else tokens
    return FittedPrompt(fitted[0].content, tokens, {"budget": budget, "tokens_before": total,
                                                    "tokens_after": tokens, "fields": cut})
