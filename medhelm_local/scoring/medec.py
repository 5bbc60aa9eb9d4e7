"""MEDEC: error-flag accuracy (main score) and error-sentence accuracy, as in the MEDEC shared task.

The prompt asks for ``CORRECT`` or ``<sentence id>: <corrected sentence>``. Read tolerantly: reasoning blocks
dropped, "Sentence 8: ...", "8. ...", "[8] ...", a bare "8" and the benchmark's own ``<sentence id> <corrected
sentence>`` ("10 Patient's symptoms are ...", what HELM's prompt asks for) accepted. A reply that opens with none
of these is read for the first verdict it states: a sentence named ("the error is in sentence 4", "Error sentence
ID: 4", "(ID 4)") or the note called correct ("no error, but sentence 4 could be clearer" is correct). A reply with
none of these is unparsed and wrong.

- flag accuracy: predicted flag (1 = an error was flagged) equals ``meta.error_flag``;
- error-sentence accuracy (secondary, ``sub.error_sentence_accuracy``): for a note with an error, the flagged
  sentence id equals ``meta.error_sentence_id``; for a correct note, nothing is flagged (the shared task's
  convention: sentence id -1 on both sides).

Expected instance data: ``meta.error_flag`` (0/1, or ``label`` '0'/'1'), ``meta.error_sentence_id`` (int) for
flagged notes.
"""

from __future__ import annotations

import re

from medhelm_local.benchmarks.spec import BenchmarkSpec, OutputType
from medhelm_local.records import Instance
from medhelm_local.scoring.details import ScoreDetails
from medhelm_local.scoring.extract import answer_text
from medhelm_local.scoring.metrics import MetricInputError
from medhelm_local.scoring.registry import instance_scorer
from medhelm_local.scoring.scorer import LABEL, Needs, meta_field

# A sentence named: "sentence 4", "Sentence #4", "sentence ID: 4", "ID 4", "(ID 4)".
_SENTENCE_NAME = r"(?:sentence\s*(?:id)?|\bid)\s*[#:=]?\s*"
_SENTENCE_ID = re.compile(rf"^\W*(?:{_SENTENCE_NAME})?(\d+)\s*(?:[:.)\]\-]|\**\s*$)", re.IGNORECASE)
# MEDEC's native answer: the sentence id, a space, the corrected sentence (which may itself start with a number,
# "11 100% oxygen is administered.", or a quote).
_NATIVE_ANSWER = re.compile(r"^[\s*]*(\d+)\**[ \t]+\S")
_SENTENCE_ANYWHERE = re.compile(rf"(?:\b{_SENTENCE_NAME})(\d+)\b", re.IGNORECASE)
_CORRECT = re.compile(r"\b(?:correct|no\s+(?:medical\s+)?errors?)\b", re.IGNORECASE)
# "The note is not correct", "isn't entirely correct": a negated "correct" says the opposite of CORRECT.
_NEGATION_BEFORE = re.compile(r"(?:\bnot|n't|\bnever)\s+(?:\w+\s+)?$", re.IGNORECASE)
# "correct except for sentence 4", "no errors other than in sentence 4": not a verdict of correct.
_EXCEPTION_AFTER = re.compile(r"[\s,]*(?:except|apart\s+from|other\s+than|save\s+for|but\s+for)\b", re.IGNORECASE)
_STRICT_CORRECT = re.compile(r"CORRECT")
_STRICT_ERROR = re.compile(r"\d+(?::\s*|[ \t]+)\S.*", re.DOTALL)


def parse_medec(output: str) -> tuple[int | None, int | None, bool]:
    """``(flag, sentence_id, strict)``: flag 0 (correct), 1 (error) or None (unreadable)."""
    text = answer_text(output)
    leading = _SENTENCE_ID.match(text) or _NATIVE_ANSWER.match(text)
    if leading:
        return 1, int(leading.group(1)), _STRICT_ERROR.fullmatch(text) is not None
    # Otherwise the first verdict stated wins: "There is no error, but sentence 4 could be clearer" says
    # correct; "The error is in sentence 4; the rest is correct" flags sentence 4.
    flagged = _SENTENCE_ANYWHERE.search(text)
    correct = next((m for m in _CORRECT.finditer(text)
                    if not _NEGATION_BEFORE.search(text[:m.start()]) and not _EXCEPTION_AFTER.match(text, m.end())),
                   None)
    if flagged and (correct is None or flagged.start() < correct.start()):
        return 1, int(flagged.group(1)), _STRICT_ERROR.fullmatch(text) is not None
    if correct:
        return 0, None, _STRICT_CORRECT.fullmatch(text.strip(" .")) is not None
    return None, None, False


def _gold_flag(spec: BenchmarkSpec, instance: Instance) -> int:
    raw = instance.meta.get("error_flag", instance.label)
    try:
        flag = int(str(raw).strip())
    except ValueError:
        flag = -1
    if flag not in (0, 1):
        raise MetricInputError(f"benchmark {spec.id}: an instance has no 0/1 error flag (meta 'error_flag')")
    return flag


NEEDS = Needs(answers=(OutputType.FREE_TEXT,),
              fields=((meta_field("error_flag"), LABEL), (meta_field("error_sentence_id"),)))


@instance_scorer("medec_flag_accuracy", needs=NEEDS, as_answered=True)
def medec_flag_accuracy(spec: BenchmarkSpec, instance: Instance, output: str) -> tuple[float, ScoreDetails]:
    gold_flag = _gold_flag(spec, instance)
    gold_sentence = -1
    if gold_flag == 1:
        raw = instance.meta.get("error_sentence_id")
        if raw is None:
            raise MetricInputError(
                f"benchmark {spec.id}: a flagged instance has no meta 'error_sentence_id' (expected an integer)")
        gold_sentence = int(raw)
    flag, sentence, strict = parse_medec(output)
    flag_correct = flag is not None and flag == gold_flag
    predicted_sentence = sentence if flag == 1 and sentence is not None else -1
    sentence_correct = flag is not None and predicted_sentence == gold_sentence
    return float(flag_correct), ScoreDetails(
        parsed=flag is not None, strict_format=strict, group="error" if gold_flag else "correct",
        sub={"error_sentence_accuracy": float(sentence_correct)},
    )
