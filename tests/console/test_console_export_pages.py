"""The compliance officer's export and audit pages, read as that person reads them: what a refusal says and where it
leads, what happens after approval, why a request is blocked and what to do about it. Each test works on its own
copy of the console's home (requests are approved and blocked here), served in this process."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tests.compliance.conftest as compliance_fixtures
from tests.compliance.inproc import InProcessCli
from tests.console.conftest import ConsoleHome, ready_export


@dataclass
class Site:
    cli: InProcessCli
    client: Any  # starlette TestClient, signed in as a compliance officer
    ready: str  # a ready export request

    def csrf(self, page: str) -> str:
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', self.client.get(page).text)
        assert token is not None, page
        return token.group(1)

    def digest(self, request_id: str) -> str:
        found = re.search(r'<pre class="text" id="digest">([0-9a-f]{64})</pre>',
                          self.client.get(f"/exports/{request_id}").text)
        assert found is not None
        return found.group(1)

    def upload(self, request_id: str, signature: Path) -> Any:
        return self.client.post(f"/exports/{request_id}/approve", data={"csrf": self.csrf(f"/exports/{request_id}")},
                                files={"signature_file": ("approval.sig", signature.read_bytes())})


@pytest.fixture
def site(console_home: ConsoleHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    with ready_export(console_home, tmp_path, monkeypatch) as (cli, client, _, request_id):
        yield Site(cli=cli, client=client, ready=request_id)


def text_of(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_after_approval_the_page_says_the_bundle_has_not_left_and_how_it_is_released(site: Site) -> None:
    """Approving in the console signs the bundle; it does not release it. The officer is told so, and given the
    exact command that releases it."""
    people = compliance_fixtures.signers(site.cli.home)
    reply = site.upload(site.ready, people[compliance_fixtures.APPROVER].sign(site.digest(site.ready)))
    assert reply.status_code == 200 and 'id="approved"' in reply.text
    page = text_of(reply.text)
    assert "Not released yet" in page
    assert f"medhelm-local export release {site.ready} --out DIR" in page
    # once released, the page says where to, instead
    released = site.cli("export", "release", site.ready, "--out", str(site.cli.home.parent / "outbox"))
    assert released.code == 0, released.stderr
    page = text_of(site.client.get(f"/exports/{site.ready}").text)
    assert "Not released yet" not in page and f"Released to {site.cli.home.parent / 'outbox'}" in page


def test_a_refused_approval_says_it_was_refused_and_leads_back_to_the_request(site: Site) -> None:
    """A signature by a key the policy does not list, or no signature at all: the page is titled as a refused approval
    (it read 'Cannot show this page'), says nothing was approved and links back to the request to try again."""
    people = compliance_fixtures.signers(site.cli.home)
    digest = site.digest(site.ready)
    empty = site.client.post(f"/exports/{site.ready}/approve", data={"csrf": site.csrf(f"/exports/{site.ready}")})
    for reply in (site.upload(site.ready, people["mallory"].sign(digest)), empty):
        assert reply.status_code in (400, 409)
        assert "<h1>Approval refused</h1>" in reply.text and "Cannot show this page" not in reply.text
        assert "Nothing was approved" in reply.text
        assert f'<a id="back" href="/exports/{site.ready}">' in reply.text
    refused = site.upload(site.ready, people["mallory"].sign(digest))
    assert "not listed under approval.approvers" in text_of(refused.text)
    assert site.client.get(f"/exports/{site.ready}").text.count('id="export-status">ready<') == 1


def test_a_tampered_bundle_refused_at_approval_is_an_approval_refused_page_with_the_reason(site: Site) -> None:
    """The approver's signature is fine, but the candidate in the home was changed after the request: approval is
    refused (as `export release --signature` refuses it, exit 1, audited). The console showed a generic 'Cannot show
    this page' (HTTP 400), as if the page were broken, and did not say that nothing was approved."""
    people = compliance_fixtures.signers(site.cli.home)
    digest = site.digest(site.ready)
    bundle = site.cli.home / "exports" / site.ready / "bundle"
    with (bundle / "leaderboard.csv").open("a") as handle:
        handle.write("Ada Quillonby\n")
    reply = site.upload(site.ready, people[compliance_fixtures.APPROVER].sign(digest))
    assert reply.status_code == 409
    assert "<h1>Approval refused</h1>" in reply.text and "Cannot show this page" not in reply.text
    page = text_of(reply.text)
    assert "bundle/leaderboard.csv" in page and "Nothing was approved" in page
    assert f"medhelm-local export deny {site.ready}" in page  # what to do about it
    assert site.client.get(f"/exports/{site.ready}").text.count('id="export-status">ready<') == 1


def test_a_blocked_request_lists_its_findings_and_says_how_to_deny_it(site: Site, console_home: ConsoleHome) -> None:
    """A model named like a medical record number blocks the export (phi_patterns). The page lists where each finding
    is (file, place, rule, never the value) and gives the command that denies the request: it showed only
    '13 finding(s)' and said 'Deny it' with no button and no command."""
    cli = site.cli
    added = cli("models", "add", "MRN-7730019942", "--base-url", console_home.servers[0].base_url,
                "--served-model", "model-a")
    assert added.code == 0, added.stderr
    run = cli("run", "--model", "MRN-7730019942", "--benchmarks", "hospice_referral", "--json")
    assert run.code == 0, run.stderr
    request = compliance_fixtures.request_export(cli, str(json.loads(run.stdout)["run_id"]))
    assert request["status"] == "blocked"
    page = text_of(site.client.get(f"/exports/{request['request_id']}").text)
    assert "phi_patterns: " in page and "report.html" in page and "PHI pattern mrn" in page
    assert f"medhelm-local export deny {request['request_id']}" in page
    assert "7730019942" not in page.split("Bundle preview")[0].split("Checks", 1)[1]  # findings never the value


def test_the_report_ties_each_run_to_the_registration_of_its_dataset(site: Site) -> None:
    """The runs table cites each benchmark's dataset version; the registrations table showed only the source file's
    sha256 (another hash), so an officer could not tell which registration a run used. It shows both now."""
    from html import unescape

    html = site.client.get("/audit/report").text
    datasets = re.search(r'<table id="report-datasets">(.*?)</table>', html, re.S)
    runs = re.search(r'<table id="report-runs">(.*?)</table>', html, re.S)
    assert datasets is not None and runs is not None
    assert "Dataset version" in datasets.group(1) and "Source sha256" in datasets.group(1)
    cited = set(re.findall(r"hospice_referral ([0-9a-f]{16})", unescape(runs.group(1))))
    assert cited and all(version in datasets.group(1) for version in cited), cited


def test_an_unanchored_verification_is_not_shown_as_a_plain_intact(site: Site) -> None:
    """Without a key pinned outside the home the trail is checked against the home's own key: the page showed a green
    INTACT with the caveat in the 'Key source' line. The warning now stands under the verdict."""
    reply = site.client.post("/audit/verify", data={"csrf": site.csrf("/audit")})
    assert reply.status_code == 200 and ">INTACT<" in reply.text
    warning = re.search(r'<p class="warn" id="unanchored">(.*?)</p>', reply.text, re.S)
    assert warning is not None and "MEDHELM_AUDIT_KEY_FINGERPRINT" in warning.group(1)


def test_a_mistyped_audit_filter_keeps_the_form_and_what_was_typed(site: Site) -> None:
    """A date the filter cannot read: the audit page again, with every field as typed and the problem beside it; it
    was an error page without the form, and the actor and action typed were lost."""
    reply = site.client.get("/audit", params={"actor": "ines.informatics", "action": "export.", "since": "25/11/2026"})
    assert reply.status_code == 400 and "<h1>Audit trail</h1>" in reply.text
    for value in ("ines.informatics", "export.", "25/11/2026"):
        assert f'value="{value}"' in reply.text, value
    assert re.search(r'id="filter-error">since: expected an ISO date', reply.text)


def test_an_audit_filter_ending_before_it_starts_says_so(site: Site) -> None:
    """Since and Until swapped: the page read "0 of N records match", as if nothing had happened in that window. It
    now keeps the form, marks both fields and says that Until must be after Since."""
    reply = site.client.get("/audit", params={"since": "2026-11-26T15:50Z", "until": "2026-11-26T15:40Z"})
    assert reply.status_code == 400 and 'id="audit"' in reply.text and "records match" not in reply.text
    error = re.search(r'id="filter-error">([^<]*)<', reply.text)
    assert error is not None
    assert "until (2026-11-26T15:40:00Z) is not after since (2026-11-26T15:50:00Z)" in error.group(1)
    for name in ("since", "until"):
        assert re.search(rf'name="{name}" value="[^"]*"[^>]*aria-invalid="true"', reply.text), name


def test_the_approved_notice_is_never_shown_for_a_request_this_officer_did_not_approve(site: Site) -> None:
    """"Approved with your signature" came from the address alone (?approved=1, where an approval leads): a link
    with it showed a ready request as approved, and another officer as its approver. Now only the approver, on an
    approved request, reads it."""
    from starlette.testclient import TestClient

    from medhelm_local.home import Home
    from medhelm_local.home.config import ConsoleRole
    from medhelm_local.webconsole.app import create_app
    from medhelm_local.webconsole.identity import StandaloneSessions

    ready = site.client.get(f"/exports/{site.ready}?approved=1")
    assert ready.status_code == 200 and 'id="export-status">ready<' in ready.text
    assert 'id="approved"' not in ready.text
    people = compliance_fixtures.signers(site.cli.home)
    approved = site.upload(site.ready, people[compliance_fixtures.APPROVER].sign(site.digest(site.ready)))
    assert approved.status_code == 200 and 'id="approved"' in approved.text  # the approver, just after approving
    sessions = StandaloneSessions(user="dora", roles=frozenset({ConsoleRole.COMPLIANCE}))
    with TestClient(create_app(Home(site.cli.home), sessions), raise_server_exceptions=False) as other:
        assert other.get(f"/login?token={sessions.new_login_token()}").status_code == 200
        page = other.get(f"/exports/{site.ready}?approved=1")
        assert page.status_code == 200 and 'id="export-status">approved<' in page.text
        assert 'id="approved"' not in page.text


def test_every_refused_approval_is_in_the_audit_trail(site: Site) -> None:
    """A refusal the export module makes (a key it does not list) was audited; one the console made before asking it
    (nothing pasted or uploaded, a file that is no signature) left no record, though every refusal is one: an
    attempt to approve an export, however it ended, is what a compliance review looks for."""
    from medhelm_local.audit import AuditTrail
    from medhelm_local.home import Home

    def refusals() -> list[dict[str, Any]]:
        return [r for r in AuditTrail(Home(site.cli.home).audit_path).records()
                if r.get("action") == "export.approve" and r.get("outcome") == "refused"]

    people = compliance_fixtures.signers(site.cli.home)
    before = len(refusals())  # the home is a copy of the shared one: other tests' refusals may be in it
    assert site.upload(site.ready, people["mallory"].sign(site.digest(site.ready))).status_code == 409
    assert [r["objects"]["reason"] for r in refusals()[before:]] == ["not_an_approver"]
    empty = site.client.post(f"/exports/{site.ready}/approve", data={"csrf": site.csrf(f"/exports/{site.ready}")})
    junk = site.client.post(f"/exports/{site.ready}/approve", data={"csrf": site.csrf(f"/exports/{site.ready}")},
                            files={"signature_file": ("approval.sig", b"\xff\xfe not a signature")})
    for reply in (empty, junk):
        assert reply.status_code == 400 and "<h1>Approval refused</h1>" in reply.text
    recorded = refusals()[before + 1:]
    assert len(recorded) == 2
    for record in recorded:
        assert record["actor"] == "carl" and record["role"] == "compliance"
        assert record["objects"]["request_id"] == site.ready and record["objects"]["reason"] == "signature_unreadable"
    assert site.client.get(f"/exports/{site.ready}").text.count('id="export-status">ready<') == 1


def test_verifying_a_tampered_trail_shows_where_it_breaks(site: Site) -> None:
    """Someone edited a record (a run's outcome) after it was written. Pressing "Verify" showed "Audit trail
    unavailable ... cannot be written" (the page failed closed because its own audit.verify record could not be
    appended to a damaged trail), so the one check meant to find tampering never said that it had. The page now
    gives the verdict, the first bad record and the problems, and says the check itself could not be recorded."""
    trail = site.cli.home / "audit" / "audit.jsonl"
    token = site.csrf("/audit")
    lines = trail.read_text(encoding="utf-8").splitlines(keepends=True)
    edited = next(i for i, line in enumerate(lines) if '"action":"run.finish"' in line)
    seq = json.loads(lines[edited])["seq"]
    lines[edited] = lines[edited].replace('"outcome":"success"', '"outcome":"ok"')  # the file's size changes
    trail.write_text("".join(lines), encoding="utf-8")
    reply = site.client.post("/audit/verify", data={"csrf": token})
    assert reply.status_code == 409 and "Audit trail unavailable" not in reply.text
    assert re.search(rf'id="verdict">NOT INTACT: first bad record seq {seq}<', reply.text)
    assert f"record {seq} differs" in text_of(reply.text)
    assert re.search(r'id="not-recorded">[^<]*could not be recorded in the trail', reply.text)


def test_an_officer_can_refuse_a_ready_request_in_the_console(site: Site) -> None:
    """A ready request's page offered only "Approve with this signature": an officer who decided to refuse it found
    no way to, and no word on how (the command was given for blocked requests only). The page now has a Deny
    button (no key needed: denying can only stop a release), audited under the officer's name, after which the
    request reads denied and can no longer be approved; a second deny is refused and says why."""
    page = site.client.get(f"/exports/{site.ready}").text
    assert 'id="deny-form"' in page and "can never be released" in text_of(page)
    reply = site.client.post(f"/exports/{site.ready}/deny", data={"csrf": site.csrf(f"/exports/{site.ready}")},
                             follow_redirects=False)
    assert reply.status_code == 303 and reply.headers["location"] == f"/exports/{site.ready}"
    shown = site.client.get(f"/exports/{site.ready}").text
    assert 'id="export-status">denied<' in shown and 'id="approve-form"' not in shown
    assert 'id="deny-form"' not in shown
    records = [r for r in json.loads(site.cli("audit", "show", "--action", "export.deny", "--json").stdout)]
    assert [(r["outcome"], r["actor"].split(":")[-1]) for r in records] == [("denied", "carl")]
    assert site.cli("export", "list", "--json").code == 0
    again = site.client.post(f"/exports/{site.ready}/deny", data={"csrf": site.csrf("/exports")})
    assert again.status_code == 409 and "was already denied" in text_of(again.text)
    assert f'id="back" href="/exports/{site.ready}"' in again.text


def test_the_bundle_preview_shows_every_table_that_would_leave(site: Site) -> None:
    """The preview showed leaderboard.csv only: the per-benchmark cells (cells.csv, what most of an export is, with
    what was suppressed and why) and the category means were a sha256 in the file list. Each CSV of the bundle is
    now shown as it would leave, cell for cell."""
    import csv
    from html import unescape

    page = site.client.get(f"/exports/{site.ready}").text
    bundle = site.cli.home / "exports" / site.ready / "bundle"
    for name in ("leaderboard.csv", "categories.csv", "cells.csv"):
        rows = list(csv.reader(io.StringIO((bundle / name).read_text(encoding="utf-8"))))
        table = re.search(rf'<table id="bundle-{name.removesuffix(".csv")}">(.*?)</table>', page, re.S)
        assert table is not None, name
        shown = [[unescape(c) for c in re.findall(r"<t[hd]>([^<]*)</t[hd]>", row)]
                 for row in re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)]
        assert shown == rows, name


def _audit_legend_and_rows(site: Site) -> tuple[str, list[list[str]]]:
    """The audit page's legend (its HTML) and the cells of each record row it lists."""
    page = site.client.get("/audit").text
    legend = re.search(r'<details class="noprint" id="audit-legend">(.*?)</details>', page, re.S)
    assert legend is not None
    table = page.split('<table id="audit">')[1].split("</table>")[0]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)]
    return legend.group(1), [row for row in cells if len(row) == 7]


def test_the_audit_page_explains_its_columns_and_every_action_it_lists(site: Site) -> None:
    """The audit page listed actions such as endpoint.use and outcomes such as attempt with no word on what they
    mean. A legend now explains each column, the intent outcomes, and the first word of every action listed."""
    legend, cells = _audit_legend_and_rows(site)
    explained = set(re.findall(r"<li><code>([a-z_]+)\.</code>: [^<]+</li>", legend))
    listed = {row[4].split(".")[0] for row in cells}  # Seq, Time, Actor, Role, Action, ...
    assert listed and listed <= explained, listed - explained
    assert "intent_seq" in legend and "never patient text" in legend


def test_the_export_list_names_the_approver_as_the_cli_and_the_request_page_do(site: Site) -> None:
    """An approved request's row in the console's list said only who ran the approval ("Decided by root", the
    account), where `export list` says "approved by carol-compliance" and the request's own page "by root (approver
    carol-compliance)": the officer scanning the list could not see whose key released it. The row names both."""
    approved = site.cli("export", "approve", site.ready, *compliance_fixtures.approve_args(site.cli.home))
    assert approved.code == 0, approved.stderr
    page = site.client.get("/exports").text
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", page, re.S) if site.ready in r)
    decided = re.findall(r"<td>([^<]*)</td>", row)[-1]
    assert decided.endswith(f"(approver {compliance_fixtures.APPROVER})"), decided
    assert f" by {decided}</dd>" in site.client.get(f"/exports/{site.ready}").text  # as the request's page says


def test_the_audit_legend_explains_every_outcome_and_whose_decision_a_denial_was(site: Site) -> None:
    """The legend explained started, attempt, refused and denied only, and called every denied "the appliance
    refused it": an export request a compliance officer denied read as the appliance's refusal, and failure,
    rejected, intact, recovered or abandoned (a run concluded late after its process was killed) had no word at all.
    Each outcome the page lists is now explained, a denial saying whose decision it was."""
    from html import unescape

    assert site.cli("export", "deny", site.ready).code == 0
    legend, cells = _audit_legend_and_rows(site)
    explained = dict(re.findall(r"<li><code>([a-z_]+)</code>: ([^<]+)</li>", legend))
    listed = {row[5] for row in cells}  # Seq, Time, Actor, Role, Action, Outcome, Objects
    assert {"denied", "ready", "success"} <= listed and listed <= set(explained), listed - set(explained)
    assert {"failure", "rejected", "intact", "failed", "recovered", "abandoned"} <= set(explained)
    assert "by a compliance officer for an export request" in unescape(explained["denied"])


def test_the_compliance_report_says_which_file_a_rejected_registration_was_and_why(site: Site,
                                                                                   tmp_path: Path) -> None:
    """A refused registration read "hospice_referral ... rejected" in the report's Datasets table, with no file and
    no reason, though the audit record holds both (the file's name and the error's kind, never its message). The
    table now names the file and says why in words."""
    bad = tmp_path / "hospice_bad.csv"
    bad.write_text("prompt,context,label\nQ,note,Z\n", encoding="utf-8")
    assert site.cli("datasets", "register", "hospice_referral", str(bad)).code == 2
    html = site.client.get("/audit/report").text
    table = re.search(r'<table id="report-datasets">(.*?)</table>', html, re.S)
    assert table is not None
    rows = [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in re.findall(r"<tr>(.*?)</tr>", table.group(1),
                                                                                 re.S)]
    assert "Source file" in rows[0]
    assert any("hospice_bad.csv" in row and "rejected: the file did not read as the benchmark expects" in row
               for row in rows), rows
