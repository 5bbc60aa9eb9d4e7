"""The README's first promise: `medhelm-local demo` runs the real embedded llama.cpp model end to end,
offline, on a machine whose only network interface is loopback: two closed-ended benchmarks and MedicationQA,
whose answers the real embedded model judges as the jury (issue 18: llama-cpp-python refuses the json_schema
request shape, so before the fix every judgement failed with HTTP 500)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm_local.demo.medicationqa import sample_rows
from medhelm_local.demo.synthetic import hospice_extract_csv
from tests.conftest import Cli, cli_env

pytestmark = pytest.mark.slow


def _loopback_only(command: list[str]) -> list[str]:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.fail("this test needs `unshare` (util-linux) and `ip` (iproute2) to build a loopback-only namespace")
    inner = " ".join(f"'{c}'" for c in command)
    return ["unshare", "--net", "sh", "-c", f"ip link set lo up && exec {inner}"]


def test_demo_offline_on_the_embedded_model(tmp_path: Path) -> None:
    demo_home = tmp_path / "demo"
    command = [sys.executable, "-m", "medhelm_local.cli", "demo", "--instances", "8", "--demo-home", str(demo_home),
               "--json"]
    proc = subprocess.run(_loopback_only(command), capture_output=True, text=True, timeout=1200, env=cli_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads(proc.stdout)

    board = {row["model"]: row for row in payload["leaderboard"]}
    embedded = board["smollm2-135m-embedded"]
    assert set(embedded["benchmarks"]) == {"pubmedqa", "hospice_referral", "medication_qa"}
    for benchmark in ("pubmedqa", "hospice_referral"):
        result = embedded["benchmarks"][benchmark]
        # Every request was answered by the real model (a failure would be counted, not scored).
        assert result["n"] == 8 and result["n_failed"] == 0, result
        assert 0.0 <= result["score"] <= 1.0
    assert "smoke-test model" in payload["note"]

    # MedicationQA: every bundled row answered and judged by the real embedded model, its jury score on the board
    jury_scored = embedded["benchmarks"]["medication_qa"]
    assert jury_scored["metric"] == "jury" and jury_scored["n"] == len(sample_rows()) == 3, jury_scored
    assert jury_scored["n_failed"] == 0 and 0.0 <= jury_scored["score"] <= 1.0
    assert jury_scored["judge_failure_rates"] == {"smollm2-135m-embedded": 0.0}
    (judge,) = payload["jury"]
    assert judge["judge"] == "smollm2-135m-embedded" and judge["judgments"] == 3
    assert judge["request_failed"] == 0  # the judge's server accepted every request
    assert judge["valid"] >= 0.9 * judge["judgments"]  # valid 1-5 ratings for every criterion
    assert judge["structured_output"] == ["json_object+schema"]
    cli = Cli(home=demo_home, env=cli_env())
    manifest = cli("runs", "manifest", payload["run_id"])
    assert manifest.code == 0, manifest.stderr
    recorded = manifest.json()["manifest"]["jury"]["judges"]["smollm2-135m-embedded"]
    assert recorded["kind"] == "embedded" and recorded["structured_output"] == "json_object+schema"
    assert recorded["rejected"] == [] and recorded["accepted"] is True
    # the judge prompts were fitted with the llama.cpp server's own tokenizer into the demo's 4096-token context
    assert recorded["token_counting"]["method"] == "llama.cpp" and recorded["context_length"] == 4096
    failures = cli("jury", "failures", "--run", payload["run_id"], "--json")
    (rate,) = failures.json()
    assert rate["request_failed"] == 0 and rate["ok"] >= 0.9 * rate["total"]

    # The report is aggregate-only: model, benchmark and metric names, numbers; no instance data.
    report = json.loads(Path(payload["report"]).read_text())
    assert report["schema"] == "medhelm-local/aggregate-report/v1"
    for model in report["models"]:
        assert set(model) == {"model", "win_rate", "macro_avg", "benchmarks"}
        assert {entry["benchmark"] for entry in model["benchmarks"]} == {"pubmedqa", "hospice_referral",
                                                                         "medication_qa"}
        for entry in model["benchmarks"]:
            assert set(entry) == {"benchmark", "metric", "score", "n", "n_failed"}

    # The synthetic notes are stored encrypted and never printed or logged.
    note_fragment = "SYNTHETIC NOTE 000"
    assert note_fragment in hospice_extract_csv()
    for file in (demo_home / "store").iterdir():
        assert note_fragment.encode() not in file.read_bytes()
    assert note_fragment not in proc.stderr + proc.stdout
    assert "embedded.stopped" in proc.stderr
    # nor are the model's answers or the judge's explanations (only counts and names are printed)
    assert "explanation" not in proc.stdout + proc.stderr
