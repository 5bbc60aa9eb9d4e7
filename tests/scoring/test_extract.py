"""Answer extraction: tolerant of chatty and reasoning models, and honest about the strict format."""

from __future__ import annotations

from datetime import date

import pytest

from medhelm_local.scoring.extract import (
    extract_date,
    extract_label,
    extract_number,
    extract_weeks_days,
    strip_reasoning,
)

LETTERS = ["A", "B", "C", "D"]
YES_NO = ["yes", "no", "maybe"]


@pytest.mark.parametrize(("output", "expected", "strict"), [
    ("B", "B", True),
    (" b ", "B", True),
    ("The answer is (B).", "B", False),
    ("Answer: C", "C", False),
    ("**D**", "D", False),
    ("B) Praziquantel", "B", False),
    ("(C)", "C", False),
    ("A is tempting, but $\\boxed{C}$", "C", False),  # LaTeX's boxed final answer
    ("<think>A looks right, or maybe C</think>\nThe answer is D", "D", False),
    ("I weighed A against B.</think>Final answer: B", "B", False),  # template opened the block
    ("A 45-year-old man is described. The correct option is D.", "D", False),
    ("Considering A and B ... the answer is A. On reflection, the answer is C.", "C", False),
    ("A patient with fever", None, False),  # a stray article is not an answer
    ("answer: a", None, False),  # single letters are case-sensitive
    ("<think>still thinking about B", None, False),  # truncated reasoning holds no answer
    ("", None, False),
])
def test_choice_letters(output: str, expected: str | None, strict: bool) -> None:
    assert extract_label(output, LETTERS) == (expected, strict)


@pytest.mark.parametrize(("output", "expected", "strict"), [
    ("yes", "yes", True),
    ("Maybe", "maybe", True),
    ("No.", "no", False),
    ("Yes, because the trial was positive.", "yes", False),
    ("The answer is maybe.", "maybe", False),
    ("no idea whether yes or no", None, False),  # ambiguous: several labels, no marker
    ("The data clearly support it: yes", "yes", False),
])
def test_yes_no_maybe(output: str, expected: str | None, strict: bool) -> None:
    assert extract_label(output, YES_NO) == (expected, strict)


@pytest.mark.parametrize(("output", "expected"), [
    ("Answer: C\n\nExplanation: Option A is wrong because the drug is contraindicated.", "C"),
    ("The answer is (B), since option A ignores the renal function.", "B"),
    ("Final answer: D. Choice C would be right only in pregnancy.", "D"),
    ("Option A is unlikely. Option C fits the findings.", "C"),  # no answer marker: the last option stated
    ("C) Metformin\n\nExplanation: Option A is wrong because the drug is contraindicated.", "C"),
    ("**C**. Metformin\n\nOption A is wrong.", "C"),
    ("C is wrong here; option B fits the findings.", "B"),  # a leading letter in a sentence is not set off
])
def test_an_answer_marker_outranks_an_option_discussed_after_it(output: str, expected: str) -> None:
    assert extract_label(output, LETTERS) == (expected, False)


def test_strip_reasoning() -> None:
    assert strip_reasoning("<think>x</think>B").strip() == "B"
    assert strip_reasoning("<reasoning>x</reasoning> yes <think>y</think>").strip() == "yes"
    assert strip_reasoning("plan</think>C").strip() == "C"


@pytest.mark.parametrize(("output", "value", "strict"), [
    ("4", 4.0, True),
    ("-0.83", -0.83, True),
    ("1,234.5", 1234.5, True),
    ("The patient's score is 4.", 4.0, False),
    ("Criteria met: 2 of 5; the answer is 3", 3.0, False),
    ("CrCl = approximately 25.2 mL/min", 25.2, False),
    ("<think>maybe 7</think>5", 5.0, True),
    ("cannot compute", None, False),
])
def test_numbers(output: str, value: float | None, strict: bool) -> None:
    found = extract_number(output)
    assert (found.value, found.strict) == (value, strict)


def test_dates() -> None:
    assert extract_date("09/23/2014").value == date(2014, 9, 23)
    assert extract_date("09/23/2014").strict
    assert extract_date("The due date is September 23, 2014.").value == date(2014, 9, 23)
    assert extract_date("2014-09-23").value == date(2014, 9, 23)
    assert extract_date("23 Sep 2014").value == date(2014, 9, 23)
    assert extract_date("no date").value is None


@pytest.mark.parametrize(("output", "value", "strict"), [
    ("('0 weeks', '6 days')", (0, 6), True),
    ("(4 weeks, 3 days)", (4, 3), True),
    ("4 weeks, 3 days", (4, 3), True),
    ("(4, 3)", (4, 3), True),
    ("The gestational age is 4 weeks and 3 days.", (4, 3), False),
    ("5w2d", (5, 2), False),
    ("12 weeks", (12, 0), False),
    ("six weeks", None, False),
])
def test_gestational_age(output: str, value: tuple[int, int] | None, strict: bool) -> None:
    found = extract_weeks_days(output)
    assert (found.value, found.strict) == (value, strict)
