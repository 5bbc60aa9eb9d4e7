"""A command's start imports what it uses: httpx's own command line (click, pygments' lexers, rich.syntax: 14-21 ms
of every command's start) is not imported by this package's processes, nor rich where nothing is drawn (about 45 ms
for `run --json`), and nothing else is held back."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

CHILD = r"""
import sys
from medhelm_local.cli import register_commands
register_commands("run")
import medhelm_local.application.evaluation
import httpx
assert "httpx._main" not in sys.modules or sys.modules["httpx._main"] is None
# nor the compliance report and its trail verification (a `run` reads the trail's last records only)
print(sorted(m for m in ("click", "pygments.lexers", "rich.syntax", "medhelm_local.audit.report",
                         "medhelm_local.audit.verify") if m in sys.modules))
client = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, text="ok")))
assert client.get("http://replica.invalid/v1/models").text == "ok"
import click, uvicorn  # the console's server still imports its own command line library
print("ok")
"""

HTTPX_FIRST = r"""
import sys
import httpx
import medhelm_local
assert sys.modules["httpx._main"] is not None  # imported before: left as it was
print("ok")
"""


def test_a_command_does_not_import_httpx_command_line() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[]", "ok"]


def test_a_process_that_imported_httpx_first_keeps_it_as_it_was() -> None:
    done = subprocess.run([sys.executable, "-c", HTTPX_FIRST], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


RUN_PIPED = r"""
import sys
from medhelm_local.cli import register_commands
register_commands("run")
import medhelm_local.application.evaluation
from medhelm_local.console import emit_json, emit_table
from medhelm_local.runner.progress import RunProgress
with RunProgress("run-1", enabled=False) as progress:
    progress.add("pubmedqa", 10, 0)
    progress.advance("pubmedqa", error=False, tokens=3)
emit_table("Scores", ["benchmark", "score"], [["pubmedqa", 0.5]])
emit_json({"run_id": "run-1"})
print(sorted(m for m in sys.modules if m == "rich" or m.startswith("rich.")))
"""

ON_A_TERMINAL = r"""
import sys
from medhelm_local.console import emit_table, error, info
from medhelm_local.runner.progress import RunProgress
with RunProgress("run-1") as progress:
    progress.add("pubmedqa", 10, 0)
    progress.advance("pubmedqa", error=False, tokens=3)
emit_table("Scores", ["benchmark", "score"], [["pubmedqa", 0.5]])
info("a [note] as written")
error("a [bad] thing")
"""


def test_run_with_piped_output_imports_no_rich() -> None:
    done = subprocess.run([sys.executable, "-c", RUN_PIPED], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[:3] == ["# Scores", "benchmark\tscore", "pubmedqa\t0.500"]
    assert lines[-1] == "[]"


def test_a_terminal_still_gets_rich_tables_bars_and_messages() -> None:
    leader, follower = pty.openpty()
    done = subprocess.run([sys.executable, "-c", ON_A_TERMINAL], stdin=follower, stdout=follower, stderr=follower,
                          timeout=120, env={**os.environ, "COLUMNS": "100", "TERM": "xterm"})
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))
    assert done.returncode == 0, shown[-2000:]
    assert "Scores" in shown and "┃ benchmark ┃ score ┃" in shown  # a rich table, not tab-separated lines
    assert "│ pubmedqa  │ 0.500 │" in shown
    assert "━━━━" in shown and "/10 errors 0" in shown  # the progress bar and its columns
    assert "a [note] as written" in shown  # info: printed as written, no markup
    assert "error: a [bad] thing" in shown  # error: its markup styled, the message escaped
