"""Reading native files into rows: strict UTF-8 (or UTF-16 with a byte-order mark), gzip-aware, and every failure
an :class:`ExtractError`.

Formats: CSV, TSV, JSON (a list of objects, or an object holding one under ``records_key``), JSONL, Parquet,
Feather/Arrow IPC, Excel ``.xlsx`` and a DuckDB table or query. A ``.gz`` suffix on the text formats is read
through gzip. Each row carries its :class:`~medhelm_local.errors.Place`, the way a user finds it in the file:
a CSV's, TSV's or sheet's row as a spreadsheet numbers it (the header row 1), a JSON Lines file's line, and
elsewhere the record's number from 1.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import json
import os
import re
import sys
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from medhelm_local.errors import ConfigError, ExtractError, Place
from medhelm_local.jsontext import lone_surrogate_line

# One CSV/TSV field (a discharge summary can be long) is capped at this many MiB by default; appliance.yaml
# loaders.csv_field_max_mib or env MEDHELM_CSV_FIELD_MAX_MIB changes it (1 to MAX_CSV_FIELD_MIB).
DEFAULT_CSV_FIELD_MIB = 16
MAX_CSV_FIELD_MIB = 1024
CSV_FIELD_ENV = "MEDHELM_CSV_FIELD_MAX_MIB"
_csv_field_max: ContextVar[int] = ContextVar("csv_field_max_mib", default=DEFAULT_CSV_FIELD_MIB)

TEXT_FORMATS = ("csv", "tsv", "json", "jsonl")
FORMATS = (*TEXT_FORMATS, "parquet", "feather", "xlsx", "duckdb")
_SUFFIX_FORMAT = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".feather": "feather",
    ".arrow": "feather",
    ".ipc": "feather",
    ".xlsx": "xlsx",
    ".duckdb": "duckdb",
    ".ddb": "duckdb",
    ".db": "duckdb",
}


@dataclass
class Row:
    """One record: ``position`` is its 0-based index among the file's records (instance ids are made of it),
    ``place`` where a user finds it (errors say this); None when the whole file is the record."""

    file: Path
    position: int
    values: dict[str, Any]
    place: Place | None


@dataclass
class FileRows:
    """One file's header, its rows, and where each row is in the file; ``binary``: column -> (its type, the first
    record whose bytes are not UTF-8 text) for a binary column that could not be read as text."""

    header: list[str]
    rows: list[dict[str, Any]]
    places: list[Place]
    binary: dict[str, tuple[str, Place]] = field(default_factory=dict)
    header_row: int | None = None  # the row the header was read from, in a file of rows (CSV, TSV, a sheet)
    error_cells: dict[str, Place] = field(default_factory=dict)  # column -> its first Excel error cell (#N/A...)


def numbered(rows: list[dict[str, Any]], unit: str = "record") -> list[Place]:
    """Places for records a file has no lines or rows to number by: ``record 1``, ``record 2``, ..."""
    return [Place.record(i + 1, unit) for i in range(len(rows))]


@dataclass
class Table:
    """Rows read from one or more files, with each file's header for column checks."""

    files: list[Path]
    headers: dict[Path, list[str]] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    binary: dict[Path, dict[str, tuple[str, Place]]] = field(default_factory=dict)
    header_rows: dict[Path, int] = field(default_factory=dict)
    error_cells: dict[Path, dict[str, Place]] = field(default_factory=dict)

    def extend(self, file: Path, read: FileRows) -> None:
        if file not in self.files:
            self.files.append(file)
        self.headers[file] = read.header
        self.binary[file] = read.binary
        self.error_cells[file] = read.error_cells
        if read.header_row is not None:
            self.header_rows[file] = read.header_row
        self.rows.extend(Row(file, i, r, place) for i, (r, place) in enumerate(zip(read.rows, read.places,
                                                                                      strict=True)))


def detect_format(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    fmt = _SUFFIX_FORMAT.get(suffixes[-1]) if suffixes else None
    if fmt is None:
        # Excel's "Unicode Text" and many report tools save tab-separated text as .txt.
        raise ExtractError(path, f"a file ending in one of {', '.join(sorted(_SUFFIX_FORMAT))} (optionally .gz), or "
                                 f"the format named with loader option format ({', '.join(FORMATS)}; Excel's "
                                 "\"Unicode Text\" .txt is tsv)")
    return fmt


def read_bytes(path: Path) -> bytes:
    """The file's bytes, decompressed when it ends in ``.gz``; a truncated or damaged gzip is an error."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ExtractError(path, f"a readable file ({exc.strerror or type(exc).__name__})") from None
    if path.suffix.lower() == ".gz":
        if not data:
            raise ExtractError(path, "a non-empty file")
        if not data.startswith(b"\x1f\x8b"):
            raise ExtractError(path, "a gzip-compressed file, as its name ending .gz says (it is not compressed: "
                                     "name it without the .gz)")
        try:
            data = gzip.decompress(data)
        except (EOFError, gzip.BadGzipFile, zlib.error):
            raise ExtractError(path, "a complete gzip stream (the file is truncated or damaged)") from None
    return data


# Files a text format cannot read, by their first bytes: named as what they are (a gzip named .csv was
# "invalid byte at line 1, offset 1"), with what to do.
_BINARY_FORMATS = (
    (b"\x1f\x8b", "gzip-compressed: name it {name}.gz, or decompress it"),
    (b"PK\x03\x04", "a ZIP archive, as an Excel workbook is: name a workbook .xlsx, or unzip an archive"),
    (b"PAR1", "a Parquet file: name it .parquet"),
    (b"ARROW1", "an Arrow IPC (Feather) file: name it .feather"),
    (b"\xd0\xcf\x11\xe0", "an old Excel .xls workbook (or another Office file): save it as .xlsx or CSV UTF-8"),
    (codecs.BOM_UTF32_LE, "UTF-32 text, as its byte-order mark says: save it again as UTF-8"),
    (codecs.BOM_UTF32_BE, "UTF-32 text, as its byte-order mark says: save it again as UTF-8"),
)


def decode_utf8(path: Path, data: bytes) -> str:
    """UTF-8 text (a BOM dropped); a file that begins with a UTF-16 byte-order mark (SQL Server's and Excel's
    "Unicode" exports) is read as UTF-16, which that mark makes unambiguous. A NUL byte is refused: UTF-16 without
    its mark, or a damaged file (a copy cut short and padded with zeros), never text a prompt should hold."""
    if not data or data.isspace():
        raise ExtractError(path, "a non-empty file")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) and not data.startswith(codecs.BOM_UTF32_LE):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise ExtractError(path, f"UTF-16 text, as its byte-order mark says (invalid data at offset {exc.start})"
                               ) from None
    nul = data.find(b"\x00")
    if nul >= 0:
        _refuse_binary(path, data)
        if b"\x00" in (data[:1], data[1:2]):
            raise ExtractError(path, "UTF-8 text (the file looks like UTF-16 without its byte-order mark: save it "
                                     "again as UTF-8, Excel's \"CSV UTF-8\")")
        line = data.count(b"\n", 0, nul) + 1
        raise ExtractError(path, f"UTF-8 text without NUL bytes (one at line {line}, offset {nul}: the file is "
                                 "damaged, e.g. a copy cut short and padded with zeros)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        _refuse_binary(path, data)
        line = data[: exc.start].count(b"\n") + 1
        raise ExtractError(path, f"UTF-8 text (invalid byte at line {line}, offset {exc.start}; saved in a Windows or "
                                 "Latin-1 encoding? save it again as UTF-8, Excel's \"CSV UTF-8\")") from None


def _refuse_binary(path: Path, data: bytes) -> None:
    for magic, what in _BINARY_FORMATS:
        if data.startswith(magic):
            raise ExtractError(path, f"UTF-8 text (the file is {what.format(name=path.name)})")


def read_text(path: Path) -> str:
    return decode_utf8(path, read_bytes(path))


class _DuplicateKey(ValueError):
    """A JSON object naming one key twice."""


# Objects that name a key twice are refused, as a CSV header naming a column twice is: the parser keeps the last
# value without a word, so one of two columns (or two records keyed by id, as PubMedQA's) would be dropped.
_ONE_KEY_ONCE = "JSON objects that name each key once (an object here names one key twice, and only its last value " \
                "would be read)"


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _DuplicateKey
    return obj


def parse_json(path: Path, text: str) -> Any:
    line = lone_surrogate_line(text)
    if line is not None:
        raise ExtractError(path, f"valid JSON text (a \\u escape at line {line} is an unpaired surrogate, not a "
                                 "character)")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey:
        raise ExtractError(path, _ONE_KEY_ONCE) from None
    except json.JSONDecodeError as exc:
        raise ExtractError(path, f"valid JSON (parse error at line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise ExtractError(path, "JSON nested less deeply (the parser's recursion limit was reached)") from None
    except ValueError:  # an integer longer than Python reads (sys.get_int_max_str_digits())
        raise ExtractError(path, f"valid JSON numbers (an integer has more than {sys.get_int_max_str_digits()} "
                                 "digits)") from None


def csv_field_max_mib() -> int:
    """The cap on one CSV/TSV field, in MiB: env ``MEDHELM_CSV_FIELD_MAX_MIB``, else the cap set by
    :func:`csv_field_cap` (``loaders.csv_field_max_mib`` in appliance.yaml), else the default."""
    raw = os.environ.get(CSV_FIELD_ENV)
    if raw is None or not raw.strip():
        return _csv_field_max.get()
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_CSV_FIELD_MIB:
        raise ConfigError(f"env {CSV_FIELD_ENV}: expected a whole number of MiB from 1 to {MAX_CSV_FIELD_MIB}")
    return value


@contextmanager
def csv_field_cap(mib: int) -> Iterator[None]:
    """Read CSV/TSV with fields of up to ``mib`` MiB inside the block (unless the environment variable says)."""
    token = _csv_field_max.set(mib)
    try:
        yield
    finally:
        _csv_field_max.reset(token)


# A line and its ending (\n, \r\n or a lone \r), as io.StringIO(newline="") gives them to the csv reader, without
# its copy of the text: StringIO holds 4 bytes a character (a 315 MB extract took 2.0 GB to register, 1.3 GB so;
# the chart's limit is 8 GiB, past which the pod is killed without a message).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


@dataclass
class _CsvRecords:
    """Records read so far, each with the line it starts on (a quoted field may hold line breaks), and the line
    the next one starts on: where a record that cannot be read is."""

    header_row: int = 1
    records: list[tuple[list[str], int]] = field(default_factory=list)
    next_line: int = 1

    def read(self, text: str, delimiter: str, *, strict: bool) -> None:
        lines = (match.group() for match in _LINE.finditer(text))
        reader = csv.reader(lines, delimiter=delimiter, strict=strict)
        for record in reader:
            self.records.append((record, self.next_line))
            self.next_line = reader.line_num + 1

    def failing_place(self) -> Place:
        number = len(self.records) + 1
        if number <= self.header_row:
            return Place("row", number, "the header row" if number == self.header_row else "above the header row")
        return Place.sheet_row(number, number - self.header_row, self.next_line)


def _csv_rows(path: Path, text: str, delimiter: str, header_row: int = 1) -> FileRows:
    kind = "CSV" if delimiter == "," else "TSV"
    cap_mib = csv_field_max_mib()
    read = _CsvRecords(header_row)
    previous = csv.field_size_limit(cap_mib << 20)
    try:
        try:  # strict first: the lenient reader reads a quote left open into one field to the end of the file
            read.read(text, delimiter, strict=True)
        except csv.Error as exc:
            if "unexpected end of data" in str(exc):
                raise ExtractError(path, f"well-formed {kind} (a quoted field is never closed: the rest of the file "
                                         "would be read into it)", place=read.failing_place()) from None
            if "field larger than field limit" in str(exc):
                raise
            read = _CsvRecords(header_row)  # a quirk the lenient reader accepts ('"a"b'): read the file as before
            read.read(text, delimiter, strict=False)
    except csv.Error as exc:
        if "field larger than field limit" in str(exc):
            raise ExtractError(
                path,
                f"{kind} fields of at most {cap_mib} MiB ({cap_mib << 20} characters); raise the cap with "
                f"loaders.csv_field_max_mib in appliance.yaml or env {CSV_FIELD_ENV}",
                place=read.failing_place(),
            ) from None
        raise ExtractError(path, f"well-formed {kind} ({exc})", place=read.failing_place()) from None
    finally:
        csv.field_size_limit(previous)
    records = read.records
    if not records:
        raise ExtractError(path, "a header row")
    if len(records) < header_row:
        raise ExtractError(path, f"a header at row {header_row} (loader option header_row; the file has "
                                 f"{len(records)} rows)")
    header = [h.strip() for h in records[header_row - 1][0]]
    if header_row == 1 and header and header[0].lower() == "sep=" and not any(header[1:]):  # [] : a blank line
        # Excel writes "sep=;" above the header when asked to, and hides it when it opens the file.
        sep_line = '"sep=,"' if delimiter == "," else '"sep=" and a tab'
        raise ExtractError(path, f"the header in row 1 (row 1 is Excel's separator line {sep_line}: set loader option "
                                 "header_row: 2, the row the column names are in)")
    if not any(header):
        raise ExtractError(path, f"a header row naming the columns (row {header_row} is empty; loader option "
                                 "header_row names the row that holds them)")
    check_separator(path, header, delimiter)
    check_unique_header(path, header)
    named = max(i for i, h in enumerate(header) if h) + 1  # trailing unnamed columns may be left out
    separator = "comma" if delimiter == "," else "tab"
    # A report's title above the header is read as the header: its rows then seem short or long.
    title = "" if header_row != 1 else "; if row 1 is a title above the header, give the header's row with loader " \
                                       "option header_row"
    rows: list[dict[str, Any]] = []
    places: list[Place] = []
    for number, (record, line) in enumerate(records[header_row:], start=header_row + 1):
        place = Place.sheet_row(number, number - header_row, line)
        blank = not any(v.strip() for v in record)  # an empty line, or a row of empty fields: a blank row
        if not blank and len(record) < named:  # a truncated export or a missing separator: a column would be ""
            raise ExtractError(path, f"{_fields(len(header))} as in the header, found {len(record)} (the row is cut "
                                     f"short, or a {separator} is missing{title})", place=place)
        if any(v.strip() for v in record[len(header) :]):  # never dropped: it is data, or the row is misaligned
            raise ExtractError(path, f"{_fields(len(header))} as in the header, found {len(record)} (a value holding a "
                                     f"{separator} must be quoted{title})", place=place)
        rows.append({h: (record[i] if i < len(record) else "") for i, h in enumerate(header) if h})
        places.append(place)
    return FileRows([h for h in header if h], rows, places, header_row=header_row)


def _fields(count: int) -> str:
    return f"{count} field" + ("" if count == 1 else "s")


# Separators a "CSV" may use instead of the one its format reads, and what to do about each.
_OTHER_SEPARATORS = {
    ";": ("semicolon", "save it again as \"CSV UTF-8 (comma delimited)\" (Excel writes ';' where the decimal mark is a "
                       "comma), or as .xlsx"),
    "\t": ("tab", "name it .tsv, or set the loader option format: tsv"),
    ",": ("comma", "name it .csv, or set the loader option format: csv"),
    "|": ("pipe", "save it again with commas (CSV) or tabs (.tsv)"),
}


def check_separator(path: Path, header: list[str], delimiter: str) -> None:
    """A header read as one column that holds another separator: the file is separated by that one, and each row
    would be read as a single column; say so, naming the separator only (the header may be a data row)."""
    if len(header) != 1:
        return
    for separator, (name, fix) in _OTHER_SEPARATORS.items():
        if separator != delimiter and separator in header[0]:
            kind = "CSV" if delimiter == "," else "TSV"
            raise ExtractError(path, f"{kind} columns separated by {'commas' if delimiter == ',' else 'tabs'} (the "
                                     f"header row is one column holding {name}s: the file is {name}-separated; {fix})")


def check_unique_header(path: Path, header: list[str]) -> None:
    """No two columns share a name (a row read into a dict would keep the last one's value, silently)."""
    # Positions, not names: in a header-less file the "header" is the first data row.
    duplicated = [i + 1 for i, h in enumerate(header) if h and header.index(h) != i]
    if duplicated:
        first = header.index(header[duplicated[0] - 1]) + 1
        raise ExtractError(path, f"unique column names in the header (columns {first} and {duplicated[0]}, counting "
                                 "from 1, have the same name)")


def _records(path: Path, data: Any, records_key: str | None) -> list[dict[str, Any]]:
    if records_key is not None:
        if not isinstance(data, dict) or records_key not in data:
            raise ExtractError(path, f"a JSON object with the key {records_key!r}", column=records_key)
        data = data[records_key]
    if not isinstance(data, list):
        raise ExtractError(path, "a JSON array of objects" + (f" under {records_key!r}" if records_key else ""))
    for position, item in enumerate(data):
        if not isinstance(item, dict):
            raise ExtractError(path, "a JSON object", place=Place.record(position + 1))
    return data


def _header_of(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(str(key), None)
    return list(seen)


def read_table_file(
    path: Path,
    fmt: str | None = None,
    *,
    records_key: str | None = None,
    sheet: str | None = None,
    table: str | None = None,
    query: str | None = None,
    header_row: int | None = None,
) -> FileRows:
    """Header and rows of one file. ``table``/``query`` select the rows of a DuckDB database; ``header_row``: the
    row (from 1) of a CSV, TSV or sheet that holds the header, the rows above it (a report's title) ignored."""
    fmt = fmt or detect_format(path)
    if header_row is not None and fmt not in ("csv", "tsv", "xlsx"):
        raise ExtractError(path, "a CSV, TSV or .xlsx file, the formats loader option header_row applies to")
    if fmt in ("csv", "tsv"):
        return _csv_rows(path, read_text(path), "," if fmt == "csv" else "\t", header_row or 1)
    if fmt == "json":
        rows = _records(path, parse_json(path, read_text(path)), records_key)
        return FileRows(_header_of(rows), rows, numbered(rows))
    if fmt == "jsonl":
        rows = []
        places = []
        for line_no, line in enumerate(read_text(path).split("\n"), start=1):
            if not line.strip():
                continue
            place = Place.line(line_no)
            try:
                obj = json.loads(line, object_pairs_hook=_unique_keys)
            except _DuplicateKey:
                raise ExtractError(path, _ONE_KEY_ONCE, place=place) from None
            except (ValueError, RecursionError):  # ValueError: not JSON, or an integer of too many digits
                if line.startswith("\ufeff"):  # files joined with cat: each one's byte-order mark starts a line
                    raise ExtractError(path, "one JSON object per line (this line begins with a byte-order mark: "
                                             "files joined together? remove it)", place=place) from None
                raise ExtractError(path, "one JSON object per line (this line is not JSON)", place=place) from None
            if not isinstance(obj, dict):
                raise ExtractError(path, "a JSON object on each line", place=place)
            if lone_surrogate_line(line) is not None:
                raise ExtractError(path, "valid JSON text (a \\u escape on this line is an unpaired surrogate, not a "
                                         "character)", place=place)
            rows.append(obj)
            places.append(place)
        return FileRows(_header_of(rows), rows, places)
    if fmt in ("parquet", "feather"):
        return _arrow_rows(path, fmt)
    if fmt == "xlsx":
        return _xlsx_rows(path, sheet, header_row or 1)
    if fmt == "duckdb":
        return duckdb_rows(path, table=table, query=query)
    raise ExtractError(path, f"a supported format ({', '.join(FORMATS)})")


def _arrow_rows(path: Path, fmt: str) -> FileRows:
    if path.stat().st_size == 0:
        raise ExtractError(path, "a non-empty file")
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            arrow_table = pq.read_table(path)
        else:
            import pyarrow.feather as feather

            arrow_table = feather.read_table(path)
    except Exception:  # pyarrow raises several types for damaged files
        raise ExtractError(path, f"a readable {fmt.capitalize()} file") from None
    check_unique_header(path, list(arrow_table.column_names))
    return arrow_rows(path, arrow_table)


def _is_utf8(value: bytes | None) -> bool:
    try:
        (value or b"").decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def arrow_rows(path: Path, arrow_table: Any, type_names: dict[str, str] | None = None) -> FileRows:
    """Rows of an Arrow table whose binary columns are read as strict UTF-8 text: Hive, Impala and older Spark write
    string columns as binary, and DuckDB reads those into BLOB columns (``read_parquet`` keeps them binary), whose
    cells would otherwise reach a prompt as ``b'...'``. A binary column holding bytes that are not UTF-8 (an image,
    another encoding) stays undecoded and is named in :attr:`FileRows.binary`, refused if the spec uses it.
    ``type_names``: column -> its type as the source names it (DuckDB's ``BLOB``), for the error."""
    import pyarrow as pa

    binary: dict[str, tuple[str, Place]] = {}
    for index, column_field in enumerate(arrow_table.schema):
        kind = column_field.type
        large = pa.types.is_large_binary(kind)
        if not (pa.types.is_binary(kind) or large or pa.types.is_fixed_size_binary(kind)
                or pa.types.is_binary_view(kind)):
            continue
        column = arrow_table.column(index)
        try:
            text = column.cast(pa.large_binary() if large else pa.binary()).cast(
                pa.large_string() if large else pa.string())
        except pa.ArrowInvalid:  # Arrow validates UTF-8 when it casts
            first = next(i for i, value in enumerate(column.to_pylist()) if not _is_utf8(value))
            binary[column_field.name] = ((type_names or {}).get(column_field.name, str(kind)), Place.record(first + 1))
            continue
        arrow_table = arrow_table.set_column(index, column_field.name, text)
    rows = arrow_table.to_pylist()
    return FileRows(list(arrow_table.column_names), rows, numbered(rows), binary)


def binary_not_text(file: Path, column: str, kind: str, place: Place) -> ExtractError:
    """The error for a binary column read as text whose bytes are not UTF-8 (never the bytes)."""
    return ExtractError(file, f"text (the column is of type {kind}, and the bytes of this cell are not UTF-8 text)",
                        place=place, column=column)


def _xlsx_rows(path: Path, sheet: str | None, header_row: int = 1) -> FileRows:
    import zipfile

    from openpyxl import load_workbook
    from openpyxl.utils.exceptions import InvalidFileException

    if path.stat().st_size == 0:
        raise ExtractError(path, "a non-empty file")
    try:
        workbook = load_workbook(path, read_only=True, data_only=True)
    except (zipfile.BadZipFile, OSError, KeyError, ValueError, InvalidFileException):  # the last: not named .xlsx
        try:
            with path.open("rb") as handle:
                ole = handle.read(4) == b"\xd0\xcf\x11\xe0"
        except OSError:
            ole = False
        # An OLE container: a workbook protected by a password or a sensitivity label (Office encrypts it so), or .xls.
        raise ExtractError(path, "a readable Excel .xlsx workbook" + (
            " (this file is encrypted, by a password or a sensitivity label, or an old .xls: save it as .xlsx "
            "without protection)" if ole else "")) from None
    try:
        if sheet is not None and sheet not in workbook.sheetnames:
            raise ExtractError(path, f"a worksheet named {sheet!r}")
        worksheet = workbook[sheet] if sheet else workbook.worksheets[0]
        # Read-only mode reads no further than the sheet's recorded <dimension>, which tools that fill a template
        # or stream rows leave stale: the rows and columns past it would be dropped without a word. Read them all.
        worksheet.reset_dimensions()
        values, errors = [], []
        for row in worksheet.iter_rows():
            values.append([_cell_value(cell) for cell in row])
            errors.append([i for i, cell in enumerate(row) if cell.data_type == "e"])
    finally:
        workbook.close()
    if not values:
        raise ExtractError(path, "a non-empty worksheet")
    if len(values) < header_row:
        raise ExtractError(path, f"a header at row {header_row} (loader option header_row; the sheet has "
                                 f"{len(values)} rows)")
    header = [str(h).strip() if h is not None else "" for h in values[header_row - 1]]
    if not any(header):
        raise ExtractError(path, f"a header row naming the columns (row {header_row} is empty; loader option "
                                 "header_row names the row that holds them)")
    check_unique_header(path, header)
    rows = [{h: (r[i] if i < len(r) else None) for i, h in enumerate(header) if h} for r in values[header_row:]]
    places = [Place.sheet_row(header_row + 1 + i, i + 1) for i in range(len(rows))]
    error_cells: dict[str, Place] = {}
    for place, columns in zip(places, errors[header_row:], strict=True):
        for i in columns:
            if i < len(header) and header[i]:
                error_cells.setdefault(header[i], place)
    return FileRows([h for h in header if h], rows, places, header_row=header_row, error_cells=error_cells)


def excel_error(file: Path, column: str, place: Place) -> ExtractError:
    """The error for a sheet's cell that holds an Excel error (#N/A, #DIV/0!, #VALUE!...) in a column the spec reads:
    read as text, "#DIV/0!" reached the prompt as the patient's note."""
    return ExtractError(file, "a value, not an Excel error (#N/A, #DIV/0!, #VALUE!...: a formula that failed; fix it "
                              "or clear the cell)", place=place, column=column)


def _cell_value(cell: Any) -> Any:
    """A cell's value as the sheet shows it. openpyxl reads a cell with a date format as a datetime (never the serial
    number, 45292); one whose format shows a date and no time ("m/d/yy", "dd.mm.yyyy") is that date, not a datetime
    at midnight (a prompt read "2024-01-01T00:00:00" for a cell Excel shows as 1/1/24)."""
    from openpyxl.styles.numbers import is_datetime

    value = cell.value
    if isinstance(value, datetime) and is_datetime(cell.number_format) == "date":
        return value.date()
    return value


def duckdb_rows(path: Path, *, table: str | None, query: str | None) -> FileRows:
    """Rows of a table or of one read-only SELECT over a DuckDB database file, on a sealed connection
    (:mod:`medhelm_local.loaders.sql_sandbox`): the query is checked before it runs and reads the file's tables only."""
    import duckdb

    from medhelm_local.loaders.sql_sandbox import check_select, query_failure, seal, sealed_connect

    if (table is None) == (query is None):
        raise ExtractError(path, "exactly one of loader option 'table' or 'query' for a DuckDB source")
    con = sealed_connect(path)
    try:
        seal(con)
        if table is not None:
            names = {r[0].lower() for r in con.execute("select table_name from duckdb_tables()").fetchall()}
            names |= {r[0].lower() for r in con.execute("select view_name from duckdb_views()").fetchall()}
            if table.lower() not in names:
                raise ExtractError(path, f"a table or view named {table!r} (loader option table)")
            try:
                relation = con.table(table)
            except duckdb.Error as exc:
                raise query_failure(exc, path, "table", "a table that can be read") from None
        else:
            sql = check_select(con, query, where=path, option="query")
            try:
                relation = con.sql(sql)
            except duckdb.Error as exc:
                raise query_failure(exc, path, "query", "a valid SQL query") from None
        if relation is None:
            raise ExtractError(path, "a query that returns rows")
        header = [str(c) for c in relation.columns]
        check_unique_header(path, header)
        try:
            # Through Arrow: DuckDB's own conversion of a TIMESTAMPTZ needs pytz (not installed), and refused the
            # whole table; Arrow gives a datetime in its zone through the standard library, as for Parquet.
            arrow_table = relation.to_arrow_table()
        except duckdb.Error as exc:
            raise query_failure(exc, path, "table" if query is None else "query", "a query that runs") from None
        return arrow_rows(path, arrow_table, dict(zip(header, map(str, relation.types), strict=True)))
    finally:
        con.close()
