"""The audit trail itself: RFC 6962 roots, concurrent appends, fail closed, no free text, show and report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm_local.audit.merkle import MerkleAccumulator, merkle_root
from medhelm_local.audit.trail import AuditTrail, AuditWriteError
from medhelm_local.audit.verify import verify_file
from medhelm_local.home.keys import ensure_keys, load_signing_key
from tests.compliance.conftest import (
    APPROVER,
    REQUESTER,
    EvaluatedHome,
    approve_args,
    hospice_csv,
    request_export,
    signers,
)
from tests.compliance.inproc import InProcessCli

# RFC 6962 test vectors (certificate-transparency merkle_tree_test): leaves and the roots of each prefix.
CT_LEAVES = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]
CT_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def test_merkle_roots_match_rfc6962_vectors() -> None:
    leaves = [bytes.fromhex(x) for x in CT_LEAVES]
    accumulator = MerkleAccumulator()
    for n, leaf in enumerate(leaves, start=1):
        accumulator.add(leaf)
        assert merkle_root(leaves[:n]).hex() == CT_ROOTS[n - 1]
        assert accumulator.root().hex() == CT_ROOTS[n - 1]


APPENDER = """
import sys
from pathlib import Path
from medhelm_local.audit.trail import AuditTrail
trail = AuditTrail(Path(sys.argv[1]), Path(sys.argv[2]))
for i in range(int(sys.argv[3])):
    trail.append(actor=sys.argv[4], action="test.append", outcome="success", objects={"i": i})
"""


def test_concurrent_appends_keep_the_chain(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    ensure_keys(keys)
    path = tmp_path / "audit.jsonl"
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, str(path), str(keys), "25", f"writer{w}"])
             for w in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    report = verify_file(path, load_signing_key(keys).public_key())
    assert report.intact, report.problems
    assert report.records == 150 and report.checkpoints == 75
    records = AuditTrail(path).records()
    assert [r["seq"] for r in records] == list(range(1, 151))


def test_fail_closed_without_a_signing_key(tmp_path: Path) -> None:
    trail = AuditTrail(tmp_path / "audit.jsonl", tmp_path / "no-keys")
    with pytest.raises(AuditWriteError, match="not performed"):
        trail.append(actor="a", action="x", outcome="success")
    assert not (tmp_path / "audit.jsonl").exists()


def test_unwritable_trail_fails_the_action(tmp_path: Path) -> None:
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    trail = cli.home / "audit" / "audit.jsonl"
    trail.unlink()
    trail.mkdir()  # the trail cannot be opened for writing
    extract = hospice_csv(tmp_path / "notes.csv", 12)
    result = cli("datasets", "register", "hospice_referral", str(extract))
    assert result.code == 1 and "audit trail" in result.stderr
    listed = cli("datasets", "list", "--json")
    assert listed.code == 0 and json.loads(listed.stdout) == []  # nothing was registered


def test_free_text_never_reaches_a_record(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    ensure_keys(keys)
    trail = AuditTrail(tmp_path / "audit.jsonl", keys)
    record = trail.append(actor="a", action="x", outcome="success",
                          objects={"note": "Patient Jane Roe seen today", "run_id": "run-1", "n": 3,
                                   "nested": {"text": "free text here"}})
    text = (tmp_path / "audit.jsonl").read_text()
    assert "Jane" not in text and "free text" not in text
    assert record["objects"]["run_id"] == "run-1" and record["objects"]["n"] == 3


def test_show_filters_and_report(evaluated: EvaluatedHome) -> None:
    cli = evaluated.cli
    request = request_export(cli, evaluated.run_id)
    assert cli("export", "approve", str(request["request_id"]), *approve_args(cli.home)).code == 0
    shown = cli("audit", "show", "--action", "export.", "--json")
    assert shown.code == 0
    actions = {r["action"] for r in json.loads(shown.stdout)}
    assert actions == {"export.request", "export.approve"}
    assert cli("audit", "show", "--since", "2999-01-01", "--json").stdout.strip() == "[]"
    assert cli("audit", "show", "--since", "not-a-date").code == 2
    # --until at or before --since (the two swapped): nothing can match. It listed no record and exited 0, as if
    # nothing had happened in that window; now it says why (exit 2).
    swapped = cli("audit", "show", "--since", "2026-11-26T15:50Z", "--until", "2026-11-26T15:40Z")
    assert swapped.code == 2 and swapped.stdout == ""
    assert "--until (2026-11-26T15:40:00Z) is not after --since (2026-11-26T15:50:00Z)" in swapped.stderr
    everything = json.loads(cli("audit", "show", "--checkpoints", "--json").stdout)
    assert any(r["action"] == "audit.checkpoint" for r in everything)
    assert all(set(r) == {"seq", "ts", "actor", "role", "action", "objects", "outcome", "host", "prev"}
               for r in everything)

    summary = json.loads(cli("audit", "report", "--since", "2000-01-01", "--json").stdout)
    assert [r["run_id"] for r in summary["runs"]] == [evaluated.run_id]
    assert summary["runs"][0]["model"] == "eval-model"
    assert len(summary["runs"][0]["benchmarks"]["hospice_referral"]) == 64  # the dataset fingerprint
    assert summary["datasets"][0]["benchmark"] == "hospice_referral"
    assert summary["exports"][0]["status"] == "approved" and summary["exports"][0]["approver"] == APPROVER
    text = cli("audit", "report", "--since", "2000-01-01")
    assert text.code == 0 and evaluated.run_id in text.stdout and APPROVER in text.stdout
    # Who requested: beside the account, the policy's name for the key that signed the request, as for the approver
    # (the report said only "requested by root").
    assert summary["exports"][0]["requester"] == REQUESTER and f"(requester {REQUESTER})" in text.stdout


def test_a_report_since_a_date_lists_what_was_approved_and_released_in_it(evaluated: EvaluatedHome,
                                                                         tmp_path: Path) -> None:
    """A request made last month, approved and released this month: `audit report --since` the first of this month
    (text, JSON and the printable report) listed no export at all, as if nothing had left the appliance."""
    import time
    from datetime import timedelta

    from medhelm_local.audit.report import compliance_report, parse_time, record_time

    cli = evaluated.cli
    request_id = str(request_export(cli, evaluated.run_id)["request_id"])
    trail = AuditTrail(cli.home / "audit" / "audit.jsonl")
    last = record_time(trail.records()[-1])
    assert last is not None
    since = (last + timedelta(microseconds=1)).isoformat()
    time.sleep(0.01)
    assert cli("export", "approve", request_id, *approve_args(cli.home), "--out", str(tmp_path / "out")).code == 0

    summary = json.loads(cli("audit", "report", "--since", since, "--json").stdout)
    assert [e["request_id"] for e in summary["exports"]] == [request_id]
    export = summary["exports"][0]
    assert export["status"] == "approved" and export["approver"] == APPROVER
    assert export["released_to"] == [str((tmp_path / "out" / request_id).resolve())]
    assert export["requested"] < since  # shown with the request it decided, made before the period
    assert summary["runs"] == []  # what happened before the period is not listed for itself
    assert request_id in cli("audit", "report", "--since", since).stdout
    printable = compliance_report(trail.records(), since=parse_time(since, "since"), appliance="a")
    exports = next(t for t in printable.tables if t.id == "report-exports")
    assert [row[1] for row in exports.rows] == [request_id] and "approved" in exports.rows[0]


def test_show_and_report_skip_lines_that_are_not_records(tmp_path: Path) -> None:
    """A trail garbled or tampered with (a line of JSON that is no object) is still shown and summarised, the
    damaged lines left out (``audit verify`` names them), never an internal error."""
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    trail = cli.home / "audit" / "audit.jsonl"
    with trail.open("ab") as f:
        f.write(b'[1, 2]\n"text"\n42\nnull\n{"garbled\n')
    shown = cli("audit", "show", "--checkpoints", "--json")
    assert shown.code == 0, shown.stderr
    assert all(isinstance(r, dict) for r in json.loads(shown.stdout))
    assert json.loads(shown.stdout)[0]["action"] == "appliance.init"
    assert cli("audit", "show").code == 0
    report = cli("audit", "report", "--json")
    assert report.code == 0 and json.loads(report.stdout)
    assert cli("audit", "verify").code == 1


def test_records_name_the_external_actor(tmp_path: Path) -> None:
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("--actor", "oidc|alice", "init").code == 0
    record = AuditTrail(cli.home / "audit" / "audit.jsonl").records()[0]
    assert record["actor"].endswith(":oidc|alice") and record["role"] == "it-admin"
    assert record["action"] == "appliance.init" and record["host"]


def test_report_leaves_out_records_not_of_the_appliances_form_and_says_so(tmp_path: Path) -> None:
    """A record whose `objects` is not a mapping, or whose run list is a number (a trail tampered with), was an
    internal error of `audit report`: the compliance officer got no report at all."""
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    assert cli("audit", "verify").code == 0  # recorded with first_bad_seq null: printed as nothing, not "None"
    trail = cli.home / "audit" / "audit.jsonl"
    forged = [{"seq": 90, "ts": "2026-11-26T04:00:00Z", "actor": "mallory", "action": "run.start",
               "objects": "x", "outcome": "success"},
              {"seq": 91, "ts": "2026-11-26T04:00:01Z", "actor": "mallory", "action": "export.request",
               "objects": {"request_id": "exp-1", "runs": 7}, "outcome": "ready"}]
    with trail.open("a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in forged)
    report = cli("audit", "report", "--json")
    assert report.code == 0, report.stderr
    summary = json.loads(report.stdout)
    assert summary["unreadable"] == 2 and "mallory" not in summary["actors"]
    text = cli("audit", "report")
    assert text.code == 0 and "2 record(s) not of the form the appliance writes were left out" in text.stdout
    assert "first_bad_seq=None" not in text.stdout
    from medhelm_local.audit.report import compliance_report
    from medhelm_local.audit.report_pdf import head_rows
    from medhelm_local.audit.trail import AuditTrail

    printable = compliance_report(AuditTrail(trail).records(), since=None, appliance="a")
    assert printable.unreadable == 2 and ("Records left out", "2, not of the form the appliance writes: run audit "
                                          "verify") in head_rows(printable)
    assert cli("audit", "verify").code == 1


def test_a_report_since_a_date_attaches_a_resume_and_an_endpoint_to_a_run_started_before_it() -> None:
    """A run started last month and resumed this month: `audit report --since` listed the resume as a new run
    started this month (resumed 0) and dropped the endpoint it used; they belong to the run it resumed."""
    from medhelm_local.audit.report import parse_time, summarize

    def record(ts: str, action: str, outcome: str = "success", **objects: object) -> dict[str, object]:
        return {"ts": ts, "action": action, "actor": "analyst", "outcome": outcome, "objects": objects}

    records = [
        record("2026-10-30T10:00:00Z", "run.start", run_id="run-1", model="m", datasets={"pubmedqa": "v1"},
               endpoints=[]),
        record("2026-11-02T09:00:00Z", "run.resume", run_id="run-1", model="m", datasets={"pubmedqa": "v1"},
               endpoints=[]),
        record("2026-11-02T09:00:01Z", "endpoint.use", run_id="run-1", url="http://vllm:8000/v1"),
        record("2026-11-02T10:00:00Z", "run.finish", run_id="run-1"),
    ]
    (run,) = summarize(records, parse_time("2026-11-01", "since")).runs
    assert (run.run_id, run.started, run.resumed) == ("run-1", "2026-10-30T10:00:00Z", 1)
    assert run.endpoints == ["http://vllm:8000/v1"] and run.outcome == "success"


def test_a_reports_registration_attempt_shows_no_fingerprint_rather_than_none() -> None:
    """Every registration writes an `attempt` record (no fingerprint yet) before its outcome: `audit report`
    printed it as "fingerprint None  attempt", a Python None in a document for the compliance officer."""
    from medhelm_local.audit.report import render_text, summarize

    def record(outcome: str, **objects: object) -> dict[str, object]:
        return {"ts": "2026-11-02T09:00:00Z", "action": "dataset.register", "actor": "analyst",
                "outcome": outcome, "objects": {"benchmark": "pubmedqa", **objects}}

    text = render_text(summarize([record("attempt", source_name="ori_pqal.json"),
                                  record("success", fingerprint="8b3276be8942ebbd" * 4, version="51f45f95" * 8,
                                         instances=1000)], None))
    assert "None" not in text
    assert "  analyst  pubmedqa  ori_pqal.json  attempt" in text  # the attempt names its file
    assert "pubmedqa  source sha256 8b3276be8942ebbd (dataset version 51f45f9551f45f95)  success" in text


def test_a_reports_registration_names_its_hashes_as_datasets_list_and_the_pdf_do() -> None:
    """The text report printed a registration's source file sha256 as "fingerprint" and the dataset version as
    "stored version", while `datasets list` (and its --json), `runs show` and the report's own PDF call the first
    the source sha256 and the second the dataset version (its "fingerprint" in `datasets list --json`): a compliance
    officer matching the report's "fingerprint" against `datasets list` found another number."""
    from medhelm_local.audit.report import render_text, report_tables, summarize

    record = {"ts": "2026-11-02T09:00:00Z", "action": "dataset.register", "actor": "analyst", "outcome": "success",
              "objects": {"benchmark": "pubmedqa", "fingerprint": "8b3276be8942ebbd" * 4, "version": "51f45f95" * 8,
                          "source_name": "ori_pqal.json"}}
    summary = summarize([record], None)
    text = render_text(summary)
    assert "fingerprint" not in text and "stored version" not in text
    line = next(line for line in text.splitlines() if "pubmedqa" in line)
    assert "source sha256 8b3276be8942ebbd (dataset version 51f45f9551f45f95)" in line
    table = next(t for t in report_tables(summary) if t.id == "report-datasets")
    assert table.columns[4:6] == ["Source sha256", "Dataset version"]
    assert table.rows[0][4:6] == ["8b3276be8942ebbd", "51f45f9551f45f95"]


def test_a_report_lists_every_refused_export_action_with_its_reason_and_actor(evaluated: EvaluatedHome,
                                                                              tmp_path: Path) -> None:
    """A request signed by a key the policy does not list (`not_a_requester`), an approval by an outsider's key, one
    with a garbled signature and a denial of a decided request were each refused and written to the trail, but
    `audit report` (text, --json, the console's printable report) listed none of them: the compliance officer saw
    only the exports that went through. A refused release (of a request nobody approved, to a folder that already
    holds it) was not even written to the trail."""
    from medhelm_local.audit.report import compliance_report
    from medhelm_local.export import sshsig

    cli = evaluated.cli
    people = signers(cli.home)
    outsider = cli("--actor", "mallory", "export", "request", "--runs", evaluated.run_id, "--key",
                   str(people["mallory"].private))
    assert outsider.code == 2, outsider.stderr
    request_id = str(request_export(cli, evaluated.run_id)["request_id"])
    assert cli("export", "approve", request_id, *approve_args(cli.home, "mallory")).code == 2
    garbled = tmp_path / "approval.sig"
    garbled.write_text("-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n", encoding="ascii")
    assert cli("export", "approve", request_id, "--signature", str(garbled)).code == 2
    assert cli("export", "release", request_id, "--out", str(tmp_path / "early")).code == 2
    assert cli("export", "approve", request_id, *approve_args(cli.home)).code == 0
    assert cli("export", "deny", request_id).code == 2
    (tmp_path / "outbox" / request_id).mkdir(parents=True)
    assert cli("export", "release", request_id, "--out", str(tmp_path / "outbox")).code == 2

    summary = json.loads(cli("audit", "report", "--json").stdout)
    refused = [(r["action"], r["reason"], r["request_id"]) for r in summary["export_refusals"]]
    assert refused == [("export.request", "not_a_requester", None),
                       ("export.approve", "not_an_approver", request_id),
                       ("export.approve", "bad_signature", request_id),
                       ("export.release", "not_approved", request_id),
                       ("export.deny", "already_decided", request_id),
                       ("export.release", "destination_exists", request_id)]
    first = summary["export_refusals"][0]
    assert first["actor"].endswith("mallory") and first["runs"] == [evaluated.run_id]
    assert first["key"] == sshsig.fingerprint(sshsig.load_private_key(people["mallory"].private).public_key())
    assert summary["export_refusals"][1]["runs"] == [evaluated.run_id]  # the runs of the request it refers to
    text = cli("audit", "report").stdout
    exports = text.split("\nExports:\n", 1)[1].split("\n\n", 1)[0]
    assert "export.request refused (not_a_requester)" in exports and "mallory" in exports
    for reason in ("not_an_approver", "bad_signature", "not_approved", "already_decided", "destination_exists"):
        assert f"refused ({reason})" in exports
    printable = compliance_report(AuditTrail(cli.home / "audit" / "audit.jsonl").records(), since=None,
                                  appliance="a")
    table = next(t for t in printable.tables if t.id == "report-export-refusals")
    assert [row[3] for row in table.rows] == ["not_a_requester", "not_an_approver", "bad_signature",
                                              "not_approved", "already_decided", "destination_exists"]


def test_a_report_of_an_edited_trail_says_the_trail_does_not_verify(evaluated: EvaluatedHome,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's finish edited in the trail (its counts and outcome) was reported as the trail said, with no word
    that the trail no longer verifies, by `audit report`, its PDF and the console's report page: an officer filing
    the report took the edited numbers for what happened. Each now says whether the trail verifies against the
    pinned key and, where it does not, from which record. (A console cannot start on a trail that does not verify,
    as no command can: the officer here signed in before the edit.)"""
    from starlette.testclient import TestClient

    from medhelm_local.audit.anchor import FINGERPRINT_ENV
    from medhelm_local.audit.report_pdf import head_rows
    from medhelm_local.home import Home
    from medhelm_local.home.config import ConsoleRole
    from medhelm_local.webconsole.app import create_app
    from medhelm_local.webconsole.identity import StandaloneSessions

    cli, home = evaluated.cli, Home(evaluated.home)
    unpinned = cli("audit", "report")
    assert unpinned.code == 0 and "Trail integrity: intact, but UNANCHORED" in unpinned.stdout
    pinned = json.loads(cli("keys", "show", "--json").stdout)["signing_key_fingerprint"]
    monkeypatch.setenv(FINGERPRINT_ENV, pinned)
    intact = cli("audit", "report")
    assert f"Trail integrity: intact: every record checked against the pinned key {pinned}" in intact.stdout
    sessions = StandaloneSessions(user="carl.compliance", roles=frozenset({ConsoleRole.COMPLIANCE}))
    with TestClient(create_app(home, sessions), raise_server_exceptions=False) as console:
        assert console.get(f"/login?token={sessions.new_login_token()}").status_code == 200
        trail = home.audit_path
        lines = trail.read_text(encoding="utf-8").splitlines(keepends=True)
        (position,) = [i for i, line in enumerate(lines) if json.loads(line)["action"] == "run.finish"]
        finish = json.loads(lines[position])
        finish["objects"]["scored"], finish["outcome"] = 1000, "recovered"
        lines[position] = json.dumps(finish, separators=(",", ":"), sort_keys=True) + "\n"
        trail.write_text("".join(lines), encoding="utf-8")
        page = console.get("/audit/report")
    verdict = f"NOT INTACT from record seq {finish['seq']} ("
    assert page.status_code == 200 and verdict in page.text

    report = cli("audit", "report")
    assert report.code == 0 and f"Trail integrity: {verdict}" in report.stdout.splitlines()[1], report.stderr
    summary = json.loads(cli("audit", "report", "--json").stdout)
    assert summary["integrity"]["intact"] is False and summary["integrity"]["first_bad_seq"] == finish["seq"]
    assert summary["integrity"]["key"] == pinned and summary["integrity"]["anchored"] is True
    from medhelm_local.audit.report import compliance_report, trail_integrity

    printable = compliance_report(AuditTrail(trail).records(), since=None, appliance="a",
                                  integrity=trail_integrity(home.audit_path, home.keys_dir))
    assert dict(head_rows(printable))["Trail integrity"].startswith(verdict)
    assert cli("audit", "verify").code == 1


def test_a_registration_refused_for_its_input_says_why_in_words(tmp_path: Path) -> None:
    """A refusal of the input with no kind of its own (here a pipe, which can be read only once; a missing file is
    NotFoundError) is recorded as BadInputError, and read "rejected: BadInputError" in the report's Datasets table:
    a class name where every other kind is said in words."""
    import os

    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    os.mkfifo(tmp_path / "notes.csv")
    assert cli("datasets", "register", "hospice_referral", str(tmp_path / "notes.csv")).code == 2
    (registration,) = [d for d in json.loads(cli("audit", "report", "--json").stdout)["datasets"]
                       if d["outcome"] == "rejected"]
    assert registration["reason"] == "BadInputError" and registration["source_name"] == "notes.csv"
    text = cli("audit", "report").stdout
    assert "rejected: the file or the benchmark's options were refused before anything was stored" in text
    assert "BadInputError" not in text


def test_paths_and_names_a_user_types_reach_the_trail_only_where_they_hold_no_patient_data(
        evaluated: EvaluatedHome, tmp_path: Path) -> None:
    """`export release REQ --out /media/Okafor_Margaret_1960-03-04` (refused: not approved), `keys export-public --out
    Okafor_1960-03-04.pub` and `benchmarks remove` of a spec file put in the home by hand recorded the folder, file
    name or id as typed: anyone could write a patient's name and birth date into the trail. Each part that reads as
    patient data is now withheld, saying why; the rest, and the request id the appliance generated, as before."""
    cli = evaluated.cli
    trail = cli.home / "audit" / "audit.jsonl"
    request_id = str(request_export(cli, evaluated.run_id)["request_id"])
    refused = cli("export", "release", request_id, "--out", str(tmp_path / "Okafor_Margaret_1960-03-04"))
    assert refused.code == 2, refused.stderr
    assert cli("keys", "export-public", "--out", str(tmp_path / "Okafor_MRN7730019942.pub")).code == 0
    (cli.home / "benchmarks").mkdir(exist_ok=True)
    (cli.home / "benchmarks" / "okafor_19600304.yaml").write_text("id: okafor_19600304\n")
    assert cli("benchmarks", "remove", "okafor_19600304").code == 0
    assert cli("export", "approve", request_id, *approve_args(cli.home)).code == 0
    (tmp_path / "outbox").mkdir()
    assert cli("export", "release", request_id, "--out", str(tmp_path / "outbox")).code == 0

    text = trail.read_text() + cli("audit", "report").stdout
    assert "Okafor" not in text and "okafor" not in text and "1960" not in text and "7730019942" not in text
    records = AuditTrail(trail).records()
    destinations = [r["objects"]["destination"] for r in records
                    if r["action"] in ("export.release", "keys.export_public")]
    assert destinations[0] == f"{tmp_path.resolve()}/[withheld:date]"
    assert destinations[1] == "[withheld:phi_pattern]"
    assert destinations[-1] == f"{(tmp_path / 'outbox').resolve()}/{request_id}"
    (removed,) = [r for r in records if r["action"] == "benchmark.remove"]
    assert removed["objects"]["benchmark"] == "[withheld:date]"
