"""Every command line the documents give a user (README, COMPLIANCE, the runbooks, the chart's and the benches'
READMEs) names a command that exists, with options it takes: a renamed flag breaks the text, not only the code."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "medhelm_local/audit/COMPLIANCE.md", "deploy/RUNBOOK.md", "deploy/AIRGAP.md",
        "deploy/IMAGES.md", "helm-chart/README.md", "bench/README.md"]
_INVOCATION = re.compile(r"(?:\bmh|\bmedhelm-local)[ \t]+([^\n`|;&)]*)")


def _code(text: str) -> list[str]:
    """Fenced blocks and inline code spans: where a document gives commands to type."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    return blocks + re.findall(r"`([^`\n]+)`", prose)


def _cli_options() -> dict[str, list[str]]:
    """Every command path of the CLI ('' for the top level) and its options, from its own registry."""
    code = (
        "import json, typer\n"
        "from medhelm_local import cli\n"
        "cli.register_commands()\n"
        "out = {}\n"
        "def walk(cmd, path):\n"
        "    out[' '.join(path)] = sorted({o for p in cmd.params for o in [*p.opts, *p.secondary_opts]})\n"
        "    for name, sub in getattr(cmd, 'commands', {}).items():\n"
        "        walk(sub, path + [name])\n"
        "walk(typer.main.get_command(cli.app), [])\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300,
                          cwd=REPO)
    return {path: list(options) for path, options in json.loads(proc.stdout).items()}


def test_documented_command_lines_name_commands_and_options_that_exist() -> None:
    commands = _cli_options()
    top = set(commands[""]) | {"--help"}
    used: set[str] = set()
    problems: list[str] = []
    for doc in DOCS:
        for snippet in _code((REPO / doc).read_text(encoding="utf-8")):
            for invocation in _INVOCATION.findall(snippet):
                words = invocation.split()
                while words and words[0] in ("--actor", "--home") and len(words) > 1:
                    words = words[2:]
                path: list[str] = []
                while words and " ".join([*path, words[0]]) in commands:
                    path.append(words.pop(0))
                if not path:
                    if words and re.fullmatch(r"[a-z][\w-]*", words[0]):
                        problems.append(f"{doc}: no command {words[0]!r}")
                    continue
                name = " ".join(path)
                used.add(name)
                known = set(commands[name]) | top
                problems += [f"{doc}: `{name}` has no option {flag}" for flag in
                             (w.split("=")[0].rstrip(".,:") for w in words if w.startswith("--"))
                             if flag != "--" and flag not in known]
    assert {"demo", "run", "export request", "export release", "audit verify", "datasets register"} <= used
    assert not problems, "\n".join(sorted(set(problems)))
