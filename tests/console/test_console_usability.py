"""The console read as the people who use it read it, with a keyboard or a screen reader as much as a mouse: a
mistyped filter keeps the form and says which field is wrong, every error leads somewhere, the current page and the
main content can be found without sight, a rating scale says what its numbers mean, and a page that reloads itself
can be told to stop. Served in this process over the console's shared home (read-only pages)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from medhelm_local.home import Home
from medhelm_local.home.config import ConsoleRole
from tests.conftest import cli_env
from tests.console.conftest import ConsoleHome, start_console, stop_console
from tests.console.proxy import HeaderProxy

Client = Callable[..., Any]


@pytest.fixture(scope="module")
def rating_home(console_home: ConsoleHome, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the console's home whose rating sample takes every response, so there is always one left to rate
    whatever the other tests rated, standalone (no trusted proxy): ratings here touch nothing else."""
    home = tmp_path_factory.mktemp("rating") / "home"
    shutil.copytree(console_home.home, home, symlinks=True)
    config_path = Home(home).config_path
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    config["console"].update(trusted_proxies=[], sample_per_stratum=1000)
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return home





def input_tag(html: str, name: str) -> str:
    found = re.search(rf'<input name="{name}"[^>]*>', html)
    assert found is not None, name
    return found.group(0)


def test_a_mistyped_report_date_keeps_the_form_and_says_what_to_fix(signed_in: Client) -> None:
    """The compliance report's Since field with a date it cannot read: the report page again, the date as typed in
    its field, marked invalid and tied to the message (which says what a date looks like). It was a bare error
    page ("Cannot show this page") with no form, no way back, and the date typed lost."""
    client = signed_in(ConsoleRole.COMPLIANCE)
    reply = client.get("/audit/report", params={"since": "25/11/2026"})
    assert reply.status_code == 400
    assert "<h1>Compliance report</h1>" in reply.text
    field = input_tag(reply.text, "since")
    assert 'value="25/11/2026"' in field
    assert 'aria-invalid="true"' in field and 'aria-describedby="filter-error"' in field
    assert re.search(r'id="filter-error">since: expected an ISO date such as 2026-01-31', reply.text)
    assert 'id="report-pdf"' not in reply.text  # no report (nor its PDF) for a date that was not understood
    # Corrected, it is the report, with the field no longer marked.
    reply = client.get("/audit/report", params={"since": "2025-11-25"})
    assert reply.status_code == 200 and 'id="report-pdf"' in reply.text
    assert "aria-invalid" not in input_tag(reply.text, "since") and 'id="filter-error"' not in reply.text


def test_the_audit_filter_marks_the_field_that_is_wrong(signed_in: Client) -> None:
    """A wrong Until date was reported by its message only, and only the first of two wrong dates at all: now each
    wrong field is marked invalid (a screen reader says so on reaching it) and tied to the message, which names
    both; a right field beside it is not marked."""
    client = signed_in(ConsoleRole.COMPLIANCE)
    reply = client.get("/audit", params={"since": "2026-11-01", "until": "30.11.2026"})
    assert reply.status_code == 400
    assert 'aria-invalid="true" aria-describedby="filter-error"' in input_tag(reply.text, "until")
    assert "aria-invalid" not in input_tag(reply.text, "since")
    assert re.search(r'id="filter-error">until: expected an ISO date', reply.text)
    reply = client.get("/audit", params={"since": "yesterday", "until": "30.11.2026"})
    for name in ("since", "until"):
        assert 'aria-invalid="true"' in input_tag(reply.text, name), name
    message = re.search(r'id="filter-error">([^<]*)<', reply.text)
    assert message is not None and "since:" in message.group(1) and "until:" in message.group(1)
    reply = client.get("/audit", params={"since": "2026-11-01"})
    assert reply.status_code == 200 and "aria-invalid" not in reply.text


def test_the_audit_until_field_says_its_day_is_not_included(signed_in: Client, console_home: ConsoleHome) -> None:
    """Until is "before" (as `audit show --until`): a date is its midnight, so the day itself is left out. The field
    was labelled "Until" with a month's last day as its example (2026-11-30), which read as "through": a filter for
    November so written dropped every record of November 30 without a word. The label says the day is not included,
    and the example is the day after the period."""
    from datetime import date, timedelta

    from medhelm_local.audit.trail import CHECKPOINT_ACTION, AuditTrail

    client = signed_in(ConsoleRole.COMPLIANCE)
    records = AuditTrail(Home(console_home.home).audit_path).records()
    last_day = str(records[-1]["ts"])[:10]
    day_before = (date.fromisoformat(last_day) - timedelta(days=1)).isoformat()
    reply = client.get("/audit", params={"since": day_before, "until": last_day})
    found = re.search(r"(\d+) of \d+ records match", reply.text)
    on_day_before = [r for r in records if str(r["ts"])[:10] == day_before and r["action"] != CHECKPOINT_ACTION]
    assert found is not None and found.group(1) == str(len(on_day_before))  # the day named in Until is left out
    label = re.search(r"<label>([^<]*)<input name=\"until\"[^>]*>", reply.text)
    assert label is not None and "not included" in label.group(1)
    assert 'placeholder="2026-11-30"' not in label.group(0)


def test_the_audit_page_counts_the_records_it_lists(signed_in: Client, console_home: ConsoleHome) -> None:
    """The page lists events, not the signed checkpoints between them; its count said "31 of 62 records match"
    with no filter at all, counting checkpoints among the records that could match."""
    from medhelm_local.audit.trail import CHECKPOINT_ACTION, AuditTrail

    client = signed_in(ConsoleRole.COMPLIANCE)
    reply = client.get("/audit")  # the page's own view is audited: count the trail after it
    records = AuditTrail(Home(console_home.home).audit_path).records()
    events = sum(1 for r in records if r.get("action") != CHECKPOINT_ACTION)
    assert events < len(records)  # the trail has checkpoints: the case that was miscounted
    found = re.search(r"(\d+) of (\d+) records match", reply.text)
    assert found is not None and found.group(1) == found.group(2)  # no filter: every listed record matches
    assert events - 1 <= int(found.group(2)) <= events  # the view itself may be recorded after the count


def test_every_audit_record_can_be_reached_a_page_at_a_time(signed_in: Client, console_home: ConsoleHome,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the page's limit the audit trail said "first N shown" and nothing more: the older records (the ones an
    inquiry asks about) could not be reached from the page. Now Older / Newer links page through every record the
    filter matches, the filter kept."""
    from medhelm_local.audit.report import filter_records
    from medhelm_local.audit.trail import AuditTrail
    from medhelm_local.webconsole import pages_compliance

    monkeypatch.setattr(pages_compliance, "MAX_RECORDS", 5)
    client = signed_in(ConsoleRole.COMPLIANCE)
    wanted = [r["seq"] for r in filter_records(AuditTrail(Home(console_home.home).audit_path).records(),
                                               actor="root")]  # a filter whose matches do not change as we read
    assert len(wanted) > 10
    seen: list[int] = []
    reply = client.get("/audit", params={"actor": "root"})
    pages = -(-len(wanted) // 5)
    assert f"page 1 of {pages}" in reply.text and 'id="page-newer"' not in reply.text
    while True:
        seen += [int(seq) for seq in re.findall(r'<tr><td class="num">(\d+)</td>', reply.text)]
        older = re.search(r'id="page-older" href="([^"]+)"', reply.text)
        if older is None:
            break
        href = older.group(1).replace("&amp;", "&")
        assert "actor=root" in href  # the filter is kept
        reply = client.get(href)
        assert reply.status_code == 200 and 'id="page-newer"' in reply.text
    assert seen == sorted(wanted, reverse=True)  # every matching record once, newest first
    assert client.get("/audit", params={"page": "two"}).status_code == 400


def test_keyboard_users_skip_the_navigation_and_the_current_page_is_named_once(
        browser: Any, proxies: dict[str, HeaderProxy]) -> None:
    """In a real browser: the first Tab reaches a "Skip to main content" link, shown when focused, that moves focus
    into the page's main content past the navigation; the navigation names the page you are on (aria-current, not
    only an underline), and only that one: the compliance report was marked as the audit trail too."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    proxy = proxies["carl.compliance"]
    browser.get(proxy.url + "/audit/report")
    current = browser.find_elements(By.CSS_SELECTOR, "nav a[aria-current=page]")
    assert [a.text for a in current] == ["Compliance report"]
    assert browser.find_element(By.CSS_SELECTOR, "nav").get_attribute("aria-label")
    browser.get(proxy.url + "/audit")
    assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "nav a[aria-current=page]")] == ["Audit trail"]

    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    skip = browser.switch_to.active_element
    assert skip.text == "Skip to main content" and skip.is_displayed()
    assert skip.location["x"] >= 0 and skip.size["width"] > 0  # on screen once it has focus
    skip.send_keys(Keys.ENTER)
    focused = browser.switch_to.active_element
    assert focused.tag_name == "main" and focused.get_attribute("id") == "main"
    # The next Tab from there lands inside the page (its first form control), not back in the navigation.
    focused.send_keys(Keys.TAB)
    after = browser.switch_to.active_element
    assert after.get_attribute("id") == "verify", after.get_attribute("outerHTML")


def test_a_wide_table_scrolls_by_itself_on_a_laptop_and_a_tablet(browser: Any, proxies: dict[str, HeaderProxy],
                                                                  console_home: ConsoleHome) -> None:
    """At 1280 px (a laptop) the leaderboard's models table, and at 800 px (a tablet) the runs, audit, exports and
    report tables, were wider than the window, and the whole page scrolled sideways under them: the header and the
    text moved out of view, and the only scroll bar was at the page's foot. Now a table that does not fit scrolls in
    a region of its own, named for a screen reader and reached (and scrolled) with the keyboard; the page does not."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    run = console_home.runs["model-a"]
    pages = {"ines.informatics": ["/leaderboard", "/runs", f"/runs/{run}", "/benchmarks"],
             "carl.compliance": ["/audit", "/audit/report", "/exports", f"/exports/{console_home.export_request}"],
             "ivan.it": ["/system"]}
    try:
        for width in (1280, 800):
            browser.set_window_size(width, 900)
            for user, paths in pages.items():
                for path in paths:
                    browser.get(proxies[user].url + path)
                    wide, window = browser.execute_script(
                        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
                    assert wide <= window, (width, path, wide, window)
                    for table in browser.find_elements(By.CSS_SELECTOR, "main table"):
                        region = table.find_element(By.XPATH, "..")
                        assert region.get_attribute("role") == "region" and region.get_attribute("aria-label"), path
                        assert region.get_attribute("tabindex") == "0", path
        # At 800 px the models table is wider than its region: the keyboard scrolls it, the page stays put.
        browser.get(proxies["ines.informatics"].url + "/leaderboard")
        region = browser.find_element(By.CSS_SELECTOR, "[role=region][aria-label=Models]")
        assert browser.execute_script("return arguments[0].scrollWidth > arguments[0].clientWidth", region)
        region.send_keys(Keys.ARROW_RIGHT * 5)
        WebDriverWait(browser, 5).until(lambda d: d.execute_script("return arguments[0].scrollLeft", region) > 0)
        assert browser.execute_script("return window.scrollX") == 0
    finally:
        browser.set_window_size(1400, 1000)


def test_a_rating_scale_says_what_its_numbers_mean_to_a_screen_reader(browser: Any, rating_home: Path) -> None:
    """Each radio button was named only "1" ... "5": what 1 and 5 mean, and what the criterion asks, sat in a
    paragraph a screen reader skips when moving between a form's controls. The ends of the scale are in their
    labels now, and each button is described by its criterion's text (on a copy of the home, standalone)."""
    console = start_console(rating_home, "--role", "clinician", env=cli_env())
    try:
        browser.get(str(console.start["login_url"]))
        browser.get(console.url + "/rate")
        _check_rating_scale(browser)
    finally:
        stop_console(console)


def _check_rating_scale(browser: Any) -> None:
    from selenium.webdriver.common.by import By

    fieldsets = browser.find_elements(By.CSS_SELECTOR, "#rating-form fieldset.criterion")
    assert fieldsets
    for fieldset in fieldsets:
        radios = fieldset.find_elements(By.CSS_SELECTOR, "input[type=radio]")
        names = [r.accessible_name.strip() for r in radios]
        assert names[0] == "1 (very poor)" and names[-1] == "5 (excellent)" and names[1:4] == ["2", "3", "4"], names
        about = fieldset.find_element(By.CSS_SELECTOR, "p.muted")
        for radio in radios:
            assert radio.get_attribute("aria-describedby") == about.get_attribute("id")
        assert "1 = very poor, 5 = excellent" in about.text


def test_a_refused_rating_leads_back_to_the_rating_page(signed_in: Client, rating_home: Path) -> None:
    """A rating the console cannot take (an item no longer offered, a criterion left out) said "open the next item"
    on a page with no link to it; now each says nothing was saved and leads back to /rate."""
    client = signed_in(ConsoleRole.CLINICIAN, rating_home)
    page = client.get("/rate").text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    item = re.search(r'name="item" value="([^"]+)"', page)
    assert csrf is not None and item is not None
    for form, status in (({"item": "no-such-item"}, 409), ({"item": item.group(1)}, 400)):  # no criterion rated
        reply = client.post("/rate", data={"csrf": csrf.group(1), **form}, follow_redirects=False)
        assert reply.status_code == status
        assert "was not saved" in reply.text or "Nothing was saved" in reply.text
        back = re.search(r'<a id="back" href="([^"]+)">([^<]+)</a>', reply.text)
        assert back is not None and back.group(1) == "/rate", reply.text[-800:]
    assert client.get("/rate").status_code == 200  # and the same response is still offered
    from medhelm_local.audit.trail import AuditTrail

    refusals = [r["objects"]["reason"] for r in AuditTrail(Home(rating_home).audit_path).records()
                if r.get("action") == "console.rating.submit" and r.get("outcome") == "refused"]
    assert refusals[-2:] == ["not_offered", "incomplete"]  # each refusal is in the trail, as a saved rating is


def test_the_rating_that_would_pass_the_raters_limit_is_refused(signed_in: Client, rating_home: Path,
                                                                 tmp_path: Path) -> None:
    """Clinicians reading the last open slot of an item at once all saved their rating: the item got more ratings
    than ``raters_per_item``. The count is now checked in the transaction that saves, and a clinician too late is
    told their rating was not saved."""
    from medhelm_local.store.ratings import ClinicianRating
    from medhelm_local.store.store import utcnow
    from medhelm_local.webconsole import data, rating

    home = tmp_path / "home"
    shutil.copytree(rating_home, home, symlinks=True)
    limit = Home(home).config.console.raters_per_item
    client = signed_in(ConsoleRole.CLINICIAN, home)
    page = client.get("/rate").text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    token = re.search(r'name="item" value="([^"]+)"', page)
    assert csrf is not None and token is not None
    criteria = set(re.findall(r'name="(c_[a-z_]+)"', page))
    assert criteria

    # While "clinician-user" reads the item, others rate it: as many ratings as it needs.
    sample = rating.stratified_sample(data.ratable_responses(Home(home)), 1000)
    shown = rating.queue(sample, data.clinician_ratings(Home(home)), "clinician-user", limit)[0]
    key = (shown.run_id, shown.benchmark, shown.instance_id)
    before = [r.rater for r in data.clinician_ratings(Home(home)) if (r.run_id, r.benchmark, r.instance_id) == key]
    others = [ClinicianRating(run_id=shown.run_id, benchmark=shown.benchmark, instance_id=shown.instance_id,
                              rater=f"other-{n}", ratings={c.removeprefix("c_"): 4 for c in criteria},
                              rated_at=utcnow()) for n in range(limit - len(before))]
    assert [data.save_rating(Home(home), r, limit) for r in others] == ["saved"] * len(others)

    reply = client.post("/rate", data={"csrf": csrf.group(1), "item": token.group(1), **dict.fromkeys(criteria, "3")},
                        follow_redirects=False)
    assert reply.status_code == 409 and "Item already rated" in reply.text and "was not saved" in reply.text
    after = [r.rater for r in data.clinician_ratings(Home(home)) if (r.run_id, r.benchmark, r.instance_id) == key]
    assert len(after) == limit and "clinician-user" not in after
    assert data.save_rating(Home(home), others[0], limit) == "duplicate"
    from medhelm_local.audit.trail import AuditTrail

    submits = [r for r in AuditTrail(Home(home).audit_path).records() if r.get("action") == "console.rating.submit"]
    assert (submits[-1]["outcome"], submits[-1]["objects"]["reason"]) == ("refused", "full")


@pytest.mark.parametrize("page", ["/runs", "/runs/{run}"])
def test_a_page_that_reloads_itself_says_so_and_can_be_stopped(
        page: str, signed_in: Client, console_home: ConsoleHome, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a run goes, the runs pages reload every 10 s (a meta refresh), which throws a screen reader, and the
    keyboard focus, back to the top of the page mid-read; there was no way to stop it (WCAG 2.2.1). Now the page
    says it reloads and offers to stop; stopped, it stays put and offers to start again."""
    from medhelm_local.webconsole import pages_informatics

    final = pages_informatics.FINAL_STATUSES
    monkeypatch.setattr(pages_informatics, "FINAL_STATUSES", set())  # every run counts as still going
    client = signed_in(ConsoleRole.INFORMATICS)
    path = page.format(run=console_home.runs["model-a"])
    live = client.get(path).text
    assert 'http-equiv="refresh"' in live
    notice = re.search(r'<p class="info noprint" id="auto-reload">(.*?)</p>', live, re.S)
    assert notice is not None and "reloads itself every 10 seconds" in notice.group(1)
    stop = re.search(r'<a href="([^"]+)">Stop reloading</a>', notice.group(1))
    assert stop is not None
    paused = client.get(path + stop.group(1)).text
    assert 'http-equiv="refresh"' not in paused
    notice = re.search(r'<p class="info noprint" id="auto-reload">(.*?)</p>', paused, re.S)
    assert notice is not None and "automatic reloading is off" in notice.group(1)
    resume = re.search(r'<a href="([^"]+)">Reload now and keep reloading</a>', notice.group(1))
    assert resume is not None and "reload=off" not in resume.group(1)
    # A finished run's page neither reloads nor says anything about it.
    monkeypatch.setattr(pages_informatics, "FINAL_STATUSES", final)
    done = client.get(path).text
    assert 'http-equiv="refresh"' not in done and 'id="auto-reload"' not in done


def test_a_form_address_opened_directly_says_so_and_leads_back(signed_in: Client, console_home: ConsoleHome) -> None:
    """A form's address opened as a page (the verification result's /audit/verify from history or a bookmark, a
    refused approval's /exports/ID/approve) answered a bare 'Method Not Allowed' in plain text, with no page and no
    way back. Now it is a console page that says what happened and leads to the page whose form it is."""
    client = signed_in(ConsoleRole.COMPLIANCE)
    request = console_home.export_request
    for path, back in (("/audit/verify", "/audit"), (f"/exports/{request}/approve", f"/exports/{request}")):
        reply = client.get(path)
        assert reply.status_code == 405 and reply.headers["allow"] == "POST", path
        assert reply.headers["content-type"].startswith("text/html") and "<h1>" in reply.text, path
        assert "Nothing was saved or changed" in reply.text, path
        link = re.search(r'<a id="back" href="([^"]+)">', reply.text)
        assert link is not None and link.group(1) == back, path


def test_a_benchmark_opens_on_an_appliance_that_has_evaluated_nothing_yet(signed_in: Client, tmp_path: Path) -> None:
    """On a new appliance the Benchmarks page lists every benchmark, but each link answered 404 "Nothing evaluated
    yet" instead of what the benchmark is: its page needed a store. Now it shows the benchmark, with no dataset
    and no result yet."""
    from tests.compliance.inproc import InProcessCli

    home = tmp_path / "home"
    assert InProcessCli(home=home)("init").code == 0
    client = signed_in(ConsoleRole.INFORMATICS, home)
    assert 'href="/benchmarks/pubmedqa"' in client.get("/benchmarks").text
    page = client.get("/benchmarks/pubmedqa")
    assert page.status_code == 200, page.text[-600:]
    assert "PubMedQA" in page.text and "Not registered on this appliance" in page.text


def test_the_run_page_counts_what_was_not_scored_and_the_leaderboard_says_what_its_figures_mean(
        signed_in: Client, console_home: ConsoleHome) -> None:
    """The run page showed failed requests and n scored, but not the answers the metric or the jury could not score:
    n scored fell short of answered with nothing saying why. The leaderboard's MDE column was never spelt out, its
    Cost had no unit, and the link to another prompt style's runs dropped the win-rate rule chosen."""
    from medhelm_local.analysis.aggregate import benchmark_score
    from medhelm_local.benchmarks.registry import SpecRegistry
    from medhelm_local.store import Store

    client = signed_in(ConsoleRole.INFORMATICS)
    model, run_id = next(iter(console_home.runs.items()))
    page = client.get(f"/runs/{run_id}").text
    header = re.search(r'<table id="run-benchmarks">\s*<thead><tr>(.*?)</tr>', page, re.DOTALL)
    assert header is not None
    columns = re.findall(r"<th[^>]*>([^<]*)</th>", header.group(1))
    at = columns.index("Not scored")
    home = Home(console_home.home)
    with Store.open(home, read_only=True) as store:
        run = store.get_run(run_id)
        assert run is not None
        expected = {b: benchmark_score(store, SpecRegistry(home.root), run_id, model, b).n_failed
                    for b in run.benchmarks}
    body = page.split('<table id="run-benchmarks">', 1)[1].split("</table>", 1)[0]
    for row in re.findall(r"<tr><td><a href=\"/benchmarks/([^\"]+)\">.*?</tr>", body, re.DOTALL):
        cells = re.findall(r"<td[^>]*>(.*?)</td>",
                           body.split(f'href="/benchmarks/{row}"', 1)[1].split("</tr>", 1)[0], re.DOTALL)
        assert cells[at - 1].strip() == str(expected[row]), row  # the first cell (the benchmark) was split off

    board = client.get("/leaderboard?rule=helm").text
    assert '<abbr title="minimum detectable effect' in board
    assert re.search(r'<th class="num" title="Measured cost[^"]*currency of the pricing', board)
    other = client.get("/leaderboard?style=medhelm&rule=helm").text  # the runs are of the default style
    links = re.findall(r'href="(/leaderboard\?style=[^"]+)"', other)
    assert links == ["/leaderboard?style=default&amp;rule=helm"]


def test_the_system_page_counts_audit_records_as_the_audit_page_does(signed_in: Client,
                                                                     console_home: ConsoleHome) -> None:
    """The IT page said "Records 68" where the audit trail page said "34 of 34 records match" of the same trail: it
    counted the signed checkpoints too, so a compliance officer comparing them saw half the trail missing. It now
    gives the records as the audit page counts them, and the lines (checkpoints included) as such; the verification
    page's count of lines is labelled so too."""
    from medhelm_local.audit.trail import CHECKPOINT_ACTION, AuditTrail

    reply = signed_in(ConsoleRole.IT).get("/system")
    assert reply.status_code == 200
    records = AuditTrail(Home(console_home.home).audit_path).records()
    events = sum(1 for r in records if r["action"] != CHECKPOINT_ACTION)
    shown = re.search(r'id="audit-records">(\d+) \(as the audit trail page counts them\)[^<]*: (\d+) lines', reply.text)
    assert shown is not None and (int(shown.group(1)), int(shown.group(2))) == (events, len(records))
    compliance = signed_in(ConsoleRole.COMPLIANCE)
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', compliance.get("/audit").text)
    assert token is not None
    verified = compliance.post("/audit/verify", data={"csrf": token.group(1)}).text
    assert "<dt>Lines checked (records and their signed checkpoints)</dt>" in verified
