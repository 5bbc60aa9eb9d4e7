"""Structured output (JSON constrained to a schema) in the request shape each serving engine accepts.

Servers disagree on how a JSON schema is asked for:

* vLLM (and OpenAI): ``{"type": "json_schema", "json_schema": {"name": ..., "strict": true, "schema": {...}}}``.
* llama.cpp's Python server (the embedded model): only ``text`` or ``json_object``, the schema beside the type:
  ``{"type": "json_object", "schema": {...}}``; a ``json_schema`` request is refused (HTTP 500, a request
  validation error).
* Other OpenAI-compatible servers: one of the two, or neither.

:func:`shapes_for` gives the shapes to try for a backend, in order: one for the embedded model and vLLM, and for
a generic server ``json_schema``, then ``json_object`` + schema, then no ``response_format`` at all (the prompt
alone asks for JSON). A server's refusal of a shape is recognised by :func:`is_format_rejection`, from the status
and the error body, which is inspected in memory only (it may echo the prompt) and never stored or logged.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from medhelm_local.home.config import BackendKind


class OutputShape(StrEnum):
    JSON_SCHEMA = "json_schema"  # OpenAI / vLLM
    JSON_OBJECT_SCHEMA = "json_object+schema"  # llama.cpp (llama-cpp-python's server)
    PROMPT_ONLY = "prompt_only"  # no response_format: the prompt asks for JSON, the reply is validated


_SHAPES: dict[BackendKind, tuple[OutputShape, ...]] = {
    BackendKind.EMBEDDED: (OutputShape.JSON_OBJECT_SCHEMA,),
    BackendKind.VLLM: (OutputShape.JSON_SCHEMA,),
    BackendKind.OPENAI_COMPATIBLE: (OutputShape.JSON_SCHEMA, OutputShape.JSON_OBJECT_SCHEMA,
                                    OutputShape.PROMPT_ONLY),
}

# Statuses a request-validation error comes back with: 400 (vLLM, OpenAI), 422 (FastAPI/pydantic, TGI),
# 500 (llama-cpp-python's server wraps its pydantic validation error in a 500).
_REJECTION_STATUS = frozenset({400, 422, 500})
# What such an error says when it is about the structured-output parameter (and not, e.g., the prompt's length).
_REJECTION_MARKERS = (b"response_format", b"json_schema", b"json_object", b"guided_json", b"guided_decoding")


def shapes_for(kind: BackendKind) -> tuple[OutputShape, ...]:
    """The structured-output shapes to try for a server of ``kind``, in order."""
    return _SHAPES[kind]


def response_format_for(shape: OutputShape, schema: dict[str, Any], *, name: str) -> dict[str, Any] | None:
    """The ``response_format`` request field for ``shape`` (None: leave the field out)."""
    if shape == OutputShape.JSON_SCHEMA:
        return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}
    if shape == OutputShape.JSON_OBJECT_SCHEMA:
        return {"type": "json_object", "schema": schema}
    return None


def is_format_rejection(status: int, body: bytes) -> bool:
    """Whether an error response refuses the request's ``response_format`` (a request-validation error naming
    the structured-output parameter). Only the status and a few fixed markers are looked at."""
    if status not in _REJECTION_STATUS:
        return False
    lowered = body[:65536].lower()
    return any(marker in lowered for marker in _REJECTION_MARKERS)
