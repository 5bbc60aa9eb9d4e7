"""Errors the CLI turns into exit codes. Messages name files, rows, columns and fields, never content."""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args, get_origin

from medhelm_local.patterns import describe

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

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


def unknown_field_hint(exc: ValidationError, known: Collection[str], elsewhere: Collection[str], belongs: str,
                       model: type[BaseModel] | None = None) -> str:
    """What to do with each field pydantic refused as unknown ("Extra inputs are not permitted"): at the top of the
    model, a field of ``elsewhere`` ``belongs`` there (a loader option written at the spec's top level), else the
    ``known`` field it most resembles is named (a typo); inside a nested block of ``model`` (``prompt.sytem``,
    ``metrics[0].mian``), the block's field it most resembles. "" when there is no such field."""
    hints = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        if error["type"] != "extra_forbidden" or not loc:
            continue
        name = str(loc[-1])
        if len(loc) == 1 and name in elsewhere:
            hints.append(f"{name} belongs {belongs}")
            continue
        block = known if len(loc) == 1 else _fields_at(model, loc[:-1])
        if close := difflib.get_close_matches(name, block, n=1):
            hints.append(f"{field_path(loc)}: did you mean {close[0]}?")
    return "".join(f"; {hint}" for hint in hints)


def _fields_at(model: type[BaseModel] | None, path: tuple[str | int, ...]) -> Collection[str]:
    """The field names of the nested model at ``path`` (list indexes and dict keys skipped); none where the path
    leaves the models (a plain value)."""
    keyed = False  # the part after a dict field is one of its keys
    for part in path:
        if model is None:
            return ()
        if isinstance(part, int) or keyed:
            keyed = False
            continue
        field = model.model_fields.get(part)
        model = _model_in(field.annotation) if field is not None else None
        keyed = field is not None and _is_dict(field.annotation)
    return () if model is None else model.model_fields


def _is_dict(annotation: Any) -> bool:
    return get_origin(annotation) is dict or any(get_origin(arg) is dict for arg in get_args(annotation))


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds: itself, or inside ``X | None``, ``list[X]``, ``X | str``."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if (found := _model_in(arg)) is not None:
            return found
    return None


class ConfigError(BadInputError):
    """``appliance.yaml`` (or another config file) is invalid; the message names the field."""


def ordinal(number: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``, ``22nd``."""
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


@dataclass(frozen=True)
class Place:
    """Where a record is in its file, said so that a user who opens the file finds it, whatever its format:
    ``row 7 (the 6th data row)`` as a spreadsheet numbers the rows of a CSV, TSV or sheet (the header row 1),
    ``line 7`` of a JSON Lines or text file, ``record 3 (counting from 1)`` of a file that has no lines to count
    (Parquet, Feather, a DuckDB table or query, a JSON array)."""

    unit: str
    number: int
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.unit} {self.number}" + (f" ({self.detail})" if self.detail else "")

    @classmethod
    def sheet_row(cls, number: int, data_row: int, line: int | None = None) -> Place:
        """Row ``number`` as a spreadsheet shows it, the ``data_row``-th after the header; ``line``: the line of a
        text file it starts on, said when it differs (a quoted field holding line breaks above it)."""
        detail = f"the {ordinal(data_row)} data row"
        if line is not None and line != number:
            detail += f", starting on line {line} of the file"
        return cls("row", number, detail)

    @classmethod
    def line(cls, number: int) -> Place:
        return cls("line", number)

    @classmethod
    def record(cls, number: int, unit: str = "record") -> Place:
        return cls(unit, number, "counting from 1")


class ExtractError(BadInputError):
    """A data file failed validation. Carries where (file, place in it, column) and what was expected.

    The offending *value* is deliberately never included: it may be patient text.
    """

    def __init__(
        self,
        file: Path | str,
        expected: str,
        *,
        place: Place | None = None,
        column: str | None = None,
    ) -> None:
        self.file = str(file)
        self.place = place
        self.column = column
        self.expected = expected
        where = [f"file {self.file}"]
        if place is not None:
            where.append(str(place))
        if column is not None:
            where.append(f"column {column!r}")
        super().__init__(f"{', '.join(where)}: expected {expected}")


class EgressDenied(MedhelmError):
    """A connection to an endpoint outside the allowlist was refused before it was opened."""

    exit_code = 2


class NotFoundError(BadInputError):
    """A named thing (model, benchmark, run, dataset) does not exist."""
