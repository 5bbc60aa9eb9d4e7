"""A run is frozen to the specs it was created with (issue 14 §2): the styled spec of each benchmark is snapshotted
into the run's manifest and hashed with it; a resume or retry after the spec file changed is refused (exit 2,
naming the benchmark and the field); the run always sends and scores from its snapshot."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import yaml

from medhelm_local.benchmarks.registry import SHIPPED, shipped_spec
from medhelm_local.home import Home
from medhelm_local.prompts.styles import (
    manifest_specs,
    snapshot_sha256,
    spec_changes,
    spec_for_run,
    spec_snapshot,
    styled_spec,
)
from medhelm_local.runner.manifest import manifest_sha256
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from medhelm_local.testing.fake_openai import FakeOpenAIServer, Faults
from tests.conftest import Cli

SAMPLES = Path(str(resources.files("medhelm_local.data") / "samples"))


def _spec_with(tmp_path: Path, name: str, **changes: object) -> Path:
    data = yaml.safe_load((SAMPLES / "followup_needed.yaml").read_text())
    data.update(changes)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _register(cli: Cli, spec: Path) -> None:
    done = cli("datasets", "register", "followup_needed", str(SAMPLES / "followup_needed.csv"), "--spec", str(spec))
    assert done.code == 0, done.stderr


def test_changed_spec_refuses_resume_and_retry_and_the_run_keeps_its_snapshot(home_cli: Cli, tmp_path: Path
                                                                              ) -> None:
    original = _spec_with(tmp_path, "original.yaml")
    _register(home_cli, original)
    with FakeOpenAIServer(responder=lambda _m: "A", faults=Faults(http_5xx=1.0), record_bodies=True) as server:
        assert home_cli("models", "add", "fake", "--base-url", server.base_url).code == 0
        first = home_cli("run", "--model", "fake", "--benchmarks", "followup_needed", "--max-retries", "0", "--json")
        assert first.code in (0, 1), first.stderr
        run_id = first.json()["run_id"]

        # The manifest holds the whole styled spec and its hash; the stored manifest hash covers it.
        shown_first = home_cli("runs", "manifest", run_id).json()
        assert home_cli("runs", "manifest", run_id, "--json").json() == shown_first  # as scripts pass it
        assert isinstance(shown_first, dict)
        manifest = shown_first["manifest"]
        assert shown_first["manifest_sha256"] == manifest_sha256(manifest)
        snapshot = manifest["specs"]["followup_needed"]
        assert snapshot["max_tokens"] == 8 and snapshot["metrics"] == [{"name": "exact_match", "main": True}]
        assert snapshot["prompt"]["template"].startswith("Discharge note:")
        assert manifest["spec_sha256"]["followup_needed"] == snapshot_sha256(snapshot)
        with Store.open(Home(home_cli.home), read_only=True) as store:
            meta = runs_db.runner_run(store, run_id)
        assert meta is not None and manifest_sha256(manifest) in meta

        # The spec is registered again with other decoding and another prompt: the run cannot go on.
        _register(home_cli, _spec_with(tmp_path, "changed.yaml", max_tokens=64,
                                       prompt={"system": "You are terse.", "template": "{context}\n{question}"}))
        server.faults = Faults()
        sent_before = server.requests_seen
        for flag in ("--retry-errors", "--resume"):
            refused = home_cli("run", flag, run_id)
            assert refused.code == 2, refused.stderr
            assert "followup_needed" in refused.stderr and "max_tokens" in refused.stderr
            assert "prompt.template" in refused.stderr and "prompt.system" in refused.stderr
            assert "Traceback" not in refused.stderr
        assert server.requests_seen == sent_before  # nothing was sent
        assert home_cli("runs", "manifest", run_id).json() == shown_first  # a refused resume leaves the run as it was

        # A change that decides nothing (the description) does not block it; the retry sends the snapshot's
        # prompt and decoding, never the current file's.
        _register(home_cli, _spec_with(tmp_path, "described.yaml", description="Reworded description."))
        server.bodies.clear()
        retried = home_cli("run", "--retry-errors", run_id, "--json")
        assert retried.code == 0, retried.stderr
        assert server.bodies and all(b["max_tokens"] == 8 for b in server.bodies)
        assert all(b["messages"][0]["content"] == "You are a care coordinator reviewing discharge notes."
                   for b in server.bodies)
        result = retried.json()
        assert isinstance(result, dict)
        (only,) = result["results"]
        assert only["n_failed"] == 0 and only["n"] > 0


def test_a_resume_refused_because_the_spec_changed_is_in_the_trail(home_cli: Cli, tmp_path: Path) -> None:
    """A resume refused because a benchmark's spec changed since the run was created exited 2 and left no trace in
    the trail: a compliance officer could not see who tried to add to a frozen run with another spec. It is
    recorded now, `run.resume` `refused`, naming the run, the reason and the benchmark (no spec content), opening
    no intent, and `audit report` lists it; the run itself is left as it was."""
    _register(home_cli, _spec_with(tmp_path, "original.yaml"))
    with FakeOpenAIServer(responder=lambda _m: "A", faults=Faults(http_5xx=1.0)) as server:
        assert home_cli("models", "add", "fake", "--base-url", server.base_url).code == 0
        first = home_cli("run", "--model", "fake", "--benchmarks", "followup_needed", "--max-retries", "0", "--json")
        run_id = first.json()["run_id"]
        _register(home_cli, _spec_with(tmp_path, "changed.yaml", prompt={"system": "Secret-Sentinel-Prompt",
                                                                          "template": "{context}\n{question}"}))
        for flag in ("--resume", "--retry-errors"):
            assert home_cli("run", flag, run_id).code == 2
    trail = Home(home_cli.home).audit_path.read_text()
    report = home_cli("audit", "report", "--json").json()
    assert isinstance(report, dict)
    assert [(r["action"], r["outcome"], r["run_id"], r["model"], r["mode"], r["reason"], r["changed"])
            for r in report["run_refusals"]] == [
        ("run.resume", "refused", run_id, "fake", mode, "spec_changed", ["followup_needed"])
        for mode in ("resume", "retry_errors")]
    assert report["unfinished"] == [] and [r["resumed"] for r in report["runs"]] == [0]
    shown = home_cli("audit", "show", "--action", "run.resume", "--json")
    assert shown.code == 0 and "Secret-Sentinel-Prompt" not in shown.stdout + trail
    text = home_cli("audit", "report").stdout
    assert "Refused resumes of a run:" in text and f"run_id={run_id}" in text and "reason=spec_changed" in text


def test_spec_for_run_reads_the_snapshot_not_the_current_file() -> None:
    spec = shipped_spec("pubmedqa")
    manifest = {"prompt_style": {"name": "default"}, **manifest_specs({"pubmedqa": spec})}
    assert spec_for_run("pubmedqa", manifest, SHIPPED) == spec
    assert spec_changes("pubmedqa", manifest, SHIPPED) == []
    # Tamper with the snapshot as if the file had changed after the run was created.
    changed = json.loads(json.dumps(manifest))
    changed["specs"]["pubmedqa"]["max_tokens"] = spec.max_tokens + 1
    changed["specs"]["pubmedqa"]["judge"] = None
    assert spec_for_run("pubmedqa", changed, SHIPPED).max_tokens == spec.max_tokens + 1
    assert spec_changes("pubmedqa", changed, SHIPPED) == ["max_tokens"]
    changed["specs"]["pubmedqa"]["labels"] = ["yes", "no"]
    changed["specs"]["pubmedqa"]["description"] = "not deciding"
    assert spec_changes("pubmedqa", changed, SHIPPED) == ["labels", "max_tokens"]
    # The manifest hash covers the snapshot.
    assert manifest_sha256(manifest) != manifest_sha256(changed)


def test_medhelm_style_snapshot_is_the_styled_spec() -> None:
    spec = styled_spec(shipped_spec("pubmedqa"), "medhelm")
    manifest = {"prompt_style": {"name": "medhelm"}, **manifest_specs({"pubmedqa": spec})}
    assert spec_snapshot(spec_for_run("pubmedqa", manifest, SHIPPED)) == spec_snapshot(spec)
    assert spec_changes("pubmedqa", manifest, SHIPPED) == []
    assert spec_for_run("pubmedqa", manifest, SHIPPED).prompt.template == shipped_spec("pubmedqa").medhelm.template  # type: ignore[union-attr]
