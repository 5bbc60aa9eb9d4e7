"""Help as people read it where it is piped, grepped or read aloud: plain text, flags without a value shown as
flags, no markup escapes."""

from __future__ import annotations

import subprocess
import sys

import pytest

COMMANDS = [[], ["run"], ["export"], ["export", "verify"], ["serve", "vllm"], ["audit", "verify"], ["jury", "validate"],
            ["demo"], ["models", "add"], ["models", "update"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_help_is_plain_text(command: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "medhelm_local.cli", *command, "--help"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("Usage:")
    assert not set("╭╮╰╯│─") & set(text)  # rich's boxes
    assert "<bool>" not in text  # a flag takes no value: `--json true` is a usage error
    assert "\\[" not in text  # rich's markup escape, shown as written in plain help
