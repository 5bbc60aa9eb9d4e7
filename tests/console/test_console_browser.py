"""The console in a real browser: headless Chromium (Debian's chromium + chromium-driver) driven by Selenium,
through each role's pages behind a stand-in authenticating proxy, over a home holding real runs.

Each page's content and permissions are asserted, and a screenshot of each page is saved under the test's
tmp output (``screenshots/``)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import httpx
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.print_page_options import PrintOptions
from selenium.webdriver.support.ui import WebDriverWait

from tests.console.conftest import (
    MEDICATION_SECRET,
    ConsoleHome,
    RunningConsole,
    screenshot,
)
from tests.console.proxy import HeaderProxy


def click_and_wait(driver: Any, element: Any) -> None:
    """Submit a form by clicking, and wait until the browser has replaced the page."""
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()

    def replaced(_driver: Any) -> bool:
        try:
            old.is_enabled()
        except WebDriverException:  # stale, or the node belongs to a document that is gone
            return True
        return False

    WebDriverWait(driver, 30).until(replaced)
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")


def visit(driver: Any, proxy: HeaderProxy, path: str) -> str:
    driver.get(proxy.url + path)
    return str(driver.find_element(By.TAG_NAME, "body").text)


def heading(driver: Any) -> str:
    return str(driver.find_element(By.TAG_NAME, "h1").text)


def records(home: ConsoleHome, action: str, actor: str) -> list[dict[str, Any]]:
    return [r for r in home.audit_records() if r.get("action") == action and r.get("actor") == actor]


def test_informatics_pages(browser: Any, proxies: dict[str, HeaderProxy], console_home: ConsoleHome,
                           shots: Path) -> None:
    proxy = proxies["ines.informatics"]
    body = visit(browser, proxy, "/")
    assert "ines.informatics" in body and "Clinical informatics" in body
    assert "Audit trail" not in body  # navigation offers only this user's pages
    screenshot(browser, shots, "informatics-home")

    body = visit(browser, proxy, "/leaderboard")
    assert heading(browser) == "Leaderboard"
    rows = browser.find_elements(By.CSS_SELECTOR, "#leaderboard tbody tr")
    assert sorted(r.find_elements(By.TAG_NAME, "td")[1].text for r in rows) == ["model-a", "model-b"]
    for row in rows:  # the win rate's and the macro average's 95% CIs beside them
        cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        interval = r"\[\d\.\d{3}, \d\.\d{3}\]"
        assert re.fullmatch(interval, cells[3]) and re.fullmatch(interval, cells[6]), cells
        assert float(cells[6][1:6]) <= float(cells[5]) <= float(cells[6][8:13])
    assert "MedHELM rule" in body and "95% bootstrap confidence interval" in body
    scores = browser.find_element(By.ID, "scores").text
    assert "hospice_referral" in scores and "medication_qa" in scores
    assert re.search(r"\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] n=25", scores), scores  # score, 95% CI, n
    pairs = browser.find_element(By.ID, "pairwise").text  # paired bootstrap: same instances, both models
    assert "model-a model-b" in pairs and re.search(r"\[-?\d\.\d{3}, -?\d\.\d{3}\] 25", pairs), pairs
    for figure in ("fig-heatmap", "fig-categories", "fig-scatter"):
        assert browser.find_elements(By.CSS_SELECTOR, f"#{figure} svg"), figure
    assert "model-a" in browser.find_element(By.ID, "fig-scatter").get_attribute("innerHTML")
    screenshot(browser, shots, "informatics-leaderboard")

    # The HELM win rule is a choice of the page, without script (a plain GET form).
    visit(browser, proxy, "/leaderboard?rule=helm")
    assert "HELM rule" in browser.find_element(By.TAG_NAME, "main").text

    body = visit(browser, proxy, "/runs")
    for run_id in console_home.runs.values():
        assert run_id in body
    assert "31 / 31" in body  # answered / planned per run: 25 hospice notes + 6 medication questions
    screenshot(browser, shots, "informatics-runs")

    run_a = console_home.runs["model-a"]
    body = visit(browser, proxy, f"/runs/{run_a}")
    assert f"Run {run_a}" == heading(browser)
    assert "Manifest sha256" in body and "Cut at token limit" in body
    assert browser.find_elements(By.CSS_SELECTOR, "#run-benchmarks progress")
    screenshot(browser, shots, "informatics-run")

    body = visit(browser, proxy, "/benchmarks")
    listing = browser.find_element(By.ID, "benchmarks").text
    assert "MedicationQA" in listing and "PubMedQA" in listing
    row = next(r.text for r in browser.find_elements(By.CSS_SELECTOR, "#benchmarks tbody tr")
               if "medication_qa" in r.text)
    assert " 6 " in f" {row} "  # the registered instances
    screenshot(browser, shots, "informatics-benchmarks")

    body = visit(browser, proxy, "/benchmarks/medication_qa")
    assert "MedicationQA" in heading(browser) and "accuracy" in body
    assert run_a in browser.find_element(By.ID, "benchmark-results").text
    screenshot(browser, shots, "informatics-benchmark")

    before = len(records(console_home, "console.view_instances", "ines.informatics"))
    body = visit(browser, proxy, f"/runs/{run_a}/medication_qa/instances")
    assert MEDICATION_SECRET in body  # prompt text: patient-level
    assert "judge-1" in body  # the jury's ratings beside each response
    assert "recorded in the audit trail" in body
    screenshot(browser, shots, "informatics-instances")
    viewed = records(console_home, "console.view_instances", "ines.informatics")
    assert len(viewed) == before + 1
    assert viewed[-1]["objects"]["run_id"] == run_a and viewed[-1]["objects"]["benchmark"] == "medication_qa"

    # Not this role's pages: refused, and the refusal is on record.
    visit(browser, proxy, "/audit")
    assert heading(browser) == "Not allowed"
    assert records(console_home, "console.access_denied", "ines.informatics")


def test_compliance_pages(browser: Any, proxies: dict[str, HeaderProxy], console_home: ConsoleHome,
                          shots: Path) -> None:
    proxy = proxies["carl.compliance"]
    body = visit(browser, proxy, "/audit")
    assert heading(browser) == "Audit trail"
    assert "run.start" in body and "export.request" in body
    screenshot(browser, shots, "compliance-audit")

    # Filters are a plain GET form: by action, then by actor.
    browser.find_element(By.NAME, "action").send_keys("run.")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"))
    actions = {row.find_elements(By.TAG_NAME, "td")[4].text
               for row in browser.find_elements(By.CSS_SELECTOR, "#audit tbody tr")}
    assert actions and all(a.startswith("run.") for a in actions)
    visit(browser, proxy, "/audit?actor=ines.informatics")
    actors = {row.find_elements(By.TAG_NAME, "td")[2].text
              for row in browser.find_elements(By.CSS_SELECTOR, "#audit tbody tr")}
    assert actors <= {"ines.informatics"}

    visit(browser, proxy, "/audit")
    click_and_wait(browser, browser.find_element(By.ID, "verify"))
    assert browser.find_element(By.ID, "verdict").text == "INTACT"
    screenshot(browser, shots, "compliance-verify")
    assert records(console_home, "audit.verify", "carl.compliance")[-1]["outcome"] == "intact"

    body = visit(browser, proxy, "/audit/report")
    assert "Compliance report" in heading(browser)
    assert console_home.runs["model-a"] in browser.find_element(By.ID, "report-runs").text
    assert "carl.compliance" in browser.find_element(By.ID, "actors").text
    screenshot(browser, shots, "compliance-report")
    # The printable report, printed to PDF by the browser itself (the print style sheet leaves navigation out);
    # the appliance draws the same report as PDF itself: the download link (tests/console/test_compliance_pdf.py).
    pdf = base64.b64decode(browser.print_page(PrintOptions()))
    assert pdf.startswith(b"%PDF-") and len(pdf) > 10_000
    (shots / "compliance-report.pdf").write_bytes(pdf)
    link = browser.find_element(By.ID, "report-pdf")
    assert link.get_attribute("href").endswith("/audit/report.pdf") and "PDF" in link.text

    body = visit(browser, proxy, "/exports")
    assert console_home.export_request in body
    screenshot(browser, shots, "compliance-exports")
    body = visit(browser, proxy, f"/exports/{console_home.export_request}")
    assert "Bundle preview" in body
    files = browser.find_element(By.ID, "bundle-files").text
    for name in ("aggregates.json", "leaderboard.csv", "report.html"):
        assert name in files
    assert browser.find_elements(By.CSS_SELECTOR, "#checks tbody tr")
    assert MEDICATION_SECRET not in body  # an export is aggregates only
    screenshot(browser, shots, "compliance-export")

    _approve_with_an_uploaded_signature(browser, proxy, console_home, shots)

    # A compliance officer opens no patient-level view.
    for path in (f"/runs/{console_home.runs['model-a']}/medication_qa/instances", "/rate"):
        body = visit(browser, proxy, path)
        assert heading(browser) == "Not allowed", path
        assert MEDICATION_SECRET not in body
    screenshot(browser, shots, "compliance-denied")
    denied = records(console_home, "console.access_denied", "carl.compliance")
    assert {r["objects"]["page"] for r in denied} >= {"/rate"}


def test_exported_report_reads_as_a_document(browser: Any, proxies: dict[str, HeaderProxy],
                                             console_home: ConsoleHome, shots: Path) -> None:
    """The export's report.html in the browser: human labels, every published score with its 95% CI and n (the
    console leaderboard's own interval, rounded), a suppressed score with neither, the win-rate rule, the three
    figures at full size, and nothing loaded from anywhere."""
    visit(browser, proxies["ines.informatics"], "/leaderboard")
    console_scores = browser.find_element(By.ID, "scores").text
    body = visit(browser, proxies["carl.compliance"], f"/exports/{console_home.export_request}/report.html")
    assert heading(browser) == "MedHELM-local evaluation export"
    for raw in ("win_rate", "macro_avg", "n_scored", "n_failed", "ci_low", "small_cell", "benchmarks_published"):
        assert raw not in body, raw
    headings = {h.text for h in browser.find_elements(By.CSS_SELECTOR, "th, h2") if h.text}
    assert {"Leaderboard", "Win rate", "n pairs", "Macro average", "n benchmarks", "Scores by benchmark", "Score",
            "95% CI", "n", "Benchmark heatmap", "Category means", "Cost and performance"} <= headings
    rows = {r.find_elements(By.TAG_NAME, "td")[0].text: [td.text for td in r.find_elements(By.TAG_NAME, "td")[2:]]
            for r in browser.find_elements(By.CSS_SELECTOR, "#scores tbody tr")}
    models = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#scores thead tr:first-child th")][2:]
    assert sorted(models) == ["model-a", "model-b"]
    for index, model in enumerate(models):
        score, ci, n = rows["hospice_referral"][3 * index:3 * index + 3]
        assert re.fullmatch(r"\d\.\d{3}", score) and re.fullmatch(r"\[\d\.\d{3}, \d\.\d{3}\]", ci) and n == "25"
        # the same score and interval as the console's leaderboard (the CLI's bootstrap, same seed), rounded
        assert f"{score} {ci} n=25" in console_scores, (model, console_scores)
        assert rows["medication_qa"][3 * index:3 * index + 3] == ["suppressed", "-", "-"]  # 6 instances
    assert "meets or beats" in browser.find_element(By.ID, "win-rule").text
    for figure in ("fig-heatmap", "fig-categories", "fig-scatter"):
        svg = browser.find_element(By.CSS_SELECTOR, f"#{figure} svg")
        assert svg.size["width"] >= 450 and svg.size["height"] >= 150, (figure, svg.size)
    heatmap = browser.find_element(By.ID, "fig-heatmap").get_attribute("innerHTML")
    assert "hospice_referral" in heatmap and "suppressed" in heatmap
    scatter = browser.find_element(By.ID, "fig-scatter").get_attribute("innerHTML")
    assert "model-a" in scatter and "Win rate" in scatter and "<circle" in scatter
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert MEDICATION_SECRET not in body
    screenshot(browser, shots, "export-report")


def _approve_with_an_uploaded_signature(browser: Any, proxy: HeaderProxy, console_home: ConsoleHome,
                                        shots: Path) -> None:
    """A signature made on the approver's own machine (ssh-keygen -Y sign), uploaded: someone the policy does not
    list is refused; the listed approver's signature approves, and the bundle verifies."""
    import tests.compliance.conftest as compliance_fixtures

    people = compliance_fixtures.signers(console_home.home)
    approver = compliance_fixtures.APPROVER
    digest = browser.find_element(By.ID, "digest").text
    browser.find_element(By.NAME, "signature_file").send_keys(str(people["mallory"].sign(digest)))
    click_and_wait(browser, browser.find_element(By.ID, "approve"))
    assert "not listed" in browser.find_element(By.TAG_NAME, "main").text
    visit(browser, proxy, f"/exports/{console_home.export_request}")
    browser.find_element(By.NAME, "signature_file").send_keys(str(people[approver].sign(digest)))
    click_and_wait(browser, browser.find_element(By.ID, "approve"))
    assert browser.find_element(By.ID, "approved") and browser.find_element(By.ID, "export-status").text == "approved"
    screenshot(browser, shots, "compliance-export-approved")
    approvals = [r for r in console_home.audit_records() if r.get("action") == "export.approve"
                 and r.get("outcome") == "approved"]
    assert approvals[-1]["actor"] == "carl.compliance" and approvals[-1]["objects"]["approver"] == approver
    verified = console_home.cli("export", "verify", console_home.export_request, "--policy",
                                str(console_home.export_policy), "--json")
    assert verified.code == 0, verified.stderr


def _rate_all(browser: Any, proxy: HeaderProxy, shots: Path, name: str) -> int:
    rated = 0
    visit(browser, proxy, "/rate")
    while browser.find_elements(By.ID, "rating-form"):
        page = browser.find_element(By.TAG_NAME, "main").text
        assert "model-a" not in page and "model-b" not in page and "run-" not in page  # blinded
        if rated == 0:
            screenshot(browser, shots, f"clinician-{name}-rate")
        for fieldset in browser.find_elements(By.CSS_SELECTOR, "fieldset.criterion"):
            radios = fieldset.find_elements(By.CSS_SELECTOR, "input[type=radio]")
            radios[(rated + len(fieldset.text)) % 5].click()
        click_and_wait(browser, browser.find_element(By.ID, "submit-rating"))
        rated += 1
        assert rated < 50
    return rated


def test_clinician_rating_is_blinded_stored_and_used_by_jury_validate(
        browser: Any, proxies: dict[str, HeaderProxy], console_home: ConsoleHome, shots: Path) -> None:
    first = _rate_all(browser, proxies["cleo.clinician"], shots, "cleo")
    # 3 sampled responses per (run, benchmark) stratum; medication_qa is the jury-scored benchmark of 2 runs.
    assert first == 6
    assert "6 of 6" not in browser.find_element(By.ID, "rating-done").text  # nobody else rated yet
    second = _rate_all(browser, proxies["chris.clinician"], shots, "chris")
    assert second == 6
    done = browser.find_element(By.ID, "rating-done").text
    assert "6 of 6 sampled responses have been rated by at least 2 clinicians" in done
    screenshot(browser, shots, "clinician-done")

    views = records(console_home, "console.rating.view", "cleo.clinician")
    submits = records(console_home, "console.rating.submit", "cleo.clinician")
    assert len(submits) == 6 and len(views) >= 6
    # By the item's place in its dataset, never its id (an id may be PHI: OMOP's is person and date).
    assert all("instance_id" not in r["objects"] and isinstance(r["objects"]["position"], int)
               for r in views + submits)
    assert not any(MEDICATION_SECRET in json.dumps(r) for r in console_home.audit_records())

    # A clinician cannot open the audit trail.
    visit(browser, proxies["cleo.clinician"], "/audit")
    assert heading(browser) == "Not allowed"

    # `jury validate` uses the stored ratings: ICC(3,k) after z-scoring, two clinicians.
    run_b = console_home.runs["model-b"]
    result = console_home.cli("jury", "validate", "--run", run_b, "--benchmark", "medication_qa", "--json")
    assert result.code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["n_clinicians"] == 2 and payload["n_instances"] == 3
    assert payload["jury"]["n"] == 3
    audit = [r for r in console_home.audit_records() if r.get("action") == "jury.validate"][-1]
    assert audit["objects"]["ratings_source"] == "console"


def test_it_page(browser: Any, proxies: dict[str, HeaderProxy], console_home: ConsoleHome, shots: Path) -> None:
    proxy = proxies["ivan.it"]
    body = visit(browser, proxy, "/system")
    assert heading(browser) == "System"
    servers = browser.find_element(By.ID, "servers").text
    assert "model-a" in servers and "serving model-a" in servers and "0.0.0-fake" in servers
    retired = next(r.text for r in browser.find_elements(By.CSS_SELECTOR, "#servers tbody tr")
                   if "retired-model" in r.text)
    assert "down" in retired and "unreachable" in retired
    embedded = next(r.text for r in browser.find_elements(By.CSS_SELECTOR, "#servers tbody tr")
                    if "embedded" in r.text)
    assert "on demand" in embedded
    assert "KiB" in browser.find_element(By.ID, "storage").text or "MiB" in browser.find_element(By.ID, "storage").text
    assert "ago" in browser.find_element(By.ID, "audit-state").text
    assert console_home.runs["model-a"] in browser.find_element(By.ID, "last-runs").text
    assert MEDICATION_SECRET not in body
    screenshot(browser, shots, "it-system")
    visit(browser, proxy, f"/runs/{console_home.runs['model-a']}/medication_qa/instances")
    assert heading(browser) == "Not allowed"


def test_without_the_proxy_nothing_is_served(browser: Any, proxies: dict[str, HeaderProxy],
                                             proxied_console: RunningConsole, console_home: ConsoleHome,
                                             shots: Path) -> None:
    # Straight to the console (not from the proxy's address), even with forged identity headers: nothing.
    # The same bare page for every path (an HTML page with a title, saying nothing but that).
    forged = {"X-Forwarded-User": "carl.compliance", "X-Forwarded-Groups": "medhelm-compliance"}
    pages = set()
    for path in ("/", "/audit", "/leaderboard", f"/runs/{console_home.runs['model-a']}/medication_qa/instances",
                 "/static/../audit"):
        reply = httpx.get(proxied_console.url + path, headers=forged)
        assert reply.status_code == 401, path
        visible = " ".join(re.sub(r"<[^>]+>", " ", reply.text).split())  # the title, then the same as a heading
        assert visible == "Authentication required Authentication required", visible
        pages.add(reply.text)
    assert len(pages) == 1
    browser.get(proxied_console.url + "/leaderboard")
    assert browser.find_element(By.TAG_NAME, "body").text == "Authentication required"
    screenshot(browser, shots, "no-proxy")
    # From the proxy's address but without a user header (a misconfigured proxy): nothing either.
    assert httpx.get(proxies["(no identity)"].url + "/leaderboard").status_code == 401
    # A signed-in user whose groups hold no role sees no page.
    visit(browser, proxies["nora.noroles"], "/")
    assert "none of your groups holds a console role" in browser.find_element(By.TAG_NAME, "main").text
    visit(browser, proxies["nora.noroles"], "/leaderboard")
    assert heading(browser) == "Not allowed"


def test_security_headers_and_no_script(proxies: dict[str, HeaderProxy], console_home: ConsoleHome) -> None:
    proxy = proxies["ines.informatics"]
    for path in ("/", "/leaderboard", "/runs", f"/runs/{console_home.runs['model-a']}"):
        reply = httpx.get(proxy.url + path)
        assert reply.status_code == 200
        csp = reply.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp.replace("default-src 'none'", "")
        assert reply.headers["cache-control"] == "no-store" and reply.headers["x-frame-options"] == "DENY"
        assert "<script" not in reply.text.lower()
        assert not re.search(r"(src|href)=\"https?://", reply.text)  # nothing from outside
