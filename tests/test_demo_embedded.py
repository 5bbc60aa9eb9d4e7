"""The README's first promise: `medhelm-local demo` runs the real embedded llama.cpp model end to end,
offline, on a machine whose only network interface is loopback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm_local.demo.synthetic import hospice_extract_csv
from tests.conftest import cli_env

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
    for benchmark in ("pubmedqa", "hospice_referral"):
        result = embedded["benchmarks"][benchmark]
        # Every request was answered by the real model (a failure would be counted, not scored).
        assert result["n"] == 8 and result["n_failed"] == 0, result
        assert 0.0 <= result["score"] <= 1.0
    assert "smoke-test model" in payload["note"]

    # The report is aggregate-only: model, benchmark and metric names, numbers; no instance data.
    report = json.loads(Path(payload["report"]).read_text())
    assert report["schema"] == "medhelm-local/aggregate-report/v1"
    for model in report["models"]:
        assert set(model) == {"model", "win_rate", "macro_avg", "benchmarks"}
        for entry in model["benchmarks"]:
            assert set(entry) == {"benchmark", "metric", "score", "n", "n_failed"}

    # The synthetic notes are stored encrypted and never printed or logged.
    note_fragment = "SYNTHETIC NOTE 000"
    assert note_fragment in hospice_extract_csv()
    for file in (demo_home / "store").iterdir():
        assert note_fragment.encode() not in file.read_bytes()
    assert note_fragment not in proc.stderr + proc.stdout
    assert "embedded.stopped" in proc.stderr
