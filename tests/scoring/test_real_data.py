"""Gold answers used as predictions score 1.0 on the real public benchmark files (loaded by the real loaders)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.loaders import load_dataset
from medhelm_local.records import Instance
from medhelm_local.scoring.engine import score_outputs
from medhelm_local.scoring.summary import Breakdown, summarise
from tests.conftest import SHARED_DATA

FOLDERS = {"pubmedqa": "pubmedqa", "medcalc_bench": "medcalc_bench", "medec": "medec", "medqa": "medqa",
           "ehrsql": "ehrsql"}


@cache
def instances(benchmark: str) -> list[Instance]:
    return load_dataset(shipped_spec(benchmark), SHARED_DATA / FOLDERS[benchmark]).instances


def gold_output(benchmark: str, instance: Instance) -> str:
    """What a perfect model would write, in the format the benchmark's prompt asks for."""
    if benchmark == "medec":
        flag = instance.meta["error_flag"]
        return "CORRECT" if flag == 0 else f"{instance.meta['error_sentence_id']}: {instance.references[0]}"
    if benchmark == "ehrsql":
        return instance.references[0] if instance.references else "null"
    if instance.label is not None:
        return instance.label
    return instance.references[0]


def score_with(benchmark: str, make_output: object) -> Breakdown:
    spec = shipped_spec(benchmark)
    data = instances(benchmark)
    scores = score_outputs(spec, [(i, make_output(benchmark, i), None) for i in data])  # type: ignore[operator]
    return summarise(benchmark, spec.metric, scores)


@pytest.mark.parametrize("benchmark", ["pubmedqa", "medcalc_bench", "medec", "medqa", "ehrsql"])
def test_gold_answers_score_one(public_data: Path, benchmark: str) -> None:
    summary = score_with(benchmark, gold_output)
    assert summary.score == 1.0
    assert summary.strict_format_rate == 1.0
    if benchmark == "ehrsql":
        # Four gold queries name vital-sign placeholders ("heart_rate_lower"): run as the official evaluation
        # runs them (their normal ranges filled in), every gold query is scored.
        assert summary.n_failed == 0
        assert summary.groups["unanswerable"]["n"] == 588
        assert summary.secondary["valid_sql"]["score"] == 1.0
    else:
        assert summary.n_failed == 0
        assert summary.n == len(instances(benchmark))


def test_medcalc_every_category_scored(public_data: Path) -> None:
    summary = score_with("medcalc_bench", gold_output)
    assert set(summary.groups) == {"lab", "physical", "dosage", "risk", "severity", "diagnosis", "date",
                                   "gestational age"}
    assert all(group["score"] == 1.0 for group in summary.groups.values())


def test_chatty_gold_answers_still_score_one(public_data: Path) -> None:
    def chatty(benchmark: str, instance: Instance) -> str:
        answer = gold_output(benchmark, instance)
        return f"<think>Let me work through this.</think>After careful review, the answer is {answer}."

    for benchmark in ("pubmedqa", "medqa", "medcalc_bench"):
        summary = score_with(benchmark, chatty)
        assert summary.score == 1.0, benchmark
        assert summary.strict_format_rate == 0.0, benchmark


def test_medec_wrong_sentence_is_flag_right_sentence_wrong(public_data: Path) -> None:
    def shifted(benchmark: str, instance: Instance) -> str:
        if instance.meta["error_flag"] == 0:
            return "CORRECT"
        return f"{int(instance.meta['error_sentence_id']) + 1}: something"

    summary = score_with("medec", shifted)
    assert summary.score == 1.0
    flagged = summary.groups["error"]["n"]
    total = summary.n
    assert isinstance(flagged, int) and isinstance(total, int)
    assert summary.secondary["error_sentence_accuracy"]["score"] == pytest.approx((total - flagged) / total)


def test_ehrsql_abstaining_everywhere(public_data: Path) -> None:
    summary = score_with("ehrsql", lambda _b, _i: "null")
    assert summary.groups["unanswerable"]["score"] == 1.0
    assert summary.groups["answerable"]["score"] == 0.0
    assert summary.score == pytest.approx(588 / 1792)
