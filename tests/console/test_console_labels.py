"""More of the console read without sight, by keyboard or by touch: every table header says which number it heads,
every progress bar says what it measures, every error leads back to a page that works, a refused approval keeps
the signature pasted, and even the pages shown before sign-in are HTML with a title and a language. Served in this
process over the console's shared home (read-only pages) or over a copy of it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.home import Home
from medhelm_local.home.config import ConsoleRole
from medhelm_local.webconsole.identity import StandaloneSessions
from tests.console.conftest import ConsoleHome
from tests.console.proxy import HeaderProxy

Client = Callable[..., Any]


@pytest.fixture
def signed_in(console_home: ConsoleHome) -> Iterator[Client]:
    """A starlette TestClient signed in (standalone, one-time link) with the given role, on the console's home or
    on ``home``."""
    from starlette.testclient import TestClient

    from medhelm_local.webconsole.app import create_app

    opened: list[Any] = []

    def client(role: ConsoleRole, home: Path | None = None) -> Any:
        sessions = StandaloneSessions(user=f"{role.value}-user", roles=frozenset({role}))
        test_client = TestClient(create_app(Home(home or console_home.home), sessions), raise_server_exceptions=False)
        test_client.__enter__()
        opened.append(test_client)
        assert test_client.get(f"/login?token={sessions.new_login_token()}").status_code == 200
        return test_client

    yield client
    for test_client in opened:
        test_client.__exit__(None, None, None)


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
