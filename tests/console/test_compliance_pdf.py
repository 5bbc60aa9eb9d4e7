"""The compliance report as PDF, drawn in Python (no browser on the appliance): ``audit report --pdf`` and the
console's download. The PDF parses back (pypdf), carries the report's tables (the same as the HTML page), and no
patient data, link, script or embedded file; only the compliance role can download it."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pypdf

from medhelm_local.audit.report import compliance_report
from medhelm_local.audit.report_pdf import latin1, render_pdf
from tests.console.conftest import MEDICATION_SECRET, QUESTION, ConsoleHome
from tests.console.proxy import HeaderProxy


def pdf_text(content: bytes) -> str:
    reader = pypdf.PdfReader(io.BytesIO(content), strict=True)
    assert reader.metadata is not None and reader.metadata.title is not None
    assert reader.metadata.title.startswith("Compliance report")
    return "\n".join(page.extract_text() for page in reader.pages)


def assert_nothing_but_text(content: bytes) -> None:
    """No action, link, script, form or embedded file: a document to read and file, nothing to run."""
    assert content.startswith(b"%PDF-") and content.rstrip().endswith(b"%%EOF")
    reader = pypdf.PdfReader(io.BytesIO(content), strict=True)
    for page in reader.pages:
        assert "/Annots" not in page  # no links
    root = reader.root_object
    for key in ("/AA", "/AcroForm", "/Names"):
        assert key not in root, key
    # fpdf2 opens on the first page at page width: a destination (page, /FitH), never an action dictionary
    assert isinstance(root.get("/OpenAction", []), list)
    for marker in (b"/JavaScript", b"/JS", b"/URI", b"/Launch", b"/EmbeddedFile", b"/FontFile"):
        assert marker not in content, marker


def test_audit_report_pdf_from_the_cli(console_home: ConsoleHome, tmp_path: Path) -> None:
    out = tmp_path / "reports" / "compliance.pdf"
    result = console_home.cli("audit", "report", "--pdf", str(out), "--json")
    assert result.code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["pdf"] == str(out) and out.is_file()
    content = out.read_bytes()
    assert_nothing_but_text(content)
    text = pdf_text(content)
    for title in ("Compliance report", "Who acted", "Datasets registered", "Runs", "Exports", "Key events",
                  "Audit verifications", "Last signed checkpoint"):
        assert title in text, title
    compact = re.sub(r"\s", "", text)  # a long identifier may wrap in its table cell
    for run_id in console_home.runs.values():
        assert run_id in compact
    assert console_home.export_request in compact and "hospice_referral" in text and "medication_qa" in text
    # The records count is the trail's, as the HTML page and `audit report --json` give it.
    assert f"Records covered {payload['records']}" in text
    # Aggregate metadata only: no prompt, answer or extract value.
    for secret in (MEDICATION_SECRET, QUESTION, "Synthetic note", "grapefruit"):
        assert secret.lower() not in text.lower() and secret.encode() not in content

    since = console_home.cli("audit", "report", "--since", "2999-01-01", "--pdf", str(out))
    assert since.code == 0 and "Records covered 0 since 2999-01-01" in pdf_text(out.read_bytes())
    bad = console_home.cli("audit", "report", "--pdf", str(tmp_path))
    assert bad.code == 2 and "directory" in bad.stderr


def test_pdf_writes_every_character() -> None:
    records = [{"seq": 1, "ts": "2026-11-01T08:00:00Z", "actor": "zoë.müller", "action": "run.start",
                "outcome": "started", "objects": {"run_id": "run-1", "model": "qwen-中文", "datasets": {},
                                                  "endpoints": []}}]
    report = compliance_report(records, since=None, appliance="st-luke", generated=datetime(2026, 11, 2, tzinfo=UTC))
    text = pdf_text(render_pdf(report))
    assert "zoë.müller" in text and "qwen-<U+4E2D><U+6587>" in text and "2026-11-02T00:00:00+00:00" in text
    assert latin1("a→b") == "a<U+2192>b"


def test_console_offers_the_pdf_to_compliance_only(proxies: dict[str, HeaderProxy], console_home: ConsoleHome,
                                                   tmp_path: Path) -> None:
    page = httpx.get(proxies["carl.compliance"].url + "/audit/report?since=2026-01-01")
    assert page.status_code == 200
    link = re.search(r'id="report-pdf" href="([^"]+)"', page.text)
    assert link is not None and link.group(1) == "/audit/report.pdf?since=2026-01-01"
    reply = httpx.get(proxies["carl.compliance"].url + link.group(1).replace("&amp;", "&"))
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/pdf"
    assert reply.headers["content-disposition"].startswith('attachment; filename="compliance-report-')
    assert_nothing_but_text(reply.content)
    text = pdf_text(reply.content)
    assert console_home.runs["model-a"] in re.sub(r"\s", "", text) and "since 2026-01-01" in text
    assert MEDICATION_SECRET not in text
    (tmp_path / "compliance-report.pdf").write_bytes(reply.content)
    for user in ("cleo.clinician", "ines.informatics", "ivan.it"):
        refused = httpx.get(proxies[user].url + "/audit/report.pdf")
        assert refused.status_code == 403 and not refused.content.startswith(b"%PDF"), user


def test_a_long_trail_spans_pages_with_its_headings_and_loses_no_text() -> None:
    records = [{"seq": i, "ts": "2026-11-01T08:00:00Z", "actor": "a" * 150 if i == 7 else f"user{i % 5}",
                "action": "run.start", "outcome": "started",
                "objects": {"run_id": f"run-{i:04d}", "model": "model-x", "endpoints": ["http://10.0.0.5:8000/v1"],
                            "datasets": {f"bench{j}": {"fingerprint": f"{i:02d}{j}" * 20} for j in range(4)}}}
               for i in range(120)]
    records += [{"seq": 120 + i, "ts": "2026-11-01T09:00:00Z", "actor": "user0", "action": "run.finish",
                 "outcome": "success", "objects": {"run_id": f"run-{i:04d}"}} for i in range(120)]  # none unfinished
    report = compliance_report(records, since=None, appliance="st-luke")
    reader = pypdf.PdfReader(io.BytesIO(render_pdf(report)), strict=True)
    pages = [page.extract_text() for page in reader.pages]
    assert len(pages) > 3
    runs = [page for page in pages[1:] if "run-0" in page]
    assert len(runs) > 2
    for page in runs:  # the runs table continues with its heading on every page it spans
        assert page.startswith("Started Actor Model Run"), page[:80]
    compact = re.sub(r"\s", "", "".join(pages))
    assert "a" * 150 in compact  # a word wider than its column is broken, not cut
    assert all(f"run-{i:04d}" in compact for i in range(120))
