"""ROUGE-L F-measure (``rouge-score``, Porter stemming, no downloads), best over the references.

BERTScore is not part of the base install: it needs a local model directory and the optional ``bert-score``
extra; see :func:`bertscore_f` (it never downloads: the model path must exist).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from medhelm_local.errors import BadInputError
from medhelm_local.scoring.extract import strip_reasoning


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


def bertscore_f(outputs: Sequence[str], references: Sequence[str], model_path: Path, num_layers: int
                ) -> list[float]:
    """BERTScore F1 with a LOCAL model directory (optional extra ``bert-score``; ``num_layers``: the layer whose
    embeddings are compared, as bert-score documents per model); never downloads. Not wired into scoring."""
    if not model_path.is_dir():
        raise BadInputError(f"{model_path}: BERTScore needs a local model directory (nothing is downloaded)")
    try:
        from bert_score import BERTScorer
    except ImportError:
        raise BadInputError("BERTScore is an optional extra: install the bert-score package") from None
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    scorer = BERTScorer(model_type=str(model_path), num_layers=num_layers)
    _, _, f1 = scorer.score([strip_reasoning(o) for o in outputs], list(references))
    return [float(v) for v in f1.tolist()]
