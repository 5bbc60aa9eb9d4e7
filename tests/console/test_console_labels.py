"""More of the console read without sight, by keyboard or by touch: every table header says which number it heads,
every progress bar says what it measures, every error leads back to a page that works, a refused approval keeps
the signature pasted, and even the pages shown before sign-in are HTML with a title and a language. Served in this
process over the console's shared home (read-only pages) or over a copy of it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import tests.compliance.conftest as compliance_fixtures
from medhelm_local.home import Home
from medhelm_local.home.config import ConsoleRole
from medhelm_local.webconsole.identity import StandaloneSessions
from tests.console.conftest import ConsoleHome, ready_export
from tests.console.proxy import HeaderProxy

Client = Callable[..., Any]





class _HeaderCells(HTMLParser):
    """The text of each ``th`` in the ``thead`` of the table with id ``table``."""

    def __init__(self, table: str) -> None:
        super().__init__()
        self.table, self.inside, self.head = table, False, False
        self.cell: str | None = None
        self.cells: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.inside = dict(attrs).get("id") == self.table
        elif self.inside and tag == "thead":
            self.head = True
        elif self.inside and self.head and tag == "th":
            self.cell = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "thead":
            self.head = False
        elif tag == "th" and self.cell is not None:
            self.cells.append(" ".join(self.cell.split()))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell += data


def header_cells(html: str, table: str) -> list[str]:
    parser = _HeaderCells(table)
    parser.feed(html)
    assert parser.cells, f"no table {table!r}"
    return parser.cells


def test_each_leaderboard_column_header_says_which_interval_it_is(signed_in: Client) -> None:
    """The leaderboard had two columns both headed "95% CI" (one of the win rate, one of the macro average): a
    screen reader announcing a cell's header could not tell them apart. Each header is now unique and names its
    summary, right after the summary's own column."""
    client = signed_in(ConsoleRole.INFORMATICS)
    reply = client.get("/leaderboard")
    assert reply.status_code == 200
    headers = header_cells(reply.text, "leaderboard")
    assert len(headers) == len(set(headers)), headers
    assert headers[headers.index("Win rate") + 1] == "Win rate 95% CI"
    assert headers[headers.index("Macro average") + 1] == "Macro average 95% CI"
    # each spread is named after its summary too: "SD" alone beside "Win SD" left the reader to guess
    assert headers[headers.index("Win rate") + 2] == "Win SD"
    assert headers[headers.index("Macro average") + 2] == "Macro average SD"


def test_every_progress_bar_says_what_it_measures(browser: Any, proxies: dict[str, HeaderProxy],
                                                 console_home: ConsoleHome) -> None:
    """In a real browser: a run's progress bars (one per benchmark) had no accessible name and no fallback text, so
    a screen reader said "progress bar, 100%" with nothing to say of what; the runs list had the counts as fallback
    text but no name either. Each bar is now named after what it measures and carries the counts as text."""
    from selenium.webdriver.common.by import By

    proxy = proxies["ines.informatics"]
    run = console_home.runs["model-a"]
    browser.get(proxy.url + "/runs")
    bars = browser.find_elements(By.CSS_SELECTOR, "#runs progress")
    assert len(bars) == len(console_home.runs)
    expected = sorted(f"Progress of run {r}" for r in console_home.runs.values())
    assert sorted(bar.accessible_name for bar in bars) == expected
    browser.get(proxy.url + f"/runs/{run}")
    rows = browser.find_elements(By.CSS_SELECTOR, "#run-benchmarks tbody tr")
    assert len(rows) == 2
    for row in rows:
        benchmark = row.find_element(By.CSS_SELECTOR, "td a").text
        bar = row.find_element(By.TAG_NAME, "progress")
        assert bar.aria_role == "progressbar" and bar.accessible_name == f"Progress of {benchmark}"
        counts = row.find_elements(By.CSS_SELECTOR, "td.num")[0].text.replace(" ", "")  # "answered / planned"
        assert bar.get_attribute("textContent") == counts, (bar.get_attribute("textContent"), counts)


def back_link(html: str) -> tuple[str, str]:
    found = re.search(r'<a id="back" href="([^"]+)">([^<]+)</a>', html)
    assert found is not None, html[html.find("<main"):]
    return found.group(1).replace("&amp;", "&"), found.group(2)


@pytest.mark.parametrize(("query", "message", "back"), [
    ("style=fancy", "style: expected one of", "/leaderboard"),
    ("rule=strict&style=medhelm", "rule: expected one of", "/leaderboard?style=medhelm"),
    ("style=fancy&rule=strict", "style: expected one of", "/leaderboard"),
])
def test_a_bad_leaderboard_choice_leads_back_to_the_leaderboard(
        query: str, message: str, back: str, signed_in: Client) -> None:
    """A leaderboard address with a prompt style or win-rate rule it does not know (an old bookmark, a typo) was a
    dead end: "Cannot show this page" and nothing to click. It says what the parameter takes and links to the
    leaderboard without the bad parameter (a good one beside it kept), which opens."""
    client = signed_in(ConsoleRole.INFORMATICS)
    reply = client.get(f"/leaderboard?{query}")
    assert reply.status_code == 400 and "<h1>Cannot show this page</h1>" in reply.text
    assert message in reply.text
    href, label = back_link(reply.text)
    assert href == back and label == "Back to the leaderboard"
    assert client.get(href).status_code == 200


@pytest.mark.parametrize("page", ["two", "2", "999", "99999999999999999999999"])
@pytest.mark.parametrize("failures", [None, "1"])
def test_a_bad_or_past_the_end_instances_page_leads_back_to_the_first(
        page: str, failures: str | None, signed_in: Client, console_home: ConsoleHome) -> None:
    """The instances view (25 items: pages 0 and 1) with a page number it cannot read was a dead end, one past the
    last page showed "Page 1000 of 2" over an empty table, and one too large for the store an internal error. Now
    each says what is wrong and links to the first page, keeping the failures filter, and nothing is audited as
    viewed."""
    client = signed_in(ConsoleRole.INFORMATICS)
    path = f"/runs/{console_home.runs['model-b']}/hospice_referral/instances"
    viewed = len([r for r in console_home.audit_records() if r["action"] == "console.view_instances"])
    params = {"page": page} | ({"failures": failures} if failures else {})
    reply = client.get(path, params=params)
    assert reply.status_code == 400 and "<h1>Cannot show this page</h1>" in reply.text
    assert 'id="instances"' not in reply.text
    assert ("expected a number" if page == "two" else f"there is no page {int(page) + 1};") in reply.text
    href, label = back_link(reply.text)
    assert href == path + (f"?failures={failures}" if failures else "")
    assert label == "Back to the first page of these instances"
    assert len([r for r in console_home.audit_records() if r["action"] == "console.view_instances"]) == viewed
    shown = client.get(href)
    assert shown.status_code == 200 and "Page 1 of" in shown.text and 'id="instances"' in shown.text
    assert client.get(path, params={"page": "1"}).status_code == 200  # the last page is still there


@pytest.fixture
def approver_site(console_home: ConsoleHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A copy of the console's home with its own export policy and a ready request, and a client signed in as a
    compliance officer (as test_console_export_pages's ``site``)."""
    with ready_export(console_home, tmp_path, monkeypatch) as (_, client, home, request_id):
        yield client, home, request_id


def form_fields(html: str) -> tuple[str, str, str]:
    """The approval form's token, the text in its paste box, and the paste box's label."""
    token = re.search(r'<form[^>]*id="approve-form">\s*<input type="hidden" name="csrf" value="([0-9a-f]+)"', html)
    box = re.search(r'<textarea id="signature" name="signature"[^>]*>(.*?)</textarea>', html, re.S)
    label = re.search(r'<label for="signature">([^<]+)</label>', html)
    assert token is not None and box is not None and label is not None, html[html.find("<main"):]
    return token.group(1), unescape(box.group(1)), label.group(1)


def test_a_refused_approval_keeps_the_pasted_signature_and_the_paste_box_says_what_goes_in_it(
        approver_site: Any) -> None:
    """A pasted signature the appliance refuses (here by a key the policy does not list) led to an error page, and
    the signature was lost: the officer had to go back and paste it again. The page now says the approval was
    refused and why, and gives the form again holding what was pasted, marked invalid and tied to the reason,
    ready to fix and send. The paste box was labelled "or paste it"; it now says what to paste. Approval is as
    strict as before: the refusal changes nothing and is audited, and only the listed approver's signature, sent
    with the form's token, approves."""
    from medhelm_local.audit import AuditTrail

    client, home, request_id = approver_site
    page = client.get(f"/exports/{request_id}").text
    token, box, label = form_fields(page)
    assert box == "" and "approval.sig" in label and "SSH SIGNATURE" in label
    digest = re.search(r'<pre class="text" id="digest">([0-9a-f]{64})</pre>', page)
    assert digest is not None
    people = compliance_fixtures.signers(home)
    forged = people["mallory"].sign(digest.group(1)).read_text(encoding="ascii")
    before = AuditTrail(Home(home).audit_path).records()
    reply = client.post(f"/exports/{request_id}/approve", data={"csrf": token, "signature": forged})
    assert reply.status_code in (400, 409) and "<h1>Approval refused</h1>" in reply.text
    error = re.search(r'<p class="warn" id="approve-error" role="alert">([^<]+)</p>', reply.text)
    assert error is not None and "not listed under approval.approvers" in error.group(1)
    assert "Nothing was approved" in error.group(1)
    token, box, _ = form_fields(reply.text)
    assert box.strip() == forged.strip()
    assert re.search(r'<textarea id="signature"[^>]*aria-invalid="true" aria-describedby="approve-error"',
                     reply.text)
    assert f'<a id="back" href="/exports/{request_id}">' in reply.text
    added = [(r["action"], r["outcome"]) for r in AuditTrail(Home(home).audit_path).records()[len(before):]]
    assert ("export.approve", "refused") in added and ("export.approve", "approved") not in added, added
    assert 'id="export-status">ready<' in client.get(f"/exports/{request_id}").text
    # The form that came back still needs its token ...
    stale = client.post(f"/exports/{request_id}/approve", data={"csrf": "0" * 64, "signature": forged})
    assert stale.status_code == 400 and "<h1>This form has expired</h1>" in stale.text
    # ... and, with the approver's own signature pasted in place of the refused one, approves.
    signed = people[compliance_fixtures.APPROVER].sign(digest.group(1)).read_text(encoding="ascii")
    approved = client.post(f"/exports/{request_id}/approve", data={"csrf": token, "signature": signed})
    assert approved.status_code == 200 and 'id="approved"' in approved.text
    assert 'id="export-status">approved<' in approved.text


def test_the_pages_before_sign_in_have_a_title_and_a_language_and_say_nothing_more(
        console_home: ConsoleHome, browser: Any, proxied_console: Any) -> None:
    """Without a session, with a spent or wrong login link, or without a trusted proxy, the console answered plain
    text: no title for a browser tab or a screen reader to announce, no language to read it in. Each is now a bare
    HTML page, titled, in English, whose only text is its title and one sentence on how to sign in: not the
    appliance's name, no navigation, nothing a forged identity header asked for."""
    from selenium.webdriver.common.by import By
    from starlette.testclient import TestClient

    from medhelm_local.webconsole.app import create_app

    appliance = Home(console_home.home).config.appliance_name
    forged = {"X-Forwarded-User": "carl.compliance", "X-Forwarded-Groups": "medhelm-compliance"}
    sessions = StandaloneSessions(user="it-admin", roles=frozenset({ConsoleRole.COMPLIANCE}))
    expected = {  # (mode, path) -> status, title, sentence
        ("standalone", "/audit"): (401, "Sign in required",
                                   "Sign in with the one-time login link printed by medhelm-local serve console."),
        ("standalone", "/login?token=spent"): (403, "This login link is not valid", "Each link works once. For a new "
                                               "one, start the console again: medhelm-local serve console."),
        ("proxy", "/leaderboard"): (401, "Authentication required", ""),
        ("proxy", "/login?token=x"): (404, "Not found", ""),
    }
    clients = {"standalone": TestClient(create_app(Home(console_home.home), sessions)),
               "proxy": TestClient(create_app(Home(console_home.home), None))}  # "testclient" is not trusted
    for (mode, path), (status, title, sentence) in expected.items():
        reply = clients[mode].get(path, headers=forged, follow_redirects=False)
        assert reply.status_code == status and reply.headers["content-type"].startswith("text/html"), path
        assert reply.text.startswith('<!DOCTYPE html>\n<html lang="en">'), reply.text
        assert re.search(rf"<title>{re.escape(title)}</title>", reply.text) and f"<h1>{title}</h1>" in reply.text
        visible = " ".join(re.sub(r"<[^>]+>", " ", re.sub(r"</?code>", "", reply.text)).split())
        assert visible == " ".join(f"{title} {title} {sentence}".split()), visible
        # (the text above is all there is to read; nor is anything in the markup: no console title, links, forms)
        assert f"· {appliance} console" not in reply.text and "carl" not in reply.text
        assert not re.search(r"<(a|nav|header|form|input)\b", reply.text)
        assert reply.headers["content-security-policy"].startswith("default-src 'none'")
    # In a real browser, straight to the proxied console (not from the proxy): a titled page in English.
    browser.get(proxied_console.url + "/audit")
    assert browser.title == "Authentication required"
    assert browser.find_element(By.TAG_NAME, "html").get_attribute("lang") == "en"
    assert browser.find_element(By.TAG_NAME, "h1").text == "Authentication required"


def test_the_groups_you_sign_in_with_can_be_opened_by_keyboard(browser: Any, proxies: dict[str, HeaderProxy]) -> None:
    """In a real browser: the header showed the groups the identity provider asserted (which decide the roles) only
    as a tooltip on the user name, which a keyboard, a touch screen or a screen reader never reaches. The name now
    opens them: Tab reaches it, Enter shows them, and no tooltip holds them any more."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(proxies["carl.compliance"].url + "/audit")
    groups = browser.find_element(By.CSS_SELECTOR, "header details.user .groups")
    assert not groups.is_displayed()
    assert not browser.find_elements(By.CSS_SELECTOR, "header [title]")
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    for _ in range(20):  # past the skip link, the console's name and the navigation
        focused = browser.switch_to.active_element
        if focused.tag_name == "summary":
            break
        focused.send_keys(Keys.TAB)
    assert focused.tag_name == "summary" and focused.text == "carl.compliance", focused.get_attribute("outerHTML")
    focused.send_keys(Keys.ENTER)
    assert groups.is_displayed() and groups.text == "Your groups: medhelm-compliance"
    assert groups.size["width"] > 0 and groups.location["x"] >= 0  # on screen, not cut off by the page's edge
    assert groups.location["x"] + groups.size["width"] <= browser.execute_script("return window.innerWidth")


def test_the_instances_view_shows_the_answer_each_response_was_scored_against(
        signed_in: Client, console_home: ConsoleHome) -> None:
    """The per-instance view, for error analysis, showed the prompt, the response and a score of 0 but not the gold
    answer the score compares with: an analyst could not tell what the model should have said. Each row now shows
    it ("Expected": a choice task's label, a free-text task's reference answers)."""
    client = signed_in(ConsoleRole.INFORMATICS)
    misses = client.get(f"/runs/{console_home.runs['model-b']}/hospice_referral/instances", params={"failures": "1"})
    assert misses.status_code == 200
    assert header_cells(misses.text, "instances")[:5] == ["Instance", "Prompt", "Response", "Expected", "Score"]
    rows = re.findall(r'Synthetic note (\d+):.*?</td>\s*<td><pre class="text">([^<]*)</pre>.*?</td>\s*'
                      r'<td class="expected"><pre class="text">([^<]*)</pre></td>\s*<td class="num">([^<]*)</td>',
                      misses.text, re.S)
    assert len(rows) == 12  # model-b is wrong on notes 13-24
    for note, response, expected, score in rows:
        assert expected == ("A" if int(note) % 2 else "B") != response and score == "0.000", (note, response)
    free_text = client.get(f"/runs/{console_home.runs['model-b']}/medication_qa/instances")
    expected = re.findall(r'<td class="expected"><pre class="text">([^<]*)</pre></td>', free_text.text)
    assert sorted(expected) == sorted(f"Avoid grapefruit with dose {i}." for i in range(6))
