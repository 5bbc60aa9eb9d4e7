"""EHRSHOT in MEDS format: coded patient timelines and yes/no prediction labels, read with DuckDB.

Folder layout (MEDS v0.3):
  ``data/**/*.parquet``: events ``subject_id, time, code, numeric_value`` (``text_value`` optional; a null
  ``time`` is a static event such as sex or birth);
  ``metadata/subject_splits.parquet``: ``subject_id, split``; ``metadata/codes.parquet`` (optional):
  ``code, description``;
  ``labels/<task>.parquet`` or ``labels/<task>/*.parquet``: ``subject_id, prediction_time, boolean_value``.
Each file's columns are checked before the files are read together, a column of another type refused naming its
file and column: ``subject_id`` an integer, ``time``/``prediction_time`` a timestamp without a time zone (or a
date), ``code``/``description``/``split`` text, ``numeric_value`` a number (these two may also be all missing,
Parquet's null type; ``boolean_value``: a boolean, checked per row).

``loader_options``: ``split`` (keep subjects of this split; null keeps all) [held_out], ``tasks`` (label
names to use; default all), ``task_questions`` (task -> question), ``max_context_tokens`` [6000],
``max_events`` [2000: most recent events fetched per prediction before the token budget is applied].

One instance per label row with a non-null ``boolean_value``; id ``<task>:<subject_id>:<prediction_time>``, the
time as ``2020-01-01T12:30``, with seconds and a fraction when it has them (``12:30:45``, ``12:30:45.250``).
Fields: ``timeline`` (events up to the prediction time, oldest first, truncated keeping the most recent),
``question``. Label: ``yes``/``no``. Meta: ``task``, ``subject_id``, ``prediction_time``, ``n_events``,
``events_dropped``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import ExtractError, Place
from medhelm_local.loaders.base import LoadResult, register_loader
from medhelm_local.loaders.io import Row, Table, arrow_rows, binary_not_text
from medhelm_local.loaders.paths import inside
from medhelm_local.loaders.records import (
    RecordMapping,
    build_instances,
    check_option_keys,
    header_summary,
    mapping_fields,
)
from medhelm_local.loaders.sql_sandbox import folder_reader
from medhelm_local.loaders.timeline import keep_recent_lines

MAPPING = RecordMapping(
    id_column="id",
    fields={"timeline": "timeline", "question": "question"},
    label_column="label",
    meta={
        "task": "task",
        "subject_id": "subject_id",
        "prediction_time": "prediction_time",
        "n_events": "n_events",
        "events_dropped": "events_dropped",
    },
)


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_path(path: Path) -> str:
    return _sql_literal(str(path.absolute()))


def _columns(con: duckdb.DuckDBPyConnection, source: str, where: Path) -> dict[str, str]:
    """Column -> its type, as DuckDB names it; ``NULL`` for a column of Parquet's null type (pandas writes a column
    of None so), which DuckDB reads as INTEGER."""
    try:
        columns = {r[0]: r[1] for r in con.execute(f"describe select * from read_parquet({source})").fetchall()}
        nulls = {r[0] for r in con.execute(f"select name from parquet_schema({source}) "
                                           "where logical_type = 'NullType()'").fetchall()}
    except duckdb.Error:
        raise ExtractError(where, "readable Parquet files") from None
    return {column: "NULL" if column in nulls else kind for column, kind in columns.items()}


_INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT")
# What a MEDS column the loader reads must hold: the words an error uses, and whether DuckDB's type for it fits.
# A type is checked per file, before the files are read together: a shard with subject_id as text, or a code
# written as a number, failed in the join, blamed on the label file and naming no column.
_MEDS_TYPES: dict[str, tuple[str, Callable[[str], bool]]] = {
    "subject_id": ("integers", lambda kind: kind in _INTEGERS),
    "time": ("timestamps without a time zone", lambda kind: kind == "DATE" or (
        kind.startswith("TIMESTAMP") and "TIME ZONE" not in kind)),
    "prediction_time": ("timestamps without a time zone", lambda kind: kind == "DATE" or (
        kind.startswith("TIMESTAMP") and "TIME ZONE" not in kind)),
    "code": ("text", lambda kind: kind in ("VARCHAR", "BLOB")),
    "numeric_value": ("numbers", lambda kind: kind in (*_INTEGERS, "FLOAT", "DOUBLE", "NULL")
                      or kind.startswith("DECIMAL")),
    "description": ("text", lambda kind: kind in ("VARCHAR", "BLOB", "NULL")),  # NULL: every code undescribed
    "split": ("text", lambda kind: kind in ("VARCHAR", "BLOB")),
}


def _require(columns: dict[str, str], needed: list[str], where: Path) -> None:
    """Each of ``needed`` is a column of ``where`` of its MEDS type (:data:`_MEDS_TYPES`)."""
    for column in needed:
        if column not in columns:
            raise ExtractError(where, f"a column named {column!r} ({header_summary(list(columns), needed)})",
                               column=column)
        if column in _MEDS_TYPES:
            words, fits = _MEDS_TYPES[column]
            if not fits(columns[column]):
                raise ExtractError(where, f"a column of {words} (it is of type {columns[column]})",
                                   column=column)


def _label_files(root: Path, tasks: list[str] | None) -> dict[str, tuple[Path, list[Path]]]:
    folder = root / "labels"
    if not folder.is_dir():
        raise ExtractError(root, "a labels/ folder of <task>.parquet files")
    found: dict[str, tuple[Path, list[Path]]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.is_file() and entry.suffix == ".parquet":
            found[entry.stem] = (entry, [entry])
        elif entry.is_dir():
            parts = sorted(entry.glob("*.parquet"))
            if parts:
                found[entry.name] = (entry, parts)
    if tasks is not None:
        missing = [t for t in tasks if t not in found]
        if missing:
            raise ExtractError(folder, f"label files for the tasks {', '.join(missing)}")
        found = {t: found[t] for t in tasks}
    if not found:
        raise ExtractError(folder, "at least one <task>.parquet label file")
    return found


def _fmt_time(value: Any) -> str:
    """A time to the minute, with its seconds and fraction of a second when it has them: cut to the minute, two
    predictions of one subject within a minute had one id, and a prediction at 12:30:45 read "12:30" above events
    of 12:30:30."""
    if not isinstance(value, datetime):
        return str(value)
    if value.microsecond:
        spec = "milliseconds" if value.microsecond % 1000 == 0 else "microseconds"
    else:
        spec = "seconds" if value.second else "minutes"
    return value.isoformat(sep=" ", timespec=spec)


def _event_line(time: Any, code: str, description: str | None, numeric: Any, text: Any) -> str:
    name = f"{description} ({code})" if description else code
    value = ""
    if numeric is not None:
        value = f" = {numeric:g}" if isinstance(numeric, float) else f" = {numeric}"
    elif text:
        value = f" = {text}"
    return f"{_fmt_time(time)} | {name}{value}"


@register_loader("ehrshot_meds", gives=mapping_fields(MAPPING))
def load_meds(spec: BenchmarkSpec, path: Path) -> LoadResult:
    check_option_keys(spec, {"split", "tasks", "task_questions", "max_context_tokens", "max_events"})
    options = spec.loader_options
    root = path if path.is_dir() else path.parent
    split = options.get("split", "held_out")
    questions: dict[str, str] = dict(options.get("task_questions") or {})
    budget = int(options.get("max_context_tokens", 6000))
    max_events = int(options.get("max_events", 2000))
    data_dir = root / "data"
    data_files = sorted(data_dir.rglob("*.parquet")) if data_dir.is_dir() else []
    if not data_files:
        raise ExtractError(root, "a data/ folder of MEDS event Parquet files")
    labels = _label_files(root, options.get("tasks"))
    splits_file = root / "metadata" / "subject_splits.parquet"
    codes_file = root / "metadata" / "codes.parquet"
    files = list(data_files)
    # Every file read resolves inside the folder (a symlink out of it is refused), as DuckDB checks names only.
    for file in [*data_files, *(p for _, parts in labels.values() for p in parts), splits_file, codes_file]:
        if file.exists() or file.is_symlink():
            inside(file, root, "a MEDS file")

    con = folder_reader(root)
    try:
        data_source = "[" + ", ".join(_sql_path(f) for f in data_files) + "]"
        # Each shard has the MEDS columns; text_value is optional, so shards are read by column name, not position.
        data_columns: set[str] = set()
        for file in data_files:
            columns = _columns(con, _sql_path(file), file)
            _require(columns, ["subject_id", "time", "code", "numeric_value"], file)
            data_columns.update(columns)
        text_value = "text_value" if "text_value" in data_columns else "null"
        con.execute(
            f"create temp view events as select subject_id, time, code, numeric_value, "
            f"{text_value} as text_value from read_parquet({data_source}, union_by_name = true)"
        )
        if codes_file.is_file():
            _require(_columns(con, _sql_path(codes_file), codes_file), ["code", "description"], codes_file)
            con.execute(
                f"create temp view codes as select code, any_value(description) as description "
                f"from read_parquet({_sql_path(codes_file)}) group by code"
            )
            files.append(codes_file)
        else:
            con.execute("create temp table codes (code varchar, description varchar)")
        if split is not None:
            if not splits_file.is_file():
                raise ExtractError(root, "metadata/subject_splits.parquet (or loader option split: null)")
            _require(_columns(con, _sql_path(splits_file), splits_file), ["subject_id", "split"], splits_file)
            con.execute(
                f"create temp view keep as select distinct subject_id from "
                f"read_parquet({_sql_path(splits_file)}) where split = {_sql_literal(str(split))}"
            )
            files.append(splits_file)
        else:
            con.execute("create temp view keep as select distinct subject_id from events")
        table = Table(files=[])
        for task, (where, parts) in labels.items():
            _task_rows(con, table, task, where, parts, data_files, codes_file, questions, budget, max_events)
            files.extend(parts)
    finally:
        con.close()
    instances, skipped = build_instances(spec, table, MAPPING)
    return LoadResult(instances=instances, files=files, skipped=skipped)


def _text(value: Any, column: str, files: list[Path]) -> Any:
    """A cell of a binary column read as UTF-8 text, as the table loader reads one (Hive and Spark write text so)."""
    if not isinstance(value, bytes):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise _not_text(column, files) from None


def _not_text(column: str, files: list[Path]) -> ExtractError:
    """The error naming the first file and record whose ``column`` holds bytes that are not UTF-8."""
    import pyarrow.parquet as pq

    for file in files:
        if column in pq.read_schema(file).names:
            binary = arrow_rows(file, pq.read_table(file, columns=[column])).binary
            if column in binary:
                return binary_not_text(file, column, *binary[column])
    return ExtractError(files[0].parent if files else Path("."), "UTF-8 text", column=column)


def _unreadable(con: duckdb.DuckDBPyConnection, files: list[Path], default: Path) -> Path:
    """The first of ``files`` DuckDB cannot read through (a damaged page, a column of another type than in the
    others), to name it in the error; ``default`` when each reads alone."""
    for file in files:
        try:
            con.execute(f"select count(columns(*)) from read_parquet({_sql_path(file)})").fetchall()
        except duckdb.Error:
            return file
    return default


def _task_rows(
    con: duckdb.DuckDBPyConnection,
    table: Table,
    task: str,
    where: Path,
    parts: list[Path],
    data_files: list[Path],
    codes_file: Path,
    questions: dict[str, str],
    budget: int,
    max_events: int,
) -> None:
    source = "[" + ", ".join(_sql_path(p) for p in parts) + "]"
    for part in parts:
        _require(_columns(con, _sql_path(part), part), ["subject_id", "prediction_time", "boolean_value"], part)
    try:
        # Each row's own file and 0-based place in it, counted before the split filter drops any row.
        labels = con.execute(
            f"select filename, file_row_number, subject_id, prediction_time, boolean_value "
            f"from read_parquet({source}, filename = true, file_row_number = true) "
            f"where subject_id in (select subject_id from keep) order by subject_id, prediction_time"
        ).fetchall()
        events = con.execute(
            f"""
            with l as (select distinct subject_id, prediction_time from read_parquet({source})
                       where subject_id in (select subject_id from keep)),
            e as (
                select l.subject_id, l.prediction_time, ev.time, ev.code, ev.numeric_value, ev.text_value,
                       row_number() over (partition by l.subject_id, l.prediction_time
                                          order by ev.time desc nulls last) as rn
                from l join events ev on ev.subject_id = l.subject_id
                where ev.time is null or ev.time <= l.prediction_time)
            select e.subject_id, e.prediction_time, e.time, e.code, c.description, e.numeric_value, e.text_value
            from e left join codes c on c.code = e.code
            where e.rn <= {int(max_events)} or e.time is null
            order by e.subject_id, e.prediction_time, e.time nulls first, e.code
            """
        ).fetchall()
    except duckdb.OutOfMemoryException:
        raise ExtractError(where, "label and event files that fit in DuckDB's memory limit (extracts are read in "
                                  "memory, never spilled to disk; give the appliance more memory)") from None
    except duckdb.Error as exc:
        raise ExtractError(_unreadable(con, [*parts, *data_files], where),
                           "label and event columns of the MEDS types (subject_id an integer; time and "
                           "prediction_time timestamps without a time zone; code text; numeric_value a number; "
                           f"boolean_value a boolean) in files DuckDB can read ({type(exc).__name__})") from None
    timelines: dict[tuple[Any, Any], tuple[list[str], list[str]]] = {}
    for subject, prediction, time, code, description, numeric, text in events:
        code, text = _text(code, "code", data_files), _text(text, "text_value", data_files)
        description = _text(description, "description", [codes_file])
        static, dated = timelines.setdefault((subject, prediction), ([], []))
        if time is None:
            static.append(f"{description or code}" + (f" = {text}" if text else ""))
        else:
            dated.append(_event_line(time, code, description, numeric, text))
    question = questions.get(task) or f"Will the outcome '{task}' occur after the prediction time?"
    table.headers[parts[0]] = list(MAPPING.required_columns())
    for filename, position, subject, prediction, value in labels:
        file = Path(filename)
        place = Place.record(int(position) + 1)
        if subject is None or prediction is None:
            raise ExtractError(file, "a subject_id and a prediction_time", place=place)
        if value is None:
            table.skipped["label without boolean_value"] += 1
            continue
        if not isinstance(value, bool):  # the text "false" would be true, and so would 2
            raise ExtractError(file, "true or false (a boolean_value column of type boolean)", place=place,
                               column="boolean_value")
        static, dated = timelines.get((subject, prediction), ([], []))
        header = f"Prediction time: {_fmt_time(prediction)}"
        if static:
            header += "\nStatic: " + "; ".join(static)
        truncated = keep_recent_lines(dated, budget, header=header)
        table.rows.append(
            Row(
                file,
                int(position),
                {
                    "id": f"{task}:{subject}:{_fmt_time(prediction).replace(' ', 'T')}",
                    "timeline": truncated.text,
                    "question": question,
                    "label": "yes" if value else "no",
                    "task": task,
                    "subject_id": subject,
                    "prediction_time": _fmt_time(prediction),
                    "n_events": truncated.kept,
                    "events_dropped": truncated.dropped,
                },
                place,
            )
        )
    if parts[0] not in table.files:
        table.files.append(parts[0])
