"""The shapes of names users write (benchmark ids, model names, field names), each with the words an error gives
for it: a user who typed ``My-Benchmark`` reads what a name may hold, not a regular expression."""

from __future__ import annotations

LOWER_ID = r"^[a-z][a-z0-9_]*$"
FIELD_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
SERVED_MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$"
HEADER_NAME = r"^[A-Za-z0-9-]{1,64}$"
SUFFIX = r"^[A-Za-z0-9_.-]+$"
ACTOR = r"^[A-Za-z0-9][A-Za-z0-9._@+|:-]{0,127}$"  # a user name or sign-in subject (medhelm_local.actors)

WORDS = {
    LOWER_ID: "lower-case letters, digits and _, starting with a letter (e.g. my_benchmark, exact_match)",
    FIELD_NAME: "letters, digits and _, not starting with a digit (e.g. note_text)",
    MODEL_NAME: "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit (e.g. llama-70b)",
    SERVED_MODEL_NAME: "1 to 128 letters, digits, '.', '_', '/' or '-', starting with a letter or digit",
    HEADER_NAME: "an HTTP header name: 1 to 64 letters, digits or '-' (e.g. X-Forwarded-User)",
    SUFFIX: "letters, digits, '.', '_' or '-'",
    ACTOR: "1 to 128 letters, digits, '.', '_', '-', '@', '+', '|' or ':', starting with a letter or digit, no spaces",
}


def describe(pattern: str) -> str:
    """What a value matching ``pattern`` may hold, in words (the pattern itself where it has none)."""
    return WORDS.get(pattern, f"text matching {pattern}")
