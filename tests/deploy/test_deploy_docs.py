"""deploy/AIRGAP.md and deploy/RUNBOOK.md, read as procedures: the site values they give render, every object
they name exists in the rendered chart, every appliance command they run exists, and none of the steps issue 15
found failing is still there (a per-revision Job, a backup staged in the toolbox's /tmp, a raw extract left on
the home volume, an image check that can never match)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest
import yaml
from deploykit import CHART, REPO, by_kind, render

AIRGAP = REPO / "deploy" / "AIRGAP.md"
RUNBOOK = REPO / "deploy" / "RUNBOOK.md"
DOCS = {"AIRGAP.md": AIRGAP.read_text(encoding="utf-8"), "RUNBOOK.md": RUNBOOK.read_text(encoding="utf-8")}

# Commands the procedures use that other branches of this session land (checked once they exist here).
LANDING_ELSEWHERE: dict[tuple[str, str], str] = {}  # commands the docs name before their code lands


def airgap_values() -> dict[str, Any]:
    block = re.search(r"`values-site.yaml`:\n\n```yaml\n(.*?)```", DOCS["AIRGAP.md"], re.DOTALL)
    assert block, "AIRGAP.md has no values-site.yaml block"
    values = yaml.safe_load(block.group(1))
    for kind in ("appliance", "vllm"):  # the placeholders the operator fills in from step 3
        assert values["image"][kind]["digest"].startswith("sha256:<")
        values["image"][kind]["digest"] = "sha256:" + ("ab" if kind == "vllm" else "cd") * 32
    return values


@pytest.fixture(scope="module")
def site() -> list[dict[str, Any]]:
    return render(airgap_values())


def test_airgap_values_render_and_pin_everything_outside_the_home(site):
    names = {(d["kind"], d["metadata"]["name"]) for d in site}
    assert ("CronJob", "medhelm-medhelm-local-runner") in names
    assert ("Deployment", "medhelm-medhelm-local-toolbox") in names
    assert ("PersistentVolumeClaim", "medhelm-medhelm-local-home") in names
    assert ("PersistentVolumeClaim", "medhelm-medhelm-local-audit") in names
    assert not by_kind(site, "Job")
    (cron,) = by_kind(site, "CronJob")
    assert cron["spec"]["suspend"] is True
    spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["keys-secret"]["secret"]["secretName"] == "medhelm-appliance-keys-v1"
    assert volumes["export-policy"]["configMap"]["name"] == "medhelm-export-policy"
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["MEDHELM_AUDIT_KEY_FINGERPRINT"]["valueFrom"]["configMapKeyRef"]["name"] == "medhelm-audit-key"


def test_every_named_object_is_one_the_chart_renders(site):
    rendered = {d["metadata"]["name"] for d in site}
    for doc, text in DOCS.items():
        for cron in re.findall(r"--from=cronjob/([\w.-]+)", text):
            assert cron in rendered, f"{doc}: cronjob/{cron}"
        for kind, name in re.findall(r"\b(deploy|statefulset)/(medhelm-[\w.-]+)", text):
            assert name in rendered, f"{doc}: {kind}/{name}"
        for pvc in re.findall(r"\b(medhelm-medhelm-local-(?:home|audit))\b", text):
            assert pvc in rendered, f"{doc}: {pvc}"
        for container in re.findall(r"kubectl [^\n]*(?:logs|exec)[^\n]* -c ([\w-]+)", text):
            assert container in {"runner", "verify-weights", "wait-for-models"}, f"{doc}: -c {container}"


def _code(markdown: str) -> list[str]:
    """The shell the procedures run: fenced blocks and `inline code`, not the prose around them."""
    blocks: list[str] = []
    prose: list[str] = []
    current: list[str] | None = None
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
        else:
            prose.append(line)
    inline = re.findall(r"`([^`\n]+)`", "\n".join(prose))
    return blocks + inline


def _cli_commands() -> set[tuple[str, ...]]:
    """Every command path of the CLI, from its own registry (one subprocess: no DuckDB in this process)."""
    code = (
        "import json, typer\n"
        "from medhelm_local import cli\n"
        "cli.register_commands()\n"
        "group = typer.main.get_command(cli.app)\n"
        "out = []\n"
        "def walk(cmd, path):\n"
        "    out.append(path)\n"
        "    for name, sub in getattr(cmd, 'commands', {}).items():\n"
        "        walk(sub, path + [name])\n"
        "walk(group, [])\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    return {tuple(p) for p in json.loads(proc.stdout)}


def test_every_appliance_command_in_the_procedures_exists():
    commands = _cli_commands()
    groups = {p[0] for p in commands if len(p) == 2}
    used: set[tuple[str, ...]] = set()
    for doc in DOCS.values():
        text = "\n".join(_code(doc))
        for line in re.findall(r"(?:\bmh|medhelm-local)((?: +--actor +\S+)? +[a-z][\w-]*(?: +[a-z][\w-]*)?)", text):
            words = [w for w in line.split() if not w.startswith("--")]
            words = words[1:] if line.strip().startswith("--actor") else words
            if not words:
                continue
            path = tuple(words[:2]) if words[0] in groups else (words[0],)
            used.add(path)
    assert {("datasets", "register"), ("export", "request"), ("audit", "verify"), ("keys", "rotate")} <= used
    missing = sorted(p for p in used if p not in commands and p not in LANDING_ELSEWHERE)
    assert not missing, missing


def test_the_failing_steps_of_issue_15_are_gone():
    both = DOCS["AIRGAP.md"] + DOCS["RUNBOOK.md"]
    assert "runner.job" not in both.replace("`runner.job` / `runner.cronJob`", "")  # only the upgrade note
    assert "job/medhelm-medhelm-local-run-" not in both  # no per-revision Job
    assert "/tmp/medhelm-backup" not in both  # backups stream out, never staged in the pod
    assert "tar -C /var/lib -czf - medhelm medhelm-audit >" in DOCS["RUNBOOK.md"]
    assert "skopeo inspect --config" not in both  # a config digest never equals the image id
    assert "/var/lib/medhelm/incoming" not in both  # raw extracts never on the home volume
    register = DOCS["AIRGAP.md"].index("mh datasets register pubmedqa /var/lib/medhelm-incoming/")
    assert "rm -f /var/lib/medhelm-incoming/" in DOCS["AIRGAP.md"][register:register + 400]
    # Rotation never applies a Secret the chart owns, and always stores the new key before re-encrypting.
    rotation = DOCS["RUNBOOK.md"][DOCS["RUNBOOK.md"].index("## Key rotation"):]
    assert "keys rotate --new-key-file" in rotation
    assert rotation.index("create secret generic medhelm-appliance-keys-v2") < rotation.index("keys rotate --new")
    assert "medhelm-medhelm-local-keys" not in rotation


def test_chart_readme_matches_the_values():
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert "job.enabled" not in readme and "cronJob" not in readme
    for key in ("schedule", "command", "waitForModels", "runtimeClassName", "startupSeconds", "openshift",
                "exportPolicy", "auditKey", "tests"):
        assert key in readme, key
    assert {"openshift", "exportPolicy", "auditKey", "tests"} <= set(values)


def test_a_restore_stops_the_console_and_empties_the_volumes_before_unpacking():
    """The backup stopped the console (it writes to the store) but the restore, which overwrites the store, did
    not; and it unpacked over the live volumes, leaving files the backup does not hold (the store's write-ahead
    log, later exports) beside the restored ones."""
    runbook = DOCS["RUNBOOK.md"]
    restore = runbook[runbook.index("\nRestore:\n"):runbook.index("## Key rotation")]
    stop = restore.index("scale deployment medhelm-medhelm-local-console --replicas=0")
    empty = restore.index("find /var/lib/medhelm /var/lib/medhelm-audit -mindepth 1 -delete")
    unpack = restore.index("tar -C /var/lib -xzf -")
    start = restore.index("scale deployment medhelm-medhelm-local-console --replicas=1")
    assert stop < empty < unpack < start
    tar = re.search(r"tar -C /var/lib -czf - (\S+) (\S+) >", runbook)
    assert tar and {f"/var/lib/{tar.group(1)}", f"/var/lib/{tar.group(2)}"} == {"/var/lib/medhelm",
                                                                               "/var/lib/medhelm-audit"}


# Appliance commands that send requests to a model server or a judge.
_SENDING = re.compile(r"\bmh(?: +--actor +\S+)? +(run|jury +rescore|score|models +wait)\b")


def test_the_procedures_send_nothing_from_the_toolbox(site):
    """The toolbox's NetworkPolicies allow DNS alone: a model server is reached from the runner's Jobs (and the
    console's health probes), never from it. RUNBOOK.md offered `mh run --retry-errors <RUN_ID>` in the toolbox to
    re-send failed requests: every one of them failed again to connect, and was recorded as failed. Every command
    of the procedures that sends (`run`, `jury rescore`, `score`, `models wait`) now runs as a Job."""
    (toolbox,) = [d for d in by_kind(site, "Deployment") if d["metadata"]["name"].endswith("-toolbox")]
    labels = toolbox["spec"]["template"]["metadata"]["labels"]
    egress = [rule for policy in by_kind(site, "NetworkPolicy")
              if all(labels.get(k) == v for k, v in policy["spec"]["podSelector"].get("matchLabels", {}).items())
              for rule in policy["spec"].get("egress", [])]
    assert egress and {p["port"] for rule in egress for p in rule["ports"]} == {53}
    for doc, text in DOCS.items():
        sending = [m.group(0) for code in _code(text) for m in _SENDING.finditer(code)]
        assert sending == [], f"{doc}: {sending} in the toolbox, which reaches no model server: run it as a Job"
