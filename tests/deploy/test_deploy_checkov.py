"""checkov on the rendered manifests of every value set and on the Dockerfile: zero failed checks except
the documented skips in checkov-skips.yaml. checkov runs once per session per scan (it is slow)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploykit import DEPLOY_TESTS, REPO, VALUE_SETS, load_values

SKIPS = yaml.safe_load((DEPLOY_TESTS / "checkov-skips.yaml").read_text(encoding="utf-8"))


def pinned(name: str) -> bool:
    image = load_values(name).get("image", {})
    return all(image.get(kind, {}).get("digest") for kind in ("appliance", "vllm"))


PINNED = [name for name in VALUE_SETS if pinned(name)]


def run_checkov(checkov: str, directory: Path, frameworks: list[str], skips: list[str]) -> list[dict[str, Any]]:
    cmd = [
        checkov,
        "--directory",
        str(directory),
        "--framework",
        *frameworks,
        "--output",
        "json",
        "--quiet",
        "--compact",
        "--skip-download",
        "--no-fail-on-crash",
    ]
    if skips:
        cmd += ["--skip-check", ",".join(skips)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    try:
        reports = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"checkov did not produce JSON (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return reports if isinstance(reports, list) else [reports]


def failures(reports: list[dict[str, Any]]) -> list[str]:
    return sorted(
        f"{c['check_id']} {c['check_name']}: {c['resource']} ({c['file_path']})"
        for r in reports
        for c in r.get("results", {}).get("failed_checks", [])
    )


@pytest.fixture(scope="module")
def scans(checkov, rendered_dir, tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    pinned_dir = tmp_path_factory.mktemp("pinned")
    for name in PINNED:
        shutil.copy(rendered_dir / f"{name}.yaml", pinned_dir / f"{name}.yaml")
    shutil.copy(REPO / "Dockerfile", pinned_dir / "Dockerfile")
    bad_dir = tmp_path_factory.mktemp("bad")
    (bad_dir / "bad.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "bad", "namespace": "medhelm-eval"},
                "spec": {
                    "containers": [{"name": "c", "image": "busybox:latest", "securityContext": {"privileged": True}}]
                },
            }
        )
    )
    return {
        "all": run_checkov(checkov, rendered_dir, ["kubernetes"], list(SKIPS["all_value_sets"])),
        "pinned": run_checkov(checkov, pinned_dir, ["kubernetes", "dockerfile"], list(SKIPS["pinned_value_sets"])),
        "bad": run_checkov(checkov, bad_dir, ["kubernetes"], []),
    }


def test_skips_are_justified():
    for group in ("all_value_sets", "pinned_value_sets"):
        for check, reason in SKIPS[group].items():
            assert check.startswith("CKV"), check
            assert isinstance(reason, str) and len(reason) > 80, f"{group}/{check}: justify the skip"
    assert set(SKIPS["pinned_value_sets"]) < set(SKIPS["all_value_sets"])


def test_some_value_set_is_digest_pinned():
    assert "gpu" in PINNED


def test_checkov_passes_every_rendered_value_set(scans):
    (report,) = scans["all"]
    assert report["check_type"] == "kubernetes"
    summary = report["summary"]
    assert summary["parsing_errors"] == 0
    assert summary["resource_count"] >= 30 and summary["passed"] >= 500
    assert failures(scans["all"]) == []


def test_checkov_passes_pinned_manifests_and_the_dockerfile(scans):
    by_type = {r["check_type"]: r for r in scans["pinned"]}
    assert set(by_type) == {"kubernetes", "dockerfile"}
    assert by_type["dockerfile"]["summary"]["passed"] >= 20
    assert by_type["kubernetes"]["summary"]["passed"] >= 100
    assert failures(scans["pinned"]) == []


def test_checkov_really_fails_a_bad_manifest(scans):
    failed = {f.split()[0] for f in failures(scans["bad"])}
    # privileged, privilege escalation, root, latest tag, no probes, no limits: checkov must notice.
    assert {"CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_23", "CKV_K8S_14"} <= failed, failed


def test_inline_checkov_skips_are_narrow(rendered):
    """The only in-manifest suppressions: no probes on one-shot `helm test` pods, and no fixed UID under
    OpenShift's restricted-v2 SCC (which assigns one). Each carries its reason."""
    for name in VALUE_SETS:
        openshift = load_values(name).get("openshift", {}).get("enabled", False)
        for doc in rendered(name):
            annotations = doc["metadata"].get("annotations") or {}
            skips = dict(v.split("=", 1) for k, v in annotations.items() if k.startswith("checkov.io/"))
            if not skips:
                continue
            allowed = {"CKV_K8S_40"} if openshift else set()
            if annotations.get("helm.sh/hook") == "test":
                allowed |= {"CKV_K8S_8", "CKV_K8S_9"}
            where = f"{name}: {doc['kind']}/{doc['metadata']['name']}"
            assert set(skips) <= allowed, where
            assert all(len(reason) > 40 for reason in skips.values()), where
