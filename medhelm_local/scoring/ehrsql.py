"""EHRSQL execution accuracy: gold and predicted SQL run read-only on the benchmark's SQLite database.

- answerable question: correct when the predicted query runs and returns the same result set as the gold query
  (rows compared as a set, floats rounded to 6 decimals, order ignored); both queries are first rewritten as the
  benchmark's official ``evaluate.py`` (``post_process_sql``) does: lower-cased, ``current_time`` set to the
  dataset's "now" ``'2105-12-31 23:59:00'`` (SQLite's own ``current_time`` is today's clock time), the vital-sign
  placeholders (``temperature_lower`` ...) replaced by their normal ranges, ``%y``/``%j`` read as ``%Y``/``%J``;
- unanswerable question (``meta.is_impossible``): correct when the model abstains (empty answer or ``null``);
- ``sub.valid_sql``: for answerable questions where the model wrote SQL, whether it ran (the valid-SQL rate);
- ``sub.abstention``: whether the model abstained, for the unanswerable-question breakdown;
- ``gold_empty`` (answerable questions): the gold query returns no rows. On the benchmark's small eICU database
  651 of the 1,204 answerable gold queries do, and any wrong query that returns nothing matches them, so the
  summary reports the count of such items and the accuracy on the others beside the execution accuracy.

A gold query that fails or times out cannot be scored: :class:`GoldQueryFailed` makes the instance a recorded
failure (value None), never a 0 or a 1. Queries run with ``mode=ro``, ``query_only``, an authorizer that allows
reads only (no ATTACH, PRAGMA, writes or temp objects), extension loading off, no attached databases, one statement
per query, a wall-clock limit and a row cap; ``db_path`` must be an SQLite file.

Expected instance data: ``references[0]`` = gold SQL (absent for unanswerable ones), ``meta.db_path`` (absolute
path of the SQLite file), ``meta.is_impossible`` (bool).
"""

from __future__ import annotations

import re
import sqlite3
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec, OutputType
from medhelm_local.records import Instance
from medhelm_local.scoring.details import ScoreDetails
from medhelm_local.scoring.extract import answer_text, strip_reasoning
from medhelm_local.scoring.metrics import MetricInputError, Unscorable, require_meta
from medhelm_local.scoring.registry import instance_scorer
from medhelm_local.scoring.scorer import Needs, meta_field

TIME_LIMIT_S = 5.0
MAX_ROWS = 100_000
_ABSTAIN = {"", "null", "none", "n/a", "na", "unanswerable", "cannot be answered", "select null"}
_SQL_START = re.compile(r"\b(select|with)\b", re.IGNORECASE)
_SQLITE_HEADER = b"SQLite format 3\x00"
_ALLOWED_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
if hasattr(sqlite3, "SQLITE_RECURSIVE"):
    _ALLOWED_ACTIONS.add(sqlite3.SQLITE_RECURSIVE)


class GoldQueryFailed(Unscorable):
    """The gold query did not run; the category (``gold_sql_error``, ``gold_timeout``) is safe to log."""


class QueryFailed(Exception):
    def __init__(self, category: str) -> None:
        super().__init__(category)
        self.category = category


# A fenced block anywhere in a reply: ``` or ~~~ fences, an optional language tag ("sql", "sqlite", "SQL"), on
# their own lines or inline (```SELECT 1```); a single-backtick span (`SELECT 1`) is the inline form.
_FENCED = re.compile(
    r"(`{3,}|~{3,})[ \t]*(?:(?:sqlite3?|sql|postgresql|mysql)(?![\w])|[\w+-]*(?=[ \t]*\n))?\s*(.*?)\1",
    re.DOTALL | re.IGNORECASE)
_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
# Prose after an unfenced query: a blank line, then a line that does not continue the SQL.
_TRAILING_PROSE = re.compile(
    r"\n[ \t]*\n(?![ \t]*(?:select|from|where|group|order|having|limit|union|intersect|except|and|or|join|"
    r"left|inner|on|\(|\)))", re.IGNORECASE)


def _sql_candidates(text: str) -> list[str]:
    blocks = [m.group(2) for m in _FENCED.finditer(text)] or [m.group(1) for m in _INLINE.finditer(text)]
    return [b.strip() for b in blocks if _SQL_START.search(b)]


def _bare_abstention(text: str) -> bool:
    return text.strip().strip(".;'\"`*_ ").lower() in _ABSTAIN


def extract_sql(output: str) -> str:
    """The SQL in an output; '' = abstained.

    A fenced block holding SQL wins wherever it stands ("Here is the query:\n```sql ... ```", ~~~ fences, inline
    fences, `single backticks`; the last such block when there are several); otherwise the text from the first
    SELECT/WITH. A leading "SQL:" (or "Answer:", "**SQL:**"), a trailing semicolon and anything after it are
    dropped, and so is prose after a blank line that ends an unfenced query. An abstention may be in markdown
    ("**null**") and followed by its reason after a blank line ("null\n\nThe schema has no ...").
    """
    text = answer_text(output)
    text = re.sub(r"^[\s*_]*(?:sql|sqlite|query|answer)[\s*_]*:[\s*_]*", "", text, flags=re.IGNORECASE)
    first_paragraph = re.split(r"\n[ \t]*\n", text.strip(), maxsplit=1)[0]
    if _bare_abstention(text) or (_bare_abstention(first_paragraph) and not _SQL_START.search(text)):
        return ""
    blocks = _sql_candidates(text)
    if blocks:
        text = blocks[-1]
    start = _SQL_START.search(text)
    if start is None:
        return text.strip()
    sql = text[start.start():].strip()
    if ";" in sql:
        return sql.split(";")[0].strip()
    prose = _TRAILING_PROSE.search(sql)
    return (sql[:prose.start()] if prose else sql).strip()


# EHRSQL's official evaluation (glee4810/EHRSQL evaluate.py, post_process_sql): the dataset's "now" and the normal
# ranges its gold queries name as placeholders.
CURRENT_TIME = "2105-12-31 23:59:00"
_VITAL_RANGES = {"temperature": (35.5, 38.1), "sao2": (95.0, 100.0), "heart rate": (60.0, 100.0),
                 "respiration": (12.0, 18.0), "systolic bp": (90.0, 120.0), "diastolic bp": (60.0, 90.0),
                 "mean bp": (60.0, 110.0)}
_VITAL_LOWER = re.compile(r"[ \n]+([a-zA-Z0-9_]+_lower)")
_VITAL_UPPER = re.compile(r"[ \n]+([a-zA-Z0-9_]+_upper)")


def post_process_sql(query: str) -> str:
    """A query as EHRSQL's official evaluation runs it (its ``post_process_sql``, gold and predicted alike)."""
    query = query.lower().replace("current_time", f"'{CURRENT_TIME}'")
    lower, upper = _VITAL_LOWER.search(query), _VITAL_UPPER.search(query)
    if lower and upper:
        lower_expr, upper_expr = lower.group(1), upper.group(1)
        names = {lower_expr[:-len("_lower")], upper_expr[:-len("_upper")]}
        if len(names) == 1:
            bounds = _VITAL_RANGES.get(names.pop().replace("_", " "))
            if bounds is not None:
                query = query.replace(lower_expr, f"{bounds[0]}").replace(upper_expr, f"{bounds[1]}")
    query = query.replace("''", "'").replace("< =", "<=")
    return query.replace("%y", "%Y").replace("%j", "%J")


def _authorize(action: int, *_args: Any) -> int:
    return sqlite3.SQLITE_OK if action in _ALLOWED_ACTIONS else sqlite3.SQLITE_DENY


@lru_cache(maxsize=8)
def _connect(db_path: str) -> sqlite3.Connection:
    path = Path(db_path)
    if not path.is_file():
        raise MetricInputError(f"EHRSQL database {path} does not exist (meta 'db_path'); re-register the dataset")
    try:
        with path.open("rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise MetricInputError(f"EHRSQL database {path} cannot be read ({exc.strerror or type(exc).__name__})"
                               ) from None
    if header != _SQLITE_HEADER:
        raise MetricInputError(f"EHRSQL database {path} is not an SQLite database file (meta 'db_path')")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
    conn.execute("PRAGMA query_only = ON")
    if hasattr(conn, "enable_load_extension"):
        conn.enable_load_extension(False)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)  # no ATTACH, whatever the authorizer allows
    conn.set_authorizer(_authorize)
    return conn


def _normalise(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    return value


def run_query(db_path: str, sql: str, time_limit_s: float = TIME_LIMIT_S) -> frozenset[tuple[Any, ...]]:
    """Run one read-only query; its result as a set of normalised rows. Raises :class:`QueryFailed`."""
    conn = _connect(db_path)
    deadline = time.monotonic() + time_limit_s
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    try:
        cursor = conn.execute(sql)
        rows = cursor.fetchmany(MAX_ROWS + 1)
    except sqlite3.OperationalError as exc:
        raise QueryFailed("timeout" if "interrupted" in str(exc) else "sql_error") from None
    except (sqlite3.Error, ValueError, OverflowError):
        raise QueryFailed("sql_error") from None
    finally:
        conn.set_progress_handler(None, 0)
    if len(rows) > MAX_ROWS:
        raise QueryFailed("too_many_rows")
    return frozenset(tuple(_normalise(v) for v in row) for row in rows)


@lru_cache(maxsize=4096)
def _gold_result(db_path: str, sql: str) -> frozenset[tuple[Any, ...]]:
    try:
        return run_query(db_path, sql)
    except QueryFailed as failure:
        raise GoldQueryFailed(f"gold_{failure.category}") from None


class EhrsqlDetails(ScoreDetails):
    """``sql_error``: why the predicted query did not run (``sql_error``, ``timeout``, ``too_many_rows``)."""

    sql_error: str | None = None


@instance_scorer("ehrsql_execution_accuracy", details=EhrsqlDetails,
                 needs=Needs(answers=(OutputType.SQL,), fields=((meta_field("db_path"),),)))
def ehrsql_execution_accuracy(spec: BenchmarkSpec, instance: Instance, output: str) -> tuple[float, EhrsqlDetails]:
    db_path = str(require_meta(spec, instance, "db_path", "the path of the benchmark's SQLite database"))
    impossible = bool(instance.meta.get("is_impossible", False)) or not instance.references
    predicted = extract_sql(output)
    abstained = predicted == ""
    raw = strip_reasoning(output).strip()
    strict = raw.lower() in ("null", "") if abstained else raw.rstrip(";").strip() == predicted
    if impossible:
        return float(abstained), EhrsqlDetails(parsed=True, strict_format=strict, group="unanswerable",
                                               sub={"abstention": float(abstained)})
    gold = _gold_result(db_path, post_process_sql(instance.references[0]))  # GoldQueryFailed: a recorded failure

    def details(**more: Any) -> EhrsqlDetails:
        return EhrsqlDetails(parsed=not abstained, strict_format=strict, group="answerable", gold_empty=not gold,
                             **more)

    if abstained:
        return 0.0, details(sub={"abstention": 1.0})
    try:
        result = run_query(db_path, post_process_sql(predicted))
    except QueryFailed as failure:
        return 0.0, details(sql_error=failure.category, sub={"valid_sql": 0.0, "abstention": 0.0})
    return float(result == gold), details(sub={"valid_sql": 1.0, "abstention": 0.0})
