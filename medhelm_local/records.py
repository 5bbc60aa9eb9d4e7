"""The records that flow through the pipeline, one way:

extract -> Instance -> InferenceRequest -> InferenceResult -> InstanceScore -> BenchmarkScore -> export.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# The instance fields a scorer may read, by name: what a metric needs and what a loader gives.
LABEL, REFERENCES = "label", "references"


def meta_field(key: str) -> str:
    return f"meta.{key}"


class Instance(BaseModel):
    """One evaluation item. ``fields`` fill the prompt template; ``references`` are the gold outputs."""

    model_config = ConfigDict(frozen=True)

    benchmark: str
    id: str
    fields: dict[str, str]
    references: list[str] = Field(default_factory=list)
    label: str | None = None  # canonical label, for stratified sampling and closed-ended metrics
    meta: dict[str, Any] = Field(default_factory=dict)  # metric-specific data (limits, db path, ...)


class ChatMessage(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class InferenceRequest(BaseModel):
    benchmark: str
    instance_id: str
    messages: list[ChatMessage]
    max_tokens: int
    temperature: float = 0.0
    seed: int | None = None
    response_format: dict[str, Any] | None = None
    stop: list[str] | None = None  # stop sequences (MedHELM parity prompts); None = the server's default

    def digest(self) -> str:
        """SHA-256 of the request as sent: what the store keeps of it (the prompt is rebuilt from the run's spec,
        the instance and its recorded cut, ``runner.fitting.sent_request``, and checked against this)."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Truncated:
    """How one instance's prompt was cut to fit the model's context: counts only, never text."""

    field: str  # the spec's designated long field
    field_chars: int  # its length before the cut
    removed_chars: int
    removed_tokens: int  # the prompt's count before the cut minus after it
    prompt_tokens: int  # the fitted prompt's count (as the run's token counter counts it)


class InferenceResult(BaseModel):
    """What came back for one request. Exactly one of ``text`` / ``error`` is set.

    ``error`` is a category and status (``http_503``, ``timeout``, ``invalid_json``), never a body.
    """

    text: str | None = None
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    attempts: int = 1
    finish_reason: str | None = None
    endpoint: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None

    @property
    def output(self) -> str | None:
        """The answer as stored and scored: the text of a successful request, None for a failed one."""
        return self.text if self.ok else None


class InstanceScore(BaseModel):
    benchmark: str
    instance_id: str
    metric: str
    value: float | None  # None: could not be scored (request failed, no valid judgement); never defaulted
    details: dict[str, Any] = Field(default_factory=dict)


class BenchmarkScore(BaseModel):
    """An aggregate: the only kind of number that may leave the appliance."""

    model: str
    benchmark: str
    metric: str
    score: float | None
    n: int  # instances that contributed to the score
    n_failed: int = 0  # instances excluded because their request or judgement failed
    # Metrics whose gold can be empty (EHRSQL: a gold query returning no rows, which any empty result matches):
    # how many scored instances have an empty gold, and the score on the others. None for other metrics.
    n_gold_empty: int | None = None
    score_nonempty_gold: float | None = None
