"""What a scorer records beside an instance's value: typed, and never dataset or model text (labels, numbers,
flags and failure categories only).

A scorer builds its details as one of these models; the store keeps them as JSON (:meth:`ScoreDetails.stored`,
only the fields the scorer set) and :func:`~medhelm_local.scoring.registry.read_details` reads them back into the
model of the metric that wrote them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Counts(BaseModel):
    """True/false positives and false negatives of one instance, for micro-averaged metrics."""

    model_config = ConfigDict(extra="forbid")

    tp: int = 0
    fp: int = 0
    fn: int = 0


class ScoreDetails(BaseModel):
    """The details every metric may set (all optional).

    - ``error``: why the instance has no value (``no_response``, ``timeout``, ``gold_sql_error``,
      ``no_valid_judgement``): it is excluded from the score and counted, never scored;
    - ``parsed``: an answer could be read from the output at all;
    - ``strict_format``: the output was nothing but the answer, as the prompt asked;
    - ``group``: a breakdown group (MedCalc-Bench calculator category);
    - ``sub``: secondary per-instance values, reported beside the score (MEDEC error-sentence accuracy);
    - ``counts``: for micro-averaged metrics;
    - ``gold_empty``: the gold result is empty (EHRSQL gold queries returning no rows).
    """

    model_config = ConfigDict(extra="forbid")

    error: str | None = None
    parsed: bool | None = None
    strict_format: bool | None = None
    group: str | None = None
    sub: dict[str, float | None] | None = None
    counts: Counts | None = None
    gold_empty: bool | None = None

    def stored(self) -> dict[str, Any]:
        """The JSON the store keeps: only the fields the scorer set."""
        return self.model_dump(mode="json", exclude_unset=True)
