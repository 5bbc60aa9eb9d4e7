"""A command's start imports what it uses: httpx's own command line (click, pygments' lexers, rich.syntax: 14-21 ms
of every command's start) is not imported by this package's processes, and nothing else is held back."""

from __future__ import annotations

import subprocess
import sys

CHILD = r"""
import sys
from medhelm_local.cli import register_commands
register_commands("run")
import medhelm_local.application.evaluation
import httpx
assert "httpx._main" not in sys.modules or sys.modules["httpx._main"] is None
print(sorted(m for m in ("click", "pygments.lexers", "rich.syntax") if m in sys.modules))
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
