"""Errors the CLI turns into exit codes. Messages name files, rows, columns and fields, never content."""

from __future__ import annotations

from pathlib import Path


class MedhelmError(Exception):
    """A failure the user can act on. ``exit_code`` 1 = operational failure, 2 = bad input."""

    exit_code = 1


class BadInputError(MedhelmError):
    """The user gave something invalid: an option, a config file, an extract."""

    exit_code = 2


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
