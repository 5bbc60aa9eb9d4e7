"""Errors the CLI turns into exit codes. Messages name files, rows, columns and fields, never content."""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from medhelm_local.patterns import describe

if TYPE_CHECKING:
    from pydantic import ValidationError

_NAMED_FIELD = re.compile(r"(\w+): (.*)", re.DOTALL)  # a validator's message that names its field first


class MedhelmError(Exception):
    """A failure the user can act on. ``exit_code`` 1 = operational failure, 2 = bad input."""

    exit_code = 1


class Interrupted(MedhelmError):
    """Ctrl-C or SIGTERM ended a command that can say what it kept and how to go on (a run: its id and
    ``run --resume``). Exit code 130, as the shell gives a command ended by SIGINT."""

    exit_code = 130


class BadInputError(MedhelmError):
    """The user gave something invalid: an option, a config file, an extract."""

    exit_code = 2


def field_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a reader writes it: ``models[0].base_urls``; ``(root)`` for the whole object."""
    parts: list[str] = []
    for item in loc:
        parts.append(f"[{item}]" if isinstance(item, int) else ("." if parts else "") + str(item))
    return "".join(parts) or "(root)"


def validation_problems(exc: ValidationError, names: Mapping[str, str] | None = None) -> str:
    """pydantic's errors as ``field PATH: what was wrong; ...``, never the input (pydantic's own report prints it
    and a link). A field validator's message that repeats its field's name (``base_urls: ...``) says it once; a
    whole-object validator's message (no location) is given as it is, naming its fields itself. ``names``: the name
    a field was given under (a CLI option: ``{"base_urls": "--base-url"}``)."""
    problems = []
    for error in exc.errors():
        loc, message = tuple(error["loc"]), error["msg"].removeprefix("Value error, ")
        if error["type"] == "string_pattern_mismatch":  # words, not pydantic's regular expression
            message = f"expected {describe(str(error.get('ctx', {}).get('pattern', '')))}"
        if not loc:
            problems.append(message)
            continue
        named = _NAMED_FIELD.fullmatch(message)
        if named and loc[-1] == named.group(1):
            message = named.group(2)
        given = names.get(str(loc[0])) if names and len(loc) == 1 else None
        problems.append(f"{given or f'field {field_path(loc)}'}: {message}")
    return "; ".join(problems)


def unknown_field_hint(exc: ValidationError, known: Collection[str], elsewhere: Collection[str], belongs: str) -> str:
    """What to do with each field pydantic refused as unknown at the top of the model ("Extra inputs are not
    permitted"): a field of ``elsewhere`` ``belongs`` there (a loader option written at the spec's top level), else
    the ``known`` field it most resembles is named (a typo); "" when there is no such field."""
    hints = []
    for error in exc.errors():
        if error["type"] != "extra_forbidden" or len(error["loc"]) != 1:
            continue
        name = str(error["loc"][0])
        if name in elsewhere:
            hints.append(f"{name} belongs {belongs}")
        elif close := difflib.get_close_matches(name, known, n=1):
            hints.append(f"{name}: did you mean {close[0]}?")
    return "".join(f"; {hint}" for hint in hints)


class ConfigError(BadInputError):
    """``appliance.yaml`` (or another config file) is invalid; the message names the field."""


class ExtractError(BadInputError):
    """A data file failed validation. Carries where (file, row, column) and what was expected.

    The offending *value* is deliberately never included: it may be patient text.
    """

    def __init__(
        self,
        file: Path | str,
        expected: str,
        *,
        row: int | None = None,
        column: str | None = None,
    ) -> None:
        self.file = str(file)
        self.row = row
        self.column = column
        self.expected = expected
        where = [f"file {self.file}"]
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column!r}")
        super().__init__(f"{', '.join(where)}: expected {expected}")


class EgressDenied(MedhelmError):
    """A connection to an endpoint outside the allowlist was refused before it was opened."""

    exit_code = 2


class NotFoundError(BadInputError):
    """A named thing (model, benchmark, run, dataset) does not exist."""
