"""Every command line the documents give a user (README, COMPLIANCE, the runbooks, the chart's and the benches'
READMEs) names a command that exists, with options it takes: a renamed flag breaks the text, not only the code."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "medhelm_local/audit/COMPLIANCE.md", "deploy/RUNBOOK.md", "deploy/AIRGAP.md",
        "deploy/IMAGES.md", "helm-chart/README.md", "bench/README.md"]
# `mh ...`, `medhelm-local ...`, and the image run as a command (`podman run ... oci-archive:<image>.oci.tar ...`)
_INVOCATION = re.compile(r"(?:\bmh|\bmedhelm-local|\bpodman run [^\n]*?oci-archive:medhelm-local\S*\.oci\.tar)"
                         r"[ \t]+([^\n`|;&)]*)")
# The commands whose command lines a verifier copies with the appliance's public key, and the options naming it.
KEY_COMMANDS = {"audit verify": ("--public-key", "--pubkey"), "export verify": ("--public-key", "--pubkey"),
                "keys export-public": ("--out",)}


def _code(text: str) -> list[str]:
    """Fenced blocks and inline code spans (which may wrap a line): where a document gives commands to type; a line
    continued with a backslash is one command line."""
    blocks = re.findall(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", text, re.DOTALL | re.MULTILINE)
    prose = re.sub(r"^[ \t]*```[^\n]*\n.*?^[ \t]*```", "", text, flags=re.DOTALL | re.MULTILINE)
    spans = [span.replace("\n", " ") for paragraph in re.split(r"\n[ \t]*\n", prose)
             for span in re.findall(r"`([^`]+)`", paragraph)]
    return [block.replace("\\\n", " ") for block in blocks] + spans


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


def _invocations(commands: dict[str, list[str]]) -> tuple[list[tuple[str, str, list[str]]], list[str]]:
    """Every documented command line as (document, command path, the words after it), and the problems of those
    naming no command."""
    found: list[tuple[str, str, list[str]]] = []
    problems: list[str] = []
    for doc in DOCS:
        for snippet in _code((REPO / doc).read_text(encoding="utf-8")):
            for invocation in _INVOCATION.findall(snippet):
                line = re.split(r"\s#", invocation, maxsplit=1)[0]  # a shell comment is no argument
                words = re.sub(r"<[^<>]*>", lambda m: m.group().replace(" ", "_"), line).split()  # `<old key>`
                while words and words[0] in ("--actor", "--home") and len(words) > 1:
                    words = words[2:]
                path: list[str] = []
                while words and " ".join([*path, words[0]]) in commands:
                    path.append(words.pop(0))
                if not path:
                    if words and re.fullmatch(r"[a-z][\w-]*", words[0]):
                        problems.append(f"{doc}: no command {words[0]!r}")
                    continue
                found.append((doc, " ".join(path), words))
    return found, problems


def test_documented_command_lines_name_commands_and_options_that_exist() -> None:
    commands = _cli_options()
    top = set(commands[""]) | {"--help"}
    invocations, problems = _invocations(commands)
    for doc, name, words in invocations:
        known = set(commands[name]) | top
        problems += [f"{doc}: `{name}` has no option {flag}" for flag in
                     (w.split("=")[0].rstrip(".,:") for w in words if w.startswith("--"))
                     if flag != "--" and flag not in known]
    used = {name for _doc, name, _words in invocations}
    assert {"demo", "run", "export request", "export release", "audit verify", "datasets register"} <= used
    assert not problems, "\n".join(sorted(set(problems)))


def _parse_problems(lines: list[tuple[str, list[str]]]) -> list[str | None]:
    """Each (command path, arguments) parsed by the CLI's own parser (nothing run): its usage error, or None."""
    code = (
        "import json, sys, typer\n"
        "from medhelm_local import cli\n"
        "cli.register_commands()\n"
        "root = typer.main.get_command(cli.app)\n"
        "out = []\n"
        "for path, args in json.load(sys.stdin):\n"
        "    command = root\n"
        "    for name in path.split():\n"
        "        command = command.commands[name]\n"
        "    try:\n"
        "        command.make_context(path, list(args))\n"
        "        out.append(None)\n"
        "    except Exception as exc:  # click's UsageError, as typer has it\n"
        "        out.append(exc.format_message() if hasattr(exc, 'format_message') else repr(exc))\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(lines), capture_output=True, text=True,
                          check=True, timeout=300, cwd=REPO)
    return list(json.loads(proc.stdout))


def test_documented_key_commands_parse_and_name_one_public_key_file() -> None:
    """The appliance's public key was `appliance.pub.pem` in COMPLIANCE.md, `appliance-pub.pem` in AIRGAP.md and
    the RUNBOOK (and `appliance.pub`, `pub.pem` further on), and `audit verify` was given `--pubkey` in one document
    and `--public-key` in the next: every `audit verify`, `export verify` and `keys export-public` line a verifier
    copies must parse as the CLI has it and name the key file by the one name the CLI's help gives (for the
    OpenSSH form `keys export-public --format openssh` writes, the one name the help gives that form)."""
    from medhelm_local.home.keys import VERIFIER_KEY_NAME, VERIFIER_OPENSSH_KEY_NAME

    commands = _cli_options()
    invocations, _ = _invocations(commands)
    lines = [(doc, name, [w.strip("[]") for w in words if w not in ("[", "]", "...")])
             for doc, name, words in invocations if name in KEY_COMMANDS]
    assert {name for _doc, name, _args in lines} == set(KEY_COMMANDS)
    problems = [f"{doc}: `{name} {' '.join(args)}`: {error}" for (doc, name, args), error
                in zip(lines, _parse_problems([(name, args) for _doc, name, args in lines]), strict=True) if error]
    named: set[str] = set()
    for doc, name, args in lines:
        for option, value in itertools.pairwise(args):
            if option in KEY_COMMANDS[name] and not value.startswith("<"):  # `<old key>`: a placeholder
                named.add(Path(value).name)
                expected = (VERIFIER_OPENSSH_KEY_NAME if name == "keys export-public" and "openssh" in args
                            else VERIFIER_KEY_NAME)
                if Path(value).name != expected:
                    problems.append(f"{doc}: `{name} {option} {value}`: the public key is {expected}")
    assert not problems, "\n".join(problems)
    assert named == {VERIFIER_KEY_NAME, VERIFIER_OPENSSH_KEY_NAME}
    for name in KEY_COMMANDS:
        help_text = subprocess.run([sys.executable, "-m", "medhelm_local.cli", *name.split(), "--help"],
                                   capture_output=True, text=True, check=True, timeout=300, cwd=REPO,
                                   env={**os.environ, "COLUMNS": "400"}).stdout
        assert VERIFIER_KEY_NAME in help_text and "--public-key" in help_text, name
    keys_help = subprocess.run([sys.executable, "-m", "medhelm_local.cli", "keys", "export-public", "--help"],
                               capture_output=True, text=True, check=True, timeout=300, cwd=REPO,
                               env={**os.environ, "COLUMNS": "400"}).stdout
    assert f"{VERIFIER_OPENSSH_KEY_NAME} (OpenSSH)" in keys_help and "openssh" in keys_help


def test_documented_export_policy_paths_are_the_one_the_appliance_reads() -> None:
    """README's first evaluation set `MEDHELM_EXPORT_POLICY=/etc/medhelm/export-policy.yaml`, while COMPLIANCE.md,
    the chart and compose put compliance's policy at /etc/medhelm/policy/export-policy.yaml; where it is mounted
    there the appliance refuses a variable naming any other file (exit 2), so the README's line failed."""
    from medhelm_local.export.policy import APPLIANCE_POLICY, POLICY_ENV

    named = [(doc, path) for doc in DOCS
             for path in re.findall(rf"\b{POLICY_ENV}[=:][ \t]*[\"']?(/[^\s\"'`]+)",
                                    (REPO / doc).read_text(encoding="utf-8"))]
    assert any(doc == "README.md" for doc, _path in named)
    wrong = [f"{doc}: {POLICY_ENV}={path}" for doc, path in named if path != str(APPLIANCE_POLICY)]
    assert not wrong, "\n".join(wrong)
