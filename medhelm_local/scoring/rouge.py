"""ROUGE-L F-measure (``rouge-score``, Porter stemming, no downloads), best over the references.

A scorer of its own (metric ``rouge_l``): MedHELM reports it beside the jury for open-ended benchmarks. It is not
defined for an instance without a reference (no row), and a failed request has no ROUGE-L row either (the failure
is counted by the benchmark's main metric).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec, OutputType
from medhelm_local.records import Instance
from medhelm_local.scoring.details import ScoreDetails
from medhelm_local.scoring.extract import strip_reasoning
from medhelm_local.scoring.registry import instance_scorer
from medhelm_local.scoring.scorer import REFERENCES, Needs

ROUGE_L = "rouge_l"


@lru_cache(maxsize=1)
def _scorer() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def rouge_l(output: str, references: Sequence[str]) -> float | None:
    """ROUGE-L F1 of ``output`` (reasoning dropped) against its best reference; None without references."""
    refs = [r for r in references if r.strip()]
    if not refs:
        return None
    text = strip_reasoning(output)
    return max(float(_scorer().score(ref, text)["rougeL"].fmeasure) for ref in refs)


# Prose against prose; the references are what it reads: a spec whose loader gives none is refused before a run.
@instance_scorer(ROUGE_L, needs=Needs(answers=(OutputType.FREE_TEXT,), fields=((REFERENCES,),)))
def rouge_l_metric(spec: BenchmarkSpec, instance: Instance, output: str) -> tuple[float | None, ScoreDetails]:
    """The ``rouge_l`` metric: :func:`rouge_l` against the instance's references (None: it has none)."""
    return rouge_l(output, instance.references), ScoreDetails()
