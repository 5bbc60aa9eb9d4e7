"""The one engine that turns rows into validated instances, driven by a declarative column mapping.

Every row-shaped source (CSV, JSON, Parquet, a DuckDB query, or rows a native-format reader produced) goes
through :func:`build_instances`. What differs per benchmark is data: a :class:`RecordMapping` in the spec's
``loader_options``. Validation is all-or-nothing: the first problem raises an
:class:`~medhelm_local.errors.ExtractError` naming file, row and column, never the cell value.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError, ExtractError, Place, unknown_field_hint, validation_problems
from medhelm_local.jsontext import loads_strict
from medhelm_local.loaders.base import canonical_label
from medhelm_local.loaders.io import Row, Table, binary_not_text, excel_error
from medhelm_local.patterns import SUFFIX
from medhelm_local.records import LABEL, REFERENCES, Instance, meta_field

ColumnType = Literal["text", "int", "number", "bool", "date", "number_or_date", "list"]
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DATE_FORMATS = ("%Y-%m-%d", "%m/%d/%Y", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%m/%d/%y")
# A duration written as a tuple of weeks and days (MedCalc-Bench gestational age: "('4 weeks', '2 days')").
_DURATION = re.compile(r"^\(\s*'?\d+ weeks?'?\s*,\s*'?\d+ days?'?\s*\)$")
_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}


class Variant(BaseModel):
    """One of several instances made from one row (MedHallu: the true and the hallucinated answer)."""

    model_config = ConfigDict(extra="forbid")

    suffix: str = Field(pattern=SUFFIX)
    fields: dict[str, str] = Field(default_factory=dict)
    label: str | None = None
    reference_columns: list[str] = Field(default_factory=list)


FieldViewName = Literal["python_str", "stripped"]


class FieldView(BaseModel):
    """A field rendered from a column the way another harness renders it (MedHELM parity templates):
    ``python_str`` is Python's ``str()`` of the cell (a list prints as ``['a', 'b']``, as in HELM's f-strings);
    ``stripped`` is the cell's text without surrounding whitespace (HELM's ``.strip()``)."""

    model_config = ConfigDict(extra="forbid")

    column: str
    view: FieldViewName


def render_view(value: Any, view: FieldViewName) -> str:
    return str(value) if view == "python_str" else as_text(value).strip()


class RecordMapping(BaseModel):
    """How a row becomes an :class:`~medhelm_local.records.Instance`.

    ``fields``: prompt template field -> column (required, non-empty); ``optional_fields`` may be blank.
    ``label_column``: raw label, mapped through the spec's ``label_map`` and checked against ``labels``.
    ``options_column`` (a ``{letter: text}`` object or a list) or ``option_columns`` (one column per option)
    render the ``{options}`` field as ``A. ...`` lines; ``answer_column`` + ``answer_format`` give the label.
    ``reference_columns`` / ``reference_list_column`` give the gold outputs (default: the label).
    ``meta``: meta key -> column, converted by ``types`` (column -> type); ``meta_constants``: fixed values.
    ``view_fields``: field -> :class:`FieldView` (a column rendered as another harness renders it).
    """

    model_config = ConfigDict(extra="forbid")

    id_column: str | None = None
    fields: dict[str, str] = Field(default_factory=dict)
    optional_fields: dict[str, str] = Field(default_factory=dict)
    constant_fields: dict[str, str] = Field(default_factory=dict)
    view_fields: dict[str, FieldView] = Field(default_factory=dict)
    label_column: str | None = None
    options_column: str | None = None
    option_columns: list[str] = Field(default_factory=list)
    answer_column: str | None = None
    answer_format: Literal["letter", "index0", "index1", "text"] = "letter"
    reference_columns: list[str] = Field(default_factory=list)
    reference_list_column: str | None = None
    # Reference values meaning "no reference" (EHRSQL writes the query of an unanswerable question as null).
    empty_reference_values: list[str] = Field(default_factory=list)
    meta: dict[str, str] = Field(default_factory=dict)
    # Cell values that mean "no value" (MEDEC writes NA, SQL Server exports NULL): a meta value stored as None, a
    # prompt field empty (a required one refused, naming row and column), never the text "NULL" in a prompt.
    null_values: list[str] = Field(default_factory=list)
    meta_constants: dict[str, Any] = Field(default_factory=dict)
    types: dict[str, ColumnType] = Field(default_factory=dict)
    variants: list[Variant] = Field(default_factory=list)
    skip_blank_rows: bool = True
    list_separator: str = ";"
    # Characters stripped from the end of each option text, then whitespace (MedQA's source leaves a stray quote
    # and line break in some options, jind11/MedQA#5; HELM strips them the same way).
    option_rstrip: str | None = None

    def required_columns(self) -> list[str]:
        columns = [
            *self.fields.values(),
            *(v.column for v in self.view_fields.values()),
            *self.reference_columns,
            *self.option_columns,
            *self.meta.values(),
            *self.types,
        ]
        for optional in (
            self.id_column,
            self.label_column,
            self.options_column,
            self.answer_column,
            self.reference_list_column,
        ):
            if optional:
                columns.append(optional)
        for variant in self.variants:
            columns.extend([*variant.fields.values(), *variant.reference_columns])
        return list(dict.fromkeys(columns))


def mapping_fields(mapping: RecordMapping) -> frozenset[str]:
    """The instance fields a scorer reads (``label``, ``references``, ``meta.<key>``) that every instance built with
    ``mapping`` carries."""
    fields: set[str] = set()
    if mapping.label_column or (mapping.answer_column and (mapping.options_column or mapping.option_columns)) or (
            mapping.variants and all(v.label is not None for v in mapping.variants)):
        fields.add(LABEL)
    if (mapping.reference_columns or mapping.reference_list_column or LABEL in fields
            or (mapping.variants and all(v.reference_columns for v in mapping.variants))):
        fields.add(REFERENCES)  # the references default to the label
    meta = {*mapping.meta, *mapping.meta_constants}
    if mapping.options_column or mapping.option_columns:
        meta.add("options")
    if mapping.variants:
        meta.add("variant")
    return frozenset(fields | {meta_field(key) for key in meta})


def parse_mapping(spec: BenchmarkSpec, options: dict[str, Any]) -> RecordMapping:
    from medhelm_local.loaders.tabular import READER_KEYS  # tabular imports this module

    try:
        return RecordMapping.model_validate(options)
    except ValidationError as exc:
        # The reader's keys were split off before: a misspelt one (headerrow) is named as one of them.
        hint = unknown_field_hint(exc, [*RecordMapping.model_fields, *READER_KEYS, "columns"],
                                  BenchmarkSpec.model_fields, "at the spec's top level, not under loader_options",
                                  model=RecordMapping)
        raise BadInputError(f"benchmark {spec.id}: invalid loader_options ({validation_problems(exc)}){hint}") from None


def check_option_keys(spec: BenchmarkSpec, allowed: set[str]) -> None:
    """Reject loader options a loader does not know (a typo would otherwise be silently ignored)."""
    unknown = sorted(set(spec.loader_options) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise BadInputError(
            f"benchmark {spec.id}: unknown loader_options {unknown} for input format "
            f"{spec.input_format!r} (known: {known})"
        )


def is_blank(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, list | tuple):
        # [None]: a list column's null items are no value either (one level: a nested list is a value)
        return all(_missing(v) or (isinstance(v, str) and not v.strip()) for v in value)
    if isinstance(value, dict):
        return len(value) == 0
    return False


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def as_text(value: Any) -> str:
    """Text for a prompt field: lists joined by newlines (a null item left out: it read "None"), integral floats
    without ``.0``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list | tuple):
        return "\n".join(as_text(v) for v in value if not _missing(v))
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def convert(value: Any, kind: ColumnType, file: Path, place: Place | None, column: str, separator: str = ";"
            ) -> Any:
    """Check and convert one cell to ``kind``; the error names the column and the type, never the value."""
    try:
        return _convert(value, kind, separator)
    except (ValueError, TypeError, OverflowError, RecursionError):  # RecursionError: a JSON list nested too deeply
        expected = {
            "int": "an integer",
            "number": "a number",
            "bool": "true or false",
            "date": "a date",
            "number_or_date": "a number, a date (YYYY-MM-DD or MM/DD/YYYY) or a (weeks, days) duration",
            "list": "a list (JSON array or separated values)",
            "text": "text",
        }[kind]
        raise ExtractError(file, expected, place=place, column=column) from None


def _convert(value: Any, kind: ColumnType, separator: str) -> Any:
    if kind == "text":
        if isinstance(value, list | dict):
            raise TypeError(kind)
        return as_text(value)
    if kind == "int":
        if isinstance(value, bool):
            raise TypeError(kind)
        if isinstance(value, int):
            return value
        text = str(value).strip().replace(",", "")
        if text.lstrip("+-").isdigit():
            return int(text)  # every digit: through a float, ids past 2**53 would change
        number = float(text)
        if not number.is_integer():
            raise ValueError(kind)
        return int(number)
    if kind == "number":
        if isinstance(value, bool):
            raise TypeError(kind)
        if isinstance(value, int | float | Decimal):
            number = float(value)
        else:
            number = float(str(value).strip().replace(",", ""))
        if math.isnan(number) or math.isinf(number):
            raise ValueError(kind)
        return number
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(kind)
    if kind == "date":
        return _parse_date(value).isoformat()
    if kind == "number_or_date":
        try:
            return _convert(value, "number", separator)
        except (ValueError, TypeError):
            text = as_text(value).strip()
            if _DURATION.match(text):
                return text
            _parse_date(value)
            return text
    if kind == "list":
        if isinstance(value, list | tuple):
            return [as_text(v).strip() for v in value if not is_blank(v)]
        if hasattr(value, "tolist"):
            return [as_text(v).strip() for v in value.tolist() if not is_blank(v)]
        text = str(value).strip()
        if text.startswith("["):
            parsed = loads_strict(text)
            if not isinstance(parsed, list):
                raise TypeError(kind)
            return [as_text(v).strip() for v in parsed if not is_blank(v)]
        return [part.strip() for part in text.split(separator) if part.strip()]
    raise TypeError(kind)


def _parse_date(value: Any) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    text = str(value).strip()
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    raise ValueError("date")


def _cell(row: Row, column: str, *, required: bool) -> Any:
    value = row.values.get(column)
    if required and is_blank(value):
        raise ExtractError(row.file, "a non-empty value", place=row.place, column=column)
    return value


def _typed(mapping: RecordMapping, row: Row, column: str, value: Any) -> Any:
    kind = mapping.types.get(column)
    return convert(value, kind, row.file, row.place, column, mapping.list_separator) if kind else value


def _options(mapping: RecordMapping, row: Row) -> dict[str, str]:
    options = _raw_options(mapping, row)
    if mapping.option_rstrip is None:
        return options
    return {k: v.rstrip(mapping.option_rstrip).rstrip() for k, v in options.items()}


def _raw_options(mapping: RecordMapping, row: Row) -> dict[str, str]:
    if mapping.options_column:
        raw = _cell(row, mapping.options_column, required=True)
        if isinstance(raw, str) and raw.strip()[:1] in "[{":
            try:
                raw = loads_strict(raw)
            except (ValueError, RecursionError):  # not JSON, an integer of too many digits, or nested too deeply
                raise ExtractError(
                    row.file,
                    "a JSON object or array of options",
                    place=row.place,
                    column=mapping.options_column,
                ) from None
        if isinstance(raw, dict):
            options = {str(k).strip().upper(): as_text(v) for k, v in raw.items()}
            # len(raw): "A" and "a" are one key once upper-cased, and one of the two options would be dropped
            if len(options) != len(raw) or sorted(options) != list(LETTERS[: len(options)]):
                raise ExtractError(
                    row.file,
                    "options keyed A, B, C, ... in order",
                    place=row.place,
                    column=mapping.options_column,
                )
            return dict(sorted(options.items()))
        if isinstance(raw, list | tuple) and raw:
            return {LETTERS[i]: as_text(v) for i, v in enumerate(raw)}
        raise ExtractError(
            row.file, "a non-empty object or list of options", place=row.place, column=mapping.options_column
        )
    return {LETTERS[i]: as_text(_cell(row, c, required=True)) for i, c in enumerate(mapping.option_columns)}


def _answer_letter(mapping: RecordMapping, row: Row, options: dict[str, str]) -> str:
    column = mapping.answer_column or ""
    raw = _cell(row, column, required=True)
    letters = list(options)
    expected = {
        "letter": f"one of the option letters {', '.join(letters)}",
        "index0": f"an option number from 0 to {len(letters) - 1}",
        "index1": f"an option number from 1 to {len(letters)}",
        "text": "the text of one of the options",
    }[mapping.answer_format] + (f" (loader option answer_format: {mapping.answer_format}; letter, index0, index1 "
                                "or text)")
    try:
        if mapping.answer_format == "letter":
            letter = as_text(raw).strip().upper()
        elif mapping.answer_format == "text":
            letter = next(k for k, v in options.items() if v.strip() == as_text(raw).strip())
        else:
            index = _convert(raw, "int", mapping.list_separator) - (1 if mapping.answer_format == "index1" else 0)
            if index < 0:
                raise ValueError(column)
            letter = letters[index]
    except (ValueError, TypeError, IndexError, StopIteration):
        raise ExtractError(row.file, expected, place=row.place, column=column) from None
    if letter not in options:
        raise ExtractError(row.file, expected, place=row.place, column=column)
    return letter


def _instance_id(mapping: RecordMapping, row: Row, multi_file: bool) -> str:
    if mapping.id_column:
        raw = _cell(row, mapping.id_column, required=True)
        return as_text(_typed(mapping, row, mapping.id_column, raw)).strip()
    return f"{row.file.name}:{row.position}" if multi_file else str(row.position)


def header_summary(header: list[str], known: list[str]) -> str:
    """What a header holds, naming only the columns the caller looks for (``known``: a loader's own names; where a
    spec chooses them, :func:`unnamed_header`): a header-less extract's first data row (an MRN, a name, a date of
    birth) is read as its header, so its other names are counted, never shown."""
    named = [h for h in header if h in set(known)]
    others = len(header) - len(named)
    parts = [f"found: {', '.join(named)}" if named else "found none of the spec's columns"]
    if others:
        parts.append(f"{others} other column name(s) not shown (they may be data if the header row is missing)")
    return "; ".join(parts)


def unnamed_header(header: list[str], *, has_header_row: bool = True) -> str:
    """What a header holds where a spec names the columns looked for: how many names, none shown. The spec's writer
    chooses those names, and the row read as the header may be a data row (``header_row`` on one, a header-less
    extract): naming the ones found would tell which guesses of a patient's values (a century of dates of birth,
    listed as columns) that row holds. A file with no header row (Parquet, JSON, a DuckDB table) has columns, named
    no more than a CSV's, with no header row to point to."""
    if not has_header_row:
        return f"the file has {len(header)} column(s), not named here"
    return (f"the header has {len(header)} column name(s), not shown: they may be data if the header row is missing "
            "or not the row read")


def check_columns(table: Table, columns: list[str], optional: Iterable[str] = ()) -> None:
    """Each file has every column the mapping reads, and none of them, nor an ``optional`` one it has (a column of
    ``optional_fields``), is binary data that is not text or holds an Excel error cell."""
    for file, header in table.headers.items():
        present = set(header)
        binary = table.binary.get(file, {})
        errors = table.error_cells.get(file, {})
        header_row = table.header_rows.get(file)
        # A report export's title above the header is read as the header: say where the header was read from.
        hint = "" if header_row is None else (f"; the header was read from row {header_row}: if the column names are "
                                              "on another row, below a title, set loader option header_row to it")
        for column in columns:
            if column not in present:
                found = unnamed_header(header, has_header_row=header_row is not None)
                raise ExtractError(file, f"a column named {column!r} ({found}{hint})", column=column)
            if column in binary:
                raise binary_not_text(file, column, *binary[column])
            if column in errors:
                raise excel_error(file, column, errors[column])
        for column in optional:
            if column in binary:
                raise binary_not_text(file, column, *binary[column])
            if column in errors:
                raise excel_error(file, column, errors[column])


def build_instances(spec: BenchmarkSpec, table: Table, mapping: RecordMapping) -> tuple[list[Instance], Counter[str]]:
    """Validate every row and build its instance(s); raises on the first problem."""
    check_columns(table, mapping.required_columns(), mapping.optional_fields.values())
    skipped: Counter[str] = Counter(table.skipped)
    multi_file = len(table.headers) > 1
    instances: list[Instance] = []
    first_row: dict[str, Row] = {}  # instance id -> the row that gave it
    for row in table.rows:
        if mapping.skip_blank_rows and all(is_blank(v) for v in row.values.values()):
            skipped["blank row"] += 1
            continue
        for instance in _row_instances(spec, mapping, row, multi_file):
            earlier = first_row.setdefault(instance.id, row)
            if earlier is not row:
                raise ExtractError(row.file, f"unique instance ids (this row's id is the id of {_where(earlier, row)})",
                                   place=row.place, column=mapping.id_column)
            instances.append(instance)
    return instances, skipped


def _where(earlier: Row, row: Row) -> str:
    """The earlier row, named so that it can be found from the later one's error."""
    place = str(earlier.place) if earlier.place is not None else "the record"
    return place if earlier.file == row.file else f"{place} of {earlier.file}"


def _row_instances(spec: BenchmarkSpec, mapping: RecordMapping, row: Row, multi_file: bool) -> list[Instance]:
    for column, kind in mapping.types.items():
        value = row.values.get(column)
        if not is_blank(value):
            convert(value, kind, row.file, row.place, column, mapping.list_separator)
    instance_id = _instance_id(mapping, row, multi_file)
    fields = dict(mapping.constant_fields)
    def no_value(value: Any) -> bool:
        return is_blank(value) or (isinstance(value, str) and value.strip() in mapping.null_values)

    for name, column in mapping.fields.items():
        value = _cell(row, column, required=True)
        if no_value(value):
            raise ExtractError(row.file, "a value (not one of null_values)", place=row.place, column=column)
        fields[name] = as_text(value)
    for name, column in mapping.optional_fields.items():
        value = row.values.get(column)
        fields[name] = "" if no_value(value) else as_text(value)
    for name, field_view in mapping.view_fields.items():
        fields[name] = render_view(_cell(row, field_view.column, required=True), field_view.view)
    meta: dict[str, Any] = dict(mapping.meta_constants)
    for key, column in mapping.meta.items():
        value = row.values.get(column)
        if no_value(value):
            meta[key] = None
        else:
            meta[key] = _json_safe(_typed(mapping, row, column, value))
    label: str | None = None
    if mapping.options_column or mapping.option_columns:
        options = _options(mapping, row)
        fields["options"] = "\n".join(f"{letter}. {text}" for letter, text in options.items())
        meta["options"] = options
        if mapping.answer_column:
            letter = _answer_letter(mapping, row, options)
            label = canonical_label(spec, letter, row.file, row.place, mapping.answer_column)
    if mapping.label_column:
        raw = _cell(row, mapping.label_column, required=True)
        label = canonical_label(spec, as_text(raw), row.file, row.place, mapping.label_column)
    references = _references(mapping, row, mapping.reference_columns, required=True)
    if mapping.reference_list_column:
        raw = _cell(row, mapping.reference_list_column, required=True)
        references = convert(raw, "list", row.file, row.place, mapping.reference_list_column, mapping.list_separator)
        if not references:
            raise ExtractError(row.file, "a non-empty list", place=row.place, column=mapping.reference_list_column)
    if not mapping.variants:
        if not references and label is not None and not mapping.reference_columns:
            references = [label]
        return [
            Instance(
                benchmark=spec.id,
                id=instance_id,
                fields=fields,
                references=references,
                label=label,
                meta=meta,
            )
        ]
    out = []
    for variant in mapping.variants:
        v_fields = dict(fields)
        for name, column in variant.fields.items():
            v_fields[name] = as_text(_cell(row, column, required=True))
        v_label = label
        if variant.label is not None:
            v_label = canonical_label(spec, variant.label, row.file, row.place, f"variant {variant.suffix}")
        v_refs = _references(mapping, row, variant.reference_columns, required=True) or list(references)
        if not v_refs and v_label is not None:
            v_refs = [v_label]
        out.append(
            Instance(
                benchmark=spec.id,
                id=f"{instance_id}:{variant.suffix}",
                fields=v_fields,
                references=v_refs,
                label=v_label,
                meta={**meta, "variant": variant.suffix},
            )
        )
    return out


def _references(mapping: RecordMapping, row: Row, columns: list[str], *, required: bool) -> list[str]:
    """Gold outputs from ``columns``: a blank cell is an error; ``empty_reference_values`` mean none."""
    references = []
    empty = {v.strip().lower() for v in mapping.empty_reference_values}
    for column in columns:
        text = as_text(_cell(row, column, required=required) or "").strip()
        if text and text.lower() not in empty:
            references.append(text)
    return references


def _json_safe(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):  # a whole number (HUGEINT, NUMBER(19,0)) stays exact; through a float it would not
        return int(value) if value.as_tuple().exponent == 0 else float(value)
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if hasattr(value, "tolist"):
        return _json_safe(value.tolist())
    return value
