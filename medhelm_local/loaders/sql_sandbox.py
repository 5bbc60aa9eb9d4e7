"""Sealed DuckDB for a spec's SQL (``private_table`` ``query``, OMOP ``cohort_sql``): the extract, read-only,
and nothing else.

Two locks, each enough on its own against the attacks of issue 12 §1 (httpfs exfiltration, ``COPY`` of notes to
a plaintext file, ``read_text`` of the store's key):

1. :func:`sealed_connect` opens the extract read-only with external access off (no file, URL, ``ATTACH`` or
   ``COPY``), extension auto-install/auto-load off, unsigned and community extensions off, persistent secrets
   off; the loader may then set the schema, and :func:`seal` locks the configuration before any user SQL runs.
2. :func:`check_select` reads the SQL with DuckDB's own parser (``extract_statements``, then
   ``json_serialize_sql``) before anything runs: exactly one ``SELECT`` (or ``WITH ... SELECT``) statement;
   table functions other than a few value generators (``range``, ``unnest``...) are refused by name
   (``read_csv``, ``read_text``, ``read_parquet``, ``read_json``, ``glob``, ``query``...), and so are settings
   and variable functions; every table it names must be a table or view of the extract (or one of its own
   ``WITH`` names): a quoted file name or URL (``from 'notes.csv'``) is not.

A refused query is a :class:`SqlRefused` (exit 2) naming the loader option, the statement or the function; never
the data.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import duckdb

from medhelm_local.errors import BadInputError, ExtractError

# Settings of every connection that runs a spec's SQL (applied at connect, so before any statement runs).
SEALED_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_unsigned_extensions": False,
    "allow_community_extensions": False,
    "allow_persistent_secrets": False,
    # DuckDB's Python client otherwise resolves an unknown table name to a DataFrame/Arrow variable of the caller.
    "python_enable_replacements": False,
    # No spilling: above its memory limit DuckDB would otherwise write the extract's rows, unencrypted, to ".tmp" in
    # the working directory (the container's is the appliance's home) or beside the extract, and a crash leaves
    # them there. A query that does not fit fails with an out-of-memory error instead.
    "temp_directory": "",
}
# Table functions that only generate values from their arguments; every other one is refused.
ALLOWED_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest", "json_each", "json_tree"})
# Scalar functions that read the connection's settings or variables (a channel around the statement check).
REFUSED_FUNCTIONS = frozenset({"current_setting", "getvariable", "getenv", "current_query"})
# FROM-clause node types a read-only SELECT over tables may hold (SHOW_REF = DESCRIBE/SHOW/SUMMARIZE: refused).
ALLOWED_REFS = frozenset({"BASE_TABLE", "JOIN", "SUBQUERY", "TABLE_FUNCTION", "EMPTY", "EXPRESSION_LIST", "PIVOT"})
# First keywords of a plain query (PRAGMA, DESCRIBE, SHOW, SUMMARIZE, PIVOT parse as SELECT too: refused).
SELECT_KEYWORDS = frozenset({"SELECT", "WITH", "FROM", "VALUES"})
_KEYWORD = re.compile(r"(?:\s+|--[^\n]*\n?|/\*.*?\*/|\()*([A-Za-z_]+)", re.DOTALL)
EXPECTED = "one read-only SELECT (or WITH ... SELECT) statement over the extract's tables"


class SqlRefused(BadInputError):
    """A spec's SQL is not one read-only SELECT over the extract: names the option and what was refused."""

    def __init__(self, where: Path | str, option: str, problem: str) -> None:
        self.where = str(where)
        self.option = option
        self.problem = problem
        super().__init__(f"{where}: loader option {option}: {problem}; only {EXPECTED} is accepted")


def sealed_connect(path: Path | None) -> duckdb.DuckDBPyConnection:
    """``path`` (a DuckDB file) opened read-only, or an empty in-memory database, with the sealed settings.

    Call :func:`seal` before running any SQL a spec supplied."""
    try:
        if path is None:
            return duckdb.connect(":memory:", config=dict(SEALED_CONFIG))
        return duckdb.connect(str(path), read_only=True, config=dict(SEALED_CONFIG))
    except duckdb.Error:
        raise ExtractError(path or ":memory:", "a readable DuckDB database file") from None


def folder_reader(folder: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory connection for the appliance's own SQL over an extract folder's files (MEDS Parquet): it can
    read files under ``folder`` only (DuckDB's ``allowed_directories``), loads no extension, and is locked."""
    allowed = sorted({str(folder.absolute()).rstrip("/") + "/", str(folder.resolve()).rstrip("/") + "/"})
    config: dict[str, str | bool | int | float | list[str]] = {
        k: v for k, v in SEALED_CONFIG.items() if k != "enable_external_access"}
    con = duckdb.connect(":memory:", config=config)
    try:
        con.execute("SET allowed_directories = ?", [allowed])
        con.execute("SET enable_external_access = false")
        seal(con)
    except duckdb.Error:
        con.close()
        raise
    return con


def seal(con: duckdb.DuckDBPyConnection) -> None:
    """Lock the connection's configuration: no later statement can switch external access or extensions back."""
    con.execute("SET lock_configuration = true")


def query_failure(exc: duckdb.Error, where: Path | str, option: str, expected: str) -> BadInputError:
    """The error for a checked query that failed while running: a refusal of the sealed connection (a view or macro
    inside the extract reaching a file, URL or extension) is named as such; anything else as ``expected``."""
    if isinstance(exc, duckdb.PermissionException):
        return SqlRefused(where, option, "it reaches a file, URL or extension (through a view or macro of the "
                                         "extract?) and the sealed connection refused it")
    if isinstance(exc, duckdb.OutOfMemoryException):
        return ExtractError(where, f"{expected} within DuckDB's memory limit (extracts are read in memory, never "
                                   "spilled to disk; give the appliance more memory)")
    kind = type(exc).__name__
    hint = _FAILURE_HINTS.get(kind)
    return ExtractError(where, f"{expected} ({kind}" + (f": {hint}; run the query with DuckDB on a copy of the "
                                                        "extract to see which)" if hint else ")"))


# What a failed query's DuckDB error class says, in words: its message is never shown (a conversion error quotes
# the value it could not convert, which may be patient text).
_FAILURE_HINTS = {
    "BinderException": "a column or function the query names is not in the extract, or not of a type that fits",
    "CatalogException": "a table, view or function the query names is not in the extract",
    "ConversionException": "a value could not be converted to the type the query asks for",
}


def _statement_name(statement: Any, text: str | None = None) -> str:
    """The statement's first keyword (INSTALL, PRAGMA...), else its DuckDB type. ``text``: its original SQL (DuckDB
    rewrites some statements, e.g. PRAGMA as a SELECT over a table function)."""
    match = _KEYWORD.match(statement.query if text is None else text)
    return match.group(1).upper() if match else str(statement.type.name)


def _walk(node: Any) -> Any:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _is_table_ref(node: dict[str, Any]) -> bool:
    """A FROM-clause node of the serialised tree (expressions carry a "class"; query nodes end in _NODE)."""
    return ("class" not in node and "alias" in node and "sample" in node
            and not str(node.get("type", "")).endswith("_NODE"))


def _extract_tables(con: duckdb.DuckDBPyConnection) -> tuple[str, set[tuple[str, str]]]:
    database = str(con.execute("select current_database()").fetchone()[0])  # type: ignore[index]
    rows = con.execute(
        "select schema_name, table_name from duckdb_tables() where database_name = current_database() union all "
        "select schema_name, view_name from duckdb_views() where database_name = current_database() "
        "and not internal"
    ).fetchall()
    return database, {(str(s).lower(), str(t).lower()) for s, t in rows}


def check_select(con: duckdb.DuckDBPyConnection, sql: object, *, where: Path | str, option: str) -> str:
    """``sql`` checked with DuckDB's parser against ``con``'s database; returns it without trailing semicolons.

    Raises :class:`SqlRefused` for anything but one read-only SELECT over the extract's own tables."""
    if not isinstance(sql, str):
        raise SqlRefused(where, option, "expected the query as a string")
    if not sql.strip():
        raise SqlRefused(where, option, "the query is empty")
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise SqlRefused(where, option, f"DuckDB cannot parse it ({type(exc).__name__})") from None
    if len(statements) != 1:
        names = ", ".join(_statement_name(s) for s in statements)
        raise SqlRefused(where, option, f"it holds {len(statements)} statements ({names})")
    (statement,) = statements
    name = _statement_name(statement, sql)
    if statement.type != duckdb.StatementType.SELECT or name not in SELECT_KEYWORDS:
        raise SqlRefused(where, option, f"{name} statements are refused")
    text = sql.strip().rstrip(";").strip()
    try:
        tree = json.loads(con.execute("select json_serialize_sql(?)", [text]).fetchone()[0])  # type: ignore[index]
    except (duckdb.Error, TypeError, ValueError):
        raise SqlRefused(where, option, "DuckDB's parser cannot serialise it for checking") from None
    if tree.get("error") or len(tree.get("statements", [])) != 1:
        raise SqlRefused(where, option, "it is not a plain SELECT statement (PIVOT, SHOW and the like are refused)")
    database, tables = _extract_tables(con)
    ctes = {str(entry.get("key", "")).lower() for node in _walk(tree) if isinstance(node.get("cte_map"), dict)
            for entry in node["cte_map"].get("map", []) if isinstance(entry, dict)}
    schemas = {s for s, _ in tables}
    for node in _walk(tree):
        kind = str(node.get("type", ""))
        if _is_table_ref(node) and kind not in ALLOWED_REFS:
            raise SqlRefused(where, option, f"{'DESCRIBE/SHOW/SUMMARIZE' if kind == 'SHOW_REF' else kind} is refused")
        if kind == "TABLE_FUNCTION":
            name = str((node.get("function") or {}).get("function_name", "")).lower()
            if name not in ALLOWED_TABLE_FUNCTIONS:
                raise SqlRefused(where, option, f"table function {name}() is refused (a spec's SQL reads the "
                                                "extract's tables only)")
        elif node.get("class") == "FUNCTION" and "function_name" in node:
            name = str(node["function_name"]).lower()
            if name in REFUSED_FUNCTIONS or name.startswith("read_") or name.endswith("_scan"):
                raise SqlRefused(where, option, f"function {name}() is refused")
        elif kind == "BASE_TABLE":
            _check_table(node, database, tables, schemas, ctes, where, option)
    return text


def _check_table(node: dict[str, Any], database: str, tables: set[tuple[str, str]], schemas: set[str],
                 ctes: set[str], where: Path | str, option: str) -> None:
    catalog = str(node.get("catalog_name") or "").lower()
    schema = str(node.get("schema_name") or "").lower()
    name = str(node.get("table_name") or "").lower()
    shown = ".".join(p for p in (catalog, schema, name) if p)
    if not catalog and not schema and name in ctes:
        return
    if catalog and catalog != database.lower():
        raise SqlRefused(where, option, f"table {shown!r} is not in the extract (only its own tables are readable)")
    known = (schema, name) in tables if schema else any(t == name for _, t in tables)
    if not known:
        reason = "a file name or URL, " if any(c in name for c in "/\\:.") else ""
        raise SqlRefused(where, option, f"table {shown!r} is {reason}not a table of the extract "
                                        f"(tables in schemas {', '.join(sorted(schemas)) or 'none'})")


def sandbox_probe() -> str:
    """The ``doctor`` check "SQL sandbox": a sealed connection refuses to read a file (this module's own source),
    to switch external access back on and to load an extension, its settings read as required, and the statement
    check refuses COPY, LOAD, a file-reading table function and two statements. Raises :class:`MedhelmError`
    naming what was not refused."""
    from medhelm_local.errors import MedhelmError

    try:
        con = sealed_connect(None)
    except BadInputError as exc:
        raise MedhelmError(f"cannot open a sealed DuckDB connection ({exc})") from None
    try:
        seal(con)
        for probe, statement in (("read_text of a local file", f"select size from read_text({_literal(__file__)})"),
                                 ("SET enable_external_access", "SET enable_external_access = true"),
                                 ("LOAD httpfs", "LOAD httpfs")):
            try:
                con.execute(statement).fetchall()
            except duckdb.Error:
                continue
            raise MedhelmError(f"the sealed connection allowed {probe}: spec SQL is not sandboxed")
        for query in ("COPY (select 1) TO 'probe.csv'", "LOAD httpfs",
                      "select * from read_text('probe.txt')", "select 1; select 2"):
            try:
                check_select(con, query, where="doctor", option="probe")
            except SqlRefused:
                continue
            raise MedhelmError(f"the SQL check accepted {query!r}: spec SQL is not sandboxed")
        settings = dict(con.execute(
            "select name, value from duckdb_settings() where name in ('enable_external_access', "
            "'autoload_known_extensions', 'autoinstall_known_extensions', 'allow_unsigned_extensions', "
            "'lock_configuration')").fetchall())
    except duckdb.Error as exc:
        raise MedhelmError(f"the SQL sandbox probe failed ({type(exc).__name__})") from None
    finally:
        con.close()
    expected = {"enable_external_access": "false", "autoload_known_extensions": "false",
                "autoinstall_known_extensions": "false", "allow_unsigned_extensions": "false",
                "lock_configuration": "true"}
    wrong = sorted(k for k, v in expected.items() if str(settings.get(k, "")).lower() != v)
    if wrong:
        raise MedhelmError(f"sealed connection settings not as required: {', '.join(wrong)}")
    return "spec SQL sealed: file/URL access, extension loading, COPY/LOAD and file table functions refused"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
