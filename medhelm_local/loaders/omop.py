"""OMOP CDM (v5.3/5.4) in a DuckDB database: patient timelines and yes/no prediction tasks defined by SQL.

The task is EHRSHOT-style: ``loader_options.cohort_sql`` is a read-only query over the CDM returning one row
per prediction with the columns ``person_id``, ``prediction_date`` and ``label`` (and optionally
``instance_id``). For each row the loader builds the patient's timeline from the events strictly before the
prediction date (visits, conditions, drugs, measurements, procedures: ``loader_options.domains``), in time
order, named through the ``concept`` table, and truncated to ``max_context_tokens`` keeping the most recent.

``loader_options``: ``cohort_sql`` (required), ``question`` (required: the yes/no question shown to the
model), ``domains`` [visit, condition, drug, measurement], ``max_context_tokens`` [4000], ``max_events``
[2000], ``schema`` [main]. The label goes through the spec's ``label_map`` (e.g. ``{"1": "yes", "0": "no"}``).

The CDM columns the loader reads are checked before the cohort query runs, a missing one named with its table:
``person`` (person_id, gender_concept_id, gender_source_value, year_of_birth), ``concept`` (concept_id,
concept_name), and each domain's table (person_id, its date column, a DATE or TIMESTAMP, and its concept column;
``measurement`` also value_as_number and unit_source_value); the ids it joins on (person_id, concept_id and the
concept columns) must be integers (a DECIMAL without a fraction, as Oracle's NUMBER loads, too).

Instance id: ``instance_id`` if the query returns it, else ``<person_id>:<prediction_date>``. Fields:
``timeline``, ``question``. Meta: ``person_id``, ``prediction_date``, ``n_events``, ``events_dropped``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import duckdb

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError, ExtractError, Place
from medhelm_local.loaders.base import LoadResult, register_loader
from medhelm_local.loaders.io import Row, Table
from medhelm_local.loaders.records import (
    RecordMapping,
    as_text,
    build_instances,
    check_option_keys,
    header_summary,
    mapping_fields,
)
from medhelm_local.loaders.sql_sandbox import check_select, query_failure, seal, sealed_connect
from medhelm_local.loaders.timeline import keep_recent_lines

# domain -> (table, date column, concept column, event label, value expression)
DOMAINS: dict[str, tuple[str, str, str, str, str]] = {
    "visit": ("visit_occurrence", "visit_start_date", "visit_concept_id", "Visit", "null"),
    "condition": ("condition_occurrence", "condition_start_date", "condition_concept_id", "Condition", "null"),
    "drug": ("drug_exposure", "drug_exposure_start_date", "drug_concept_id", "Drug", "null"),
    "measurement": (
        "measurement",
        "measurement_date",
        "measurement_concept_id",
        "Measurement",
        "concat_ws(' ', cast(try_cast(t.value_as_number as double) as varchar), t.unit_source_value)",
    ),
    "procedure": ("procedure_occurrence", "procedure_date", "procedure_concept_id", "Procedure", "null"),
    "observation": ("observation", "observation_date", "observation_concept_id", "Observation", "null"),
}
DEFAULT_DOMAINS = ("visit", "condition", "drug", "measurement")
MAPPING = RecordMapping(
    id_column="id",
    fields={"timeline": "timeline", "question": "question"},
    label_column="label",
    meta={
        "person_id": "person_id",
        "prediction_date": "prediction_date",
        "n_events": "n_events",
        "events_dropped": "events_dropped",
    },
)
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _tables(con: duckdb.DuckDBPyConnection, schema: str) -> set[str]:
    rows = con.execute(
        "select table_name from duckdb_tables() where schema_name = ? union "
        "select view_name from duckdb_views() where schema_name = ?",
        [schema, schema],
    ).fetchall()
    return {r[0].lower() for r in rows}


@register_loader("omop_cdm", gives=mapping_fields(MAPPING))
def load_omop(spec: BenchmarkSpec, path: Path) -> LoadResult:
    check_option_keys(spec, {"cohort_sql", "question", "domains", "max_context_tokens", "max_events", "schema"})
    options = spec.loader_options
    cohort_sql = options.get("cohort_sql")
    question = options.get("question")
    if not isinstance(cohort_sql, str) or not cohort_sql.strip():
        raise BadInputError(f"benchmark {spec.id}: loader option cohort_sql (a SQL query) is required")
    if not isinstance(question, str) or not question.strip():
        raise BadInputError(f"benchmark {spec.id}: loader option question is required")
    domains = list(options.get("domains") or DEFAULT_DOMAINS)
    unknown = [d for d in domains if d not in DOMAINS]
    if unknown:
        raise BadInputError(f"benchmark {spec.id}: unknown domains {unknown}; choose from {list(DOMAINS)}")
    schema = str(options.get("schema", "main"))
    if not _IDENT.match(schema):
        raise BadInputError(f"benchmark {spec.id}: loader option schema must be a plain identifier")
    budget = int(options.get("max_context_tokens", 4000))
    max_events = int(options.get("max_events", 2000))
    if path.is_dir() or path.stat().st_size == 0:
        raise ExtractError(path, "an OMOP CDM DuckDB database file")
    con = sealed_connect(path)
    try:
        present = _tables(con, schema)
        if schema != "main" and not present:
            raise ExtractError(path, f"a schema named {schema!r} holding the OMOP CDM tables")
        con.execute(f"set schema '{schema}'")
        seal(con)
        for needed in ["person", "concept", *(DOMAINS[d][0] for d in domains)]:
            if needed not in present:
                raise ExtractError(path, f"an OMOP CDM table named {needed!r} in schema {schema!r}", column=needed)
        _check_columns(con, path, schema, domains)
        table = _cohort(con, path, check_select(con, cohort_sql, where=path, option="cohort_sql"))
        rows = _timelines(con, path, table, domains, question, budget, max_events)
    finally:
        con.close()
    out = Table(files=[path])
    out.headers[path] = list(MAPPING.required_columns())
    out.rows.extend(rows)
    instances, skipped = build_instances(spec, out, MAPPING)
    return LoadResult(instances=instances, files=[path], skipped=skipped)


def cohort_place(position: int) -> Place:
    return Place.record(int(position) + 1, "cohort_sql row")


# The columns the loader itself reads (beyond each domain's person_id, date and concept): a CDM missing one failed
# as an internal error in the middle of the read.
_INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT")
_READ_COLUMNS: dict[str, tuple[str, ...]] = {
    "person": ("person_id", "gender_concept_id", "gender_source_value", "year_of_birth"),
    "concept": ("concept_id", "concept_name"),
    "measurement": ("value_as_number", "unit_source_value"),
}


def _check_columns(con: duckdb.DuckDBPyConnection, path: Path, schema: str, domains: list[str]) -> None:
    """Each column the loader reads exists, each domain's date column is a DATE or TIMESTAMP and the ids it joins on
    integers (a CDM loaded from CSV as text has neither)."""
    types = {
        (table.lower(), column.lower()): kind
        for table, column, kind in con.execute(
            "select table_name, column_name, data_type from duckdb_columns() where schema_name = ?", [schema]
        ).fetchall()
    }
    tables = ["person", "concept", *(DOMAINS[d][0] for d in domains)]
    needed = {table: list(_READ_COLUMNS.get(table, ())) for table in tables}
    for domain in domains:
        table, date_col, concept_col = DOMAINS[domain][:3]
        needed[table].extend(["person_id", date_col, concept_col])
    for table, columns in needed.items():
        for column in columns:
            if (table, column) not in types:
                raise ExtractError(path, f"a column {column!r} in the OMOP CDM table {table!r}", column=column)
    # The ids the loader joins on: as text (a CDM loaded from CSV) the join failed naming no table or column.
    ids = [("person", "person_id"), ("person", "gender_concept_id"), ("concept", "concept_id")]
    for domain in domains:
        table, date_col, concept_col = DOMAINS[domain][:3]
        ids += [(table, "person_id"), (table, concept_col)]
        kind = types[(table, date_col)]
        if kind != "DATE" and not str(kind).startswith("TIMESTAMP"):
            raise ExtractError(path, f"column {date_col!r} of the OMOP CDM table {table!r} of type DATE or TIMESTAMP "
                                     f"(it is {kind}: cast it when the CDM is loaded)", column=date_col)
    for table, column in ids:
        kind = types[(table, column)]
        if kind not in _INTEGERS and not (kind.startswith("DECIMAL(") and kind.endswith(",0)")):  # Oracle's NUMBER
            raise ExtractError(path, f"column {column!r} of the OMOP CDM table {table!r} of an integer type (it is "
                                     f"{kind}: cast it when the CDM is loaded)", column=column)


def _cohort(con: duckdb.DuckDBPyConnection, path: Path, cohort_sql: str) -> list[tuple[Any, ...]]:
    try:
        relation = con.sql(cohort_sql)
    except duckdb.Error as exc:
        raise query_failure(exc, path, "cohort_sql", "a cohort_sql query that runs") from None
    if relation is None:
        raise ExtractError(path, "a cohort_sql query that returns rows")
    columns = [c.lower() for c in relation.columns]
    wanted = ["person_id", "prediction_date", "label", "instance_id"]
    for needed in wanted[:3]:
        if needed not in columns:
            raise ExtractError(
                path, f"a cohort_sql column named {needed!r} ({header_summary(columns, wanted)})", column=needed
            )
    id_expr = "cast(instance_id as varchar)" if "instance_id" in columns else "null"
    try:
        # The checked query as a temporary view; the statement must still be one CREATE (nothing appended).
        create_view = f"create temp view _cohort_sql as\n{cohort_sql}\n"
        if [s.type for s in con.extract_statements(create_view)] != [duckdb.StatementType.CREATE]:
            raise ExtractError(path, "a cohort_sql query that is one SELECT statement")
        con.execute(create_view)
        con.execute(
            f"create temp table _cohort as select row_number() over () - 1 as position, "
            f"cast(person_id as bigint) as person_id, cast(prediction_date as date) as prediction_date, "
            f"label, {id_expr} as instance_id from _cohort_sql"
        )
        rows = con.execute(
            "select position, person_id, prediction_date, label, instance_id, isfinite(prediction_date) "
            "from _cohort order by position"
        ).fetchall()
    except duckdb.Error as exc:
        raise query_failure(
            exc, path, "cohort_sql", "cohort_sql columns person_id (an integer) and prediction_date (a date)"
        ) from None
    for position, person_id, prediction_date, *_, finite in rows:
        place = cohort_place(position)
        if person_id is None:
            raise ExtractError(path, "a person_id in every cohort_sql row", place=place, column="person_id")
        if prediction_date is None or not finite:
            raise ExtractError(path, "a prediction_date (a finite date) in every cohort_sql row", place=place,
                               column="prediction_date")
    return [row[:5] for row in rows]


def _timelines(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    cohort: list[tuple[Any, ...]],
    domains: list[str],
    question: str,
    budget: int,
    max_events: int,
) -> list[Row]:
    selects = []
    for domain in domains:
        table, date_col, concept_col, label, value = DOMAINS[domain]
        selects.append(
            f"select c.position, cast(t.{date_col} as date) as event_date, '{label}' as kind, "
            f"coalesce(k.concept_name, 'concept ' || cast(t.{concept_col} as varchar)) as name, "
            f"{value} as value from _cohort c join {table} t on t.person_id = c.person_id "
            f"left join concept k on k.concept_id = t.{concept_col} "
            f"where t.{date_col} < c.prediction_date"
        )
    query = (
        f"select position, event_date, kind, name, value from (select *, row_number() over "
        f"(partition by position order by event_date desc, kind, name) as rn from ({' union all '.join(selects)})) "
        f"where rn <= {int(max_events)} order by position, event_date, kind, name"
    )
    events: dict[int, list[str]] = {}
    try:
        found = con.execute(query).fetchall()
    except duckdb.Error as exc:
        raise query_failure(exc, path, "domains", f"OMOP CDM tables {', '.join(DOMAINS[d][0] for d in domains)} "
                                                  "whose columns have the CDM's types") from None
    for position, event_date, kind, name, value in found:
        suffix = f" = {value}" if value else ""
        events.setdefault(position, []).append(f"{event_date} | {kind}: {name}{suffix}")
    people = _demographics(con, path)
    rows = []
    for position, person_id, prediction_date, label, instance_id in cohort:
        sex, year = people.get(person_id, ("unknown sex", None))
        age = f", age {prediction_date.year - year}" if year is not None and prediction_date is not None else ""
        header = f"Patient: {sex}{age}; prediction date {prediction_date}"
        truncated = keep_recent_lines(events.get(position, []), budget, header=header)
        rows.append(
            Row(
                path,
                int(position),
                {
                    "id": instance_id or f"{person_id}:{prediction_date}",
                    "timeline": truncated.text,
                    "question": question,
                    "label": None if label is None else as_text(label),
                    "person_id": person_id,
                    "prediction_date": str(prediction_date),
                    "n_events": truncated.kept,
                    "events_dropped": truncated.dropped,
                },
                cohort_place(position),
            )
        )
    return rows


def _demographics(con: duckdb.DuckDBPyConnection, path: Path) -> dict[int, tuple[str, int | None]]:
    rows = con.execute(
        "select p.person_id, coalesce(g.concept_name, p.gender_source_value, 'unknown sex'), p.year_of_birth "
        "from person p left join concept g on g.concept_id = p.gender_concept_id "
        "where p.person_id in (select person_id from _cohort)"
    ).fetchall()
    people: dict[int, tuple[str, int | None]] = {}
    for pid, sex, year in rows:
        try:
            people[pid] = (str(sex).lower(), int(year) if year is not None else None)
        except (TypeError, ValueError):  # a CDM loaded as text: "unknown", "1950.5"
            raise ExtractError(path, "an integer year_of_birth in the OMOP CDM table 'person' (for each person of "
                                     "the cohort)", column="year_of_birth") from None
    return people
