"""Row-shaped files and databases: the public benchmarks shipped as tables and "bring your own extract".

One loader, ``private_table`` (alias ``table``), reads CSV, TSV, JSON, JSONL (each optionally ``.gz``),
Parquet, Feather, ``.xlsx``, or a table or SQL query of a DuckDB database, from one file or a folder of files,
and maps rows to instances with a :class:`~medhelm_local.loaders.records.RecordMapping`.

``spec.loader_options`` = the mapping's keys plus:
  ``format``: force a format (default: from the file suffix); ``glob``: files to read in a folder;
  ``records_key``: JSON key holding the array of records (ACI-Bench: ``data``); ``sheet``: Excel sheet;
  ``header_row``: the row (from 1, as a spreadsheet numbers it) of a CSV, TSV or sheet holding the column names,
  the rows above it (a report's title, its date) ignored [1];
  ``table`` / ``query``: DuckDB source; ``sibling_files``: meta key -> glob of a file beside the data whose
  absolute path goes into each instance's meta (EHRSQL: the SQLite database, meta ``db_path``);
  ``sibling_text``: template field -> glob of a UTF-8 text file beside the data (EHRSQL: the schema), or
  ``{glob, view}`` with a view of its text (``create_table_statements``: HELM's EHRSQL schema).
  Legacy ``columns`` (field -> column, ``label`` special) is accepted too.

Meta keys set: those named in ``meta`` / ``meta_constants`` / ``sibling_files``, ``options`` for
multiple-choice rows ({letter: text}), ``variant`` for rows that give several instances.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError, ExtractError
from medhelm_local.loaders.base import LoadResult, register_loader
from medhelm_local.loaders.io import FORMATS, Table, detect_format, read_table_file, read_text
from medhelm_local.loaders.paths import confined_glob, extract_folder
from medhelm_local.loaders.records import build_instances, parse_mapping

READER_KEYS = ("format", "glob", "records_key", "sheet", "header_row", "table", "query", "sibling_files",
               "sibling_text")
DEFAULT_COLUMNS = {"question": "prompt", "context": "context", "label": "label"}


def split_options(spec: BenchmarkSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """Reader options and mapping options from ``spec.loader_options``."""
    options = dict(spec.loader_options)
    reader = {k: options.pop(k) for k in READER_KEYS if k in options}
    columns = options.pop("columns", None)
    if columns is None and not _has_mapping(options):
        columns = DEFAULT_COLUMNS
    if columns:
        columns = dict(columns)
        label = columns.pop("label", None)
        if label and "label_column" not in options:
            options["label_column"] = label
        options["fields"] = {**columns, **options.get("fields", {})}
    fmt = reader.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise BadInputError(f"benchmark {spec.id}: loader option format must be one of {', '.join(FORMATS)}")
    header_row = reader.get("header_row")
    if header_row is not None and (isinstance(header_row, bool) or not isinstance(header_row, int) or header_row < 1):
        raise BadInputError(f"benchmark {spec.id}: loader option header_row must be a row number from 1 (the row "
                            "of a CSV, TSV or sheet that holds the column names)")
    return reader, options


def _has_mapping(options: dict[str, Any]) -> bool:
    return any(
        k in options
        for k in (
            "fields",
            "options_column",
            "option_columns",
            "label_column",
            "reference_columns",
            "reference_list_column",
        )
    )


def data_files(path: Path, pattern: str | None, fmt: str | None = None) -> list[Path]:
    """The data files of ``path``: itself, or the folder's files matching ``pattern`` (default: files whose
    suffix is of ``fmt``, or of any supported format), so that a LICENSE or README beside the data is ignored."""
    if not path.is_dir():
        return [path]
    matches = confined_glob(path, "*" if pattern is None else pattern, "glob")
    candidates = [p for p in matches if p.is_file() and not p.name.startswith(".")]
    if pattern is None:
        candidates = [p for p in candidates if _format_of(p) is not None and (fmt is None or _format_of(p) == fmt)]
    if not candidates:
        raise ExtractError(path, f"at least one {fmt or 'data'} file matching {pattern or '*'!r} in the folder")
    return candidates


def _format_of(path: Path) -> str | None:
    try:
        return detect_format(path)
    except ExtractError:
        return None


def sibling(path: Path, pattern: object, option: str = "sibling_files") -> Path:
    """The one file matching ``pattern`` in the extract's folder; it must resolve inside that folder."""
    folder = extract_folder(path)
    matches = [p for p in confined_glob(folder, pattern, option) if p.is_file()]
    if len(matches) != 1:
        raise ExtractError(folder, f"exactly one file matching {pattern!r} beside the data (found {len(matches)})")
    return matches[0].resolve()


def read_table(path: Path, reader: dict[str, Any]) -> Table:
    fmt = reader.get("format")
    pattern = reader.get("glob")
    if fmt == "duckdb" or (not path.is_dir() and path.suffix.lower() in (".duckdb", ".ddb")):
        files = [path]
    else:
        files = data_files(path, pattern, fmt)
    table = Table(files=[])
    for file in files:
        read = read_table_file(
            file,
            fmt,
            records_key=reader.get("records_key"),
            sheet=reader.get("sheet"),
            table=reader.get("table"),
            query=reader.get("query"),
            header_row=reader.get("header_row"),
        )
        table.extend(file, read)
    return table


def create_table_statements(sql: str) -> str:
    """The ``CREATE TABLE`` statements of an SQL script, each line stripped, a blank line between statements:
    the schema as HELM's EhrSqlScenario.extract_schema puts it into MedHELM's EHRSQL prompt."""
    statements, current, inside = [], [], False
    for raw in sql.splitlines():
        line = raw.strip()
        if line.startswith("CREATE TABLE"):
            inside, current = True, [line]
        elif inside:
            current.append(line)
            if line.endswith(";"):
                inside = False
                statements.append("\n".join(current))
    return "\n\n".join(statements)


TEXT_VIEWS = {"create_table_statements": create_table_statements}


def text_view(text: str, view: str | None, file: Path) -> str:
    if view is None:
        return text
    if view not in TEXT_VIEWS:
        raise ExtractError(file, f"a sibling_text view among {sorted(TEXT_VIEWS)}, got {view!r}")
    return TEXT_VIEWS[view](text)


def _option_map(reader: dict[str, Any], option: str) -> dict[str, Any]:
    value = reader.get(option) or {}
    if not isinstance(value, dict):
        raise BadInputError(f"loader option {option}: expected a mapping of name -> file name or glob pattern")
    return value


@register_loader("private_table")
@register_loader("table")
def load_table(spec: BenchmarkSpec, path: Path) -> LoadResult:
    reader, options = split_options(spec)
    mapping = parse_mapping(spec, options)
    table = read_table(path, reader)
    base = path if path.is_dir() else path.parent
    extra_files: list[Path] = []
    for key, pattern in _option_map(reader, "sibling_files").items():
        found = sibling(base, pattern, f"sibling_files.{key}")
        mapping.meta_constants[key] = str(found)
        extra_files.append(found)
    for name, source in _option_map(reader, "sibling_text").items():
        if isinstance(source, dict):
            pattern, view = source.get("glob"), source.get("view")
        else:
            pattern, view = source, None
        found = sibling(base, pattern, f"sibling_text.{name}")
        mapping.constant_fields[name] = text_view(read_text(found), view, found)
        extra_files.append(found)
    instances, skipped = build_instances(spec, table, mapping)
    return LoadResult(instances=instances, files=[*table.files, *extra_files], skipped=skipped)
