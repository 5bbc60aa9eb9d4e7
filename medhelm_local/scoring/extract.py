"""Pulling a closed-ended answer out of a model's free-form output.

Every extractor is tolerant of chatty and reasoning models (reasoning blocks are dropped, "The answer is (B)."
gives ``B``) and also says whether the output was *strict*: nothing but the answer, as the prompt asked. The
strict-format rate is reported beside each score, so tolerance never hides a model that ignores the format.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Generic, TypeVar

T = TypeVar("T")

_REASONING_TAGS = r"(?:think|thinking|reasoning|reflection)"
_REASONING_BLOCK = re.compile(rf"<({_REASONING_TAGS})>.*?</\1>", re.IGNORECASE | re.DOTALL)
_REASONING_OPEN = re.compile(rf"<{_REASONING_TAGS}>", re.IGNORECASE)
_REASONING_CLOSE = re.compile(rf"</{_REASONING_TAGS}>", re.IGNORECASE)
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*\s*\n?(.*?)```", re.DOTALL)
# LaTeX's boxed final answer, as reasoning models write it: "$\boxed{B}$", "\(\boxed{140}\)".
_BOXED = re.compile(r"\$*\\boxed\{(?:\\text\{)?([^{}]*)\}?\}\$*")
# "The answer is (B)", "Answer: B", "final answer: **B**", "correct option is B"
_ANSWER_MARKER = re.compile(
    r"(?:final\s+answer|answer|correct\s+(?:option|choice)|option|choice)\s*(?:is|would\s+be|:|=|-)?\s*[:\-]?\s*",
    re.IGNORECASE,
)
_STATED_ANSWER = re.compile(r"(?:final\s+answer|answer|correct\s+(?:option|choice))", re.IGNORECASE)
# A number standing on its own: not glued to a word, and not part of a unit ("mL/min/1.73 m²", "kg/m^2",
# "10^9/L": a number right after "/" or "^" belongs to the unit before it).
_NUMBER = re.compile(
    r"(?<![\w./^])[-\u2212\u2013]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w/])")
# What marks the value a sentence states: "is", "=", "equals", "equal to", "of", "at", "≈", ":".
_VALUE_MARKER = re.compile(
    r"(?:\bis(?:\s+equal\s+to)?|\bequals?(?:\s+to)?|\bwas|=|≈|~|:|\bof|\bat|\bto)\s*(?:approximately|about|roughly|"
    r"around)?\s*[*_]*\s*", re.IGNORECASE)
# "The answer is", "Answer:", "final answer =" (not "score"/"total": "so total is 1 - 2 = -1" states a step).
_NUMBER_ANSWER_MARKER = re.compile(
    r"answer\s*(?:is|would\s+be|:|=|of)?\s*[:=]?\s*(?:approximately|about|~|≈)?\s*[*_]*", re.IGNORECASE)
# Sentences: line breaks, or a full stop followed by a space or glued to the next capitalised sentence
# ("...272.317 mmol/L.The patient's ..."), never the point of a decimal.
_SENTENCE_BREAK = re.compile(r"\n+|(?<=[.!?])\s+|(?<=[A-Za-z%)\]]\.)(?=[A-Z])")
_PERCENT_AFTER = re.compile(r"\s*(?:%|per\s*cent\b)", re.IGNORECASE)
# Numbers that frame an answer rather than state it: a range's ends ("normal range 135-145", "10 to 20", "between
# 2 and 4"), a threshold ("above 5", "> 100", "the cutoff of 2") and a scale's maximum ("2 out of 5").
_RANGE_START = re.compile(r"[ \t]*[\u2013\u2014][ \t]*-?\d|-\d|[ \t]+to[ \t]+-?\d", re.IGNORECASE)
_FRAMING_BEFORE = re.compile(
    r"(?:\d[ \t]*[\u2013\u2014][ \t]*|\d-|\d[ \t]+to[ \t]+|\bbetween[ \t]+-?[\d.,]+[ \t]+and[ \t]+|"
    r"\b(?:above|below|over|under|exceed(?:s|ing)?|(?:greater|less|more|fewer|higher|lower)[ \t]+than|out[ \t]+of|"
    r"between|cut-?off(?:[ \t]+of)?|threshold(?:[ \t]+of)?)[ \t]+|[<>\u2264\u2265]=?[ \t]*)$", re.IGNORECASE)
_MONTHS = {m: i + 1 for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"])}


@dataclass(frozen=True)
class Extracted(Generic[T]):
    """What was read from an output: ``value`` (None: nothing recognisable) and whether the format was strict."""

    value: T | None
    strict: bool

    @property
    def parsed(self) -> bool:
        return self.value is not None


def strip_reasoning(text: str) -> str:
    """Drop ``<think>...</think>`` blocks. Text before a lone closing tag is reasoning too (models whose chat
    template opens the block); text after an unclosed opening tag (truncated output) holds no answer."""
    text = _REASONING_BLOCK.sub(" ", text)
    closes = list(_REASONING_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    return _REASONING_OPEN.split(text)[0]


def answer_text(output: str) -> str:
    """The part of an output that may hold the answer: reasoning dropped, a lone code fence unwrapped, a LaTeX
    ``\\boxed{...}`` read as the final answer it marks."""
    text = _BOXED.sub(r" Final answer: \1 ", strip_reasoning(output)).strip()
    fences = _FENCE.findall(text)
    if len(fences) == 1 and not _FENCE.sub("", text).strip():
        text = fences[0].strip()
    return text


def _bare(text: str) -> str:
    return text.strip().strip(" \t\n.:*()[]\"'`").strip()


def extract_label(output: str, labels: Sequence[str]) -> tuple[str | None, bool]:
    """Return ``(label, strict)``: the chosen label (or None) and whether the output was exactly the label
    (case-insensitive, reasoning blocks aside).

    Tolerates chatty answers: "The answer is (B).", "**yes**", "B) Refer to hospice", "Answer: maybe".
    Single-letter labels are only taken from an answer marker or the start of the text, never from a stray
    article ("A patient ...").
    """
    text = answer_text(output)
    by_lower = {label.lower(): label for label in labels}
    bare = _bare(text).lower()
    if bare in by_lower:
        return by_lower[bare], text.lower() == bare
    single = all(len(label) == 1 for label in labels)
    alternatives = "|".join(re.escape(label) for label in sorted(labels, key=len, reverse=True))
    # Single letters are matched case-sensitively (an answer "a" is too easily an article); words are not.
    group = alternatives if single else f"(?i:{alternatives})"
    token = rf"[(\[*\"'`]*\s*({group})\s*[)\]*\"'`]*(?![A-Za-z0-9])"
    marker = "(?i:" + _ANSWER_MARKER.pattern + ")"
    # Two different labels offered as alternatives ("B or A", "yes or no", "A/B"): a hedge, not an answer.
    hedge = rf"{token}\s*(?:,?\s+or\s+|/|\s+and/or\s+){token}"

    def hedged(pattern: str, at: int) -> bool:
        found = re.compile(pattern).match(text, at)
        return found is not None and found.group(1).lower() != found.group(2).lower()

    # A leading label: "B) ...", "(C) ...", "Yes, because ...".
    after = r"(?:\s*[).:,\-]|\s|$)" if single else r"(?:\s*[).:,;!\-]|$)"
    leading = re.match(rf"\s*{token}{after}", text)
    if leading and single and re.match(r"\s*A\s+[a-z]", text):
        leading = None
    # The last explicit answer marker wins: reasoning models restate their final choice at the end. An answer
    # marker ("Answer: C", "the correct option is C") outranks a bare "option A" / "choice A", which is as often
    # an explanation discussing an option ("Answer: C. Option A is wrong because ..."); so does a leading label
    # set off as the answer ("C) Metformin\n\nOption A is wrong ...", "**B**\n\n...").
    hits = list(re.finditer(marker + token, text))
    stated = [hit for hit in hits if _STATED_ANSWER.match(hit.group(0))]
    set_off = leading is not None and re.match(r"[)\]*\"'`]*\s*(?:[).:\-]|\n|$)", text[leading.end(1):]) is not None
    hits = stated or ([] if set_off else hits)
    if hits:
        last = hits[-1]
        if hedged(marker + hedge, last.start()):
            return None, False
        return by_lower[last.group(1).lower()], False
    if leading:
        if hedged(rf"\s*{hedge}", 0):
            return None, False
        return by_lower[leading.group(1).lower()], False
    if single:
        # A label alone on a line, or in parentheses: "(D)".
        line = re.search(rf"(?m)^\s*[(\[*]*({alternatives})[)\]*]*\s*\.?\s*$|\(({alternatives})\)", text)
        if line:
            found = line.group(1) or line.group(2)
            return by_lower[found.lower()], False
        return None, False
    # Word labels (yes/no/maybe): accept only when exactly one distinct label appears.
    present = {m.group(1).lower() for m in re.finditer(rf"(?<![A-Za-z])({alternatives})(?![A-Za-z])", text,
                                                      re.IGNORECASE)}
    if len(present) == 1:
        return by_lower[present.pop()], False
    return None, False


def _to_float(token: str) -> float | None:
    cleaned = token.replace(",", "").replace("\u2212", "-").replace("\u2013", "-")
    if cleaned in ("", "-", ".", "-."):
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def _numbers(text: str, *, percentages: bool = True, framing: bool = True) -> list[tuple[int, float]]:
    """The numbers of ``text``; ``framing=False`` leaves out those that frame an answer (:data:`_FRAMING_BEFORE`)."""
    out = []
    for match in _NUMBER.finditer(text):
        value = _to_float(match.group(0))
        if value is None or not re.search(r"\d", match.group(0)):
            continue
        if not percentages and _PERCENT_AFTER.match(text, match.end()):
            continue
        if not framing and (_RANGE_START.match(text, match.end())
                            or _FRAMING_BEFORE.search(text, max(0, match.start() - 40), match.start())):
            continue
        out.append((match.start(), value))
    return out


def _sentences(text: str) -> list[str]:
    """The non-blank sentences of ``text``, in order."""
    out, start = [], 0
    for brk in [*_SENTENCE_BREAK.finditer(text), None]:
        end = brk.start() if brk else len(text)
        if text[start:end].strip():
            out.append(text[start:end])
        start = brk.end() if brk else end
    return out


def _outside_parentheses(found: list[tuple[int, T]], sentence: str) -> list[tuple[int, T]]:
    """Drop values inside parentheses ("09/23/2014 (LMP 12/17/2013)") unless nothing else is left."""
    depth, inside = 0, set()
    for index, char in enumerate(sentence):
        depth += char == "("
        if depth:
            inside.add(index)
        depth -= char == ")" and depth > 0
    kept = [(pos, value) for pos, value in found if pos not in inside]
    return kept or found


def _stated_value(text: str, find: Callable[[str], list[tuple[int, T]]]) -> T | None:
    """The value an answer states. In order: the value right after the last answer marker ("The answer is 4");
    else, in the last sentence holding a value, the value after its last value marker ("... is 127.7 mL/min",
    "= 4"), or its leading value ("09/23/2014 (LMP 12/17/2013)"), or its last value."""
    values = find(text)
    if not values:
        return None
    for marker in reversed(list(_NUMBER_ANSWER_MARKER.finditer(text))):
        after = [v for pos, v in values if marker.end() <= pos <= marker.end() + 3]
        if after:
            return after[0]
    for sentence in reversed(_sentences(text)):
        found = _outside_parentheses(find(sentence), sentence)
        if not found:
            continue
        for marker in reversed(list(_VALUE_MARKER.finditer(sentence))):
            after = [v for pos, v in found if marker.end() <= pos <= marker.end() + 2]
            if after:
                return after[0]
        if found[0][0] <= len(sentence) - len(sentence.lstrip(" *_-#>")):
            return found[0][1]
        return found[-1][1]
    return values[-1][1]


def extract_number(output: str, *, percentages: bool = True) -> Extracted[float]:
    """A numeric answer: the output if it is nothing but a number (strict), else the value the answer states
    (:func:`_stated_value`); numbers that are part of a unit ("/1.73 m²") are never read.

    ``percentages=False`` where the answer is a score or a count: a percentage beside it is what the score means
    ("a score of 4, which corresponds to a 4.8% annual risk"), never the score, so it is not read.

    Numbers that frame the answer (a reference range, a threshold, a scale's maximum: "140 mEq/L, within the normal
    range of 135-145", "2 out of 5", "A value above 5 ...") are read only when the output states no other."""
    text = answer_text(output)
    bare = _bare(text)
    value = _to_float(bare) if re.fullmatch(r"[-\u2212\u2013]?[\d,]*\.?\d+(?:[eE][-+]?\d+)?", bare) else None
    if value is not None:
        return Extracted(value, True)
    stated = _stated_value(text, lambda part: _numbers(part, percentages=percentages, framing=False))
    if stated is None:
        stated = _stated_value(text, lambda part: _numbers(part, percentages=percentages))
    return Extracted(stated, False)


def parse_date(text: str) -> date | None:
    """One date in a common form: MM/DD/YYYY, YYYY-MM-DD, "September 23, 2014", "23 Sep 2014"."""
    text = text.strip()
    for fmt in ("%m/%d/%Y", "%Y-%m-%d", "%m/%d/%y", "%m-%d-%Y", "%Y/%m/%d"):
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    return None


_DATE_PATTERNS = (
    re.compile(r"(?<!\d)(\d{1,2})/(\d{1,2})/(\d{4})(?!\d)"),  # MM/DD/YYYY
    re.compile(r"(?<!\d)(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)"),  # ISO
    re.compile(r"(?<![\d-])(\d{1,2})-(\d{1,2})-(\d{4})(?!\d)"),  # MM-DD-YYYY (MedCalc-Bench's explanations)
    re.compile(r"\b([A-Za-z]{3,9})\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b"),  # September 23, 2014
    re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+([A-Za-z]{3,9})\.?,?\s+(\d{4})\b"),  # 23 September 2014
)


def _dates(text: str) -> list[tuple[int, date]]:
    found: list[tuple[int, date]] = []
    for index, pattern in enumerate(_DATE_PATTERNS):
        for m in pattern.finditer(text):
            try:
                if index in (0, 2):
                    value = date(int(m.group(3)), int(m.group(1)), int(m.group(2)))
                elif index == 1:
                    value = date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
                else:
                    month_name, day = (m.group(1), m.group(2)) if index == 3 else (m.group(2), m.group(1))
                    month = _MONTHS.get(month_name[:3].lower())
                    if month is None:
                        continue
                    value = date(int(m.group(3)), month, int(day))
            except ValueError:
                continue
            found.append((m.start(), value))
    return sorted(found, key=lambda item: item[0])


def extract_date(output: str) -> Extracted[date]:
    """A date answer: the whole output if it is one date (strict), else the date the answer states (the one
    after its marker, or the leading one of the last sentence with a date, parenthesised dates last)."""
    text = answer_text(output)
    whole = parse_date(_bare(text))
    if whole is not None:
        return Extracted(whole, True)
    return Extracted(_stated_value(text, _dates), False)


_WEEKS_DAYS = re.compile(
    r"(\d+)\s*(?:weeks?|wks?|w)(?![a-z])['\"]?\s*(?:,|and|\+)?\s*['\"]?\s*(\d+)\s*(?:days?|d)(?![a-z])", re.IGNORECASE)
_WEEKS_ONLY = re.compile(r"(\d+)\s*(?:weeks?|wks?)\b", re.IGNORECASE)
_DAYS_ONLY = re.compile(r"(\d+)\s*days?\b", re.IGNORECASE)
_STRICT_WEEKS_DAYS = re.compile(r"\d+\s*weeks?['\"]?\s*,?\s*['\"]?\d+\s*days?", re.IGNORECASE)
_PAIR = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def parse_weeks_days(text: str) -> tuple[int, int] | None:
    """A gestational age ``(weeks, days)``: "(4 weeks, 3 days)", "('4 weeks', '3 days')", "4w 3d", "(4, 3)",
    "4 weeks" (0 days), "6 days" (0 weeks)."""
    text = text.strip()
    both = _WEEKS_DAYS.search(text)
    if both:
        return int(both.group(1)), int(both.group(2))
    pair = _PAIR.match(text)
    if pair:
        return int(pair.group(1)), int(pair.group(2))
    weeks = _WEEKS_ONLY.search(text)
    days = _DAYS_ONLY.search(text)
    if weeks and not days:
        return int(weeks.group(1)), 0
    if days and not weeks:
        return 0, int(days.group(1))
    return None


def extract_weeks_days(output: str) -> Extracted[tuple[int, int]]:
    text = answer_text(output)
    value = parse_weeks_days(text)
    bare = _bare(text).strip("()'\" ")
    strict = value is not None and (_PAIR.match(text) is not None or _STRICT_WEEKS_DAYS.fullmatch(bare) is not None)
    return Extracted(value, strict)
