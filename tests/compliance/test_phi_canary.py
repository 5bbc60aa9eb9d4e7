"""The PHI canary: unique strings planted in a synthetic extract's notes, names and ids (and in the model's
outputs and the judges' explanations) must appear nowhere after register, run (with the LLM jury), export
request and approval: not in the bundle, the logs, the audit trail, the request, or the store's bytes."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from medhelm_local.export.policy import POLICY_ENV
from medhelm_local.home import ModelEndpoint
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.compliance.conftest import REQUESTER, add_models, approve_args, signers, write_policy
from tests.conftest import cli_env

NAME = "Zyphorandel"  # a patient's surname
FIRST = "Quenvalyra"
MRN = "QZ77410598"
NOTE = "canarynotephrase"
OUTPUT = "canaryoutputmark"
JUDGE = "canaryjudgemark"
CANARIES = (NAME, FIRST, MRN, NOTE, OUTPUT, JUDGE)
REPO = Path(__file__).resolve().parents[2]


def _note(i: int) -> str:
    return (f"Patient {FIRST} {NAME} (MRN {MRN}-{i}), seen 03/14/2025 at 12 Elm Street. {NOTE} {i}: "
            f"metastatic disease, prognosis under six months. Call (555) 123-4567.")


def _extracts(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True)
    hospice, notes = folder / "hospice.csv", folder / "care_plans.csv"
    with hospice.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["prompt", "context", "label"])
        for i in range(24):
            writer.writerow(["Refer to hospice? A. Yes B. No", _note(i), "A" if i % 2 == 0 else "B"])
    with notes.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["prompt", "context"])
        for i in range(12):
            writer.writerow([f"Restructure the care plan for {FIRST} {NAME} ({MRN}).", _note(i)])
    return hospice, notes


def _model(messages: list[dict[str, Any]]) -> str:
    # Echo patient text back, as a careless model might: the outputs must stay inside the encrypted store.
    return f"A. {OUTPUT} " + messages[-1]["content"][:400]


def _judge(_messages: list[dict[str, Any]]) -> str:
    return json.dumps({c: {"score": 4, "explanation": f"{JUDGE}: mentions {NAME}, MRN {MRN}."}
                       for c in ("accuracy", "structure", "clarity", "completeness")})


def test_no_canary_leaves_or_lies_around(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    stderr: list[str] = []
    stdout: list[str] = []

    def cli(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "medhelm_local.cli", "--home", str(home), *args],
                              capture_output=True, text=True, timeout=300, env=env)
        stderr.append(proc.stderr)
        stdout.append(proc.stdout)
        assert proc.returncode == 0, (args, proc.stderr[-3000:])
        return proc.stdout

    cli("init")
    env[POLICY_ENV] = str(write_policy(home))
    hospice, notes = _extracts(tmp_path / "extracts")
    with (FakeOpenAIServer(responder=_model, record_bodies=True) as model,
          FakeOpenAIServer(responder=_judge) as judge_a, FakeOpenAIServer(responder=_judge) as judge_b):
        add_models(home, [ModelEndpoint(name="eval-model", base_urls=[model.base_url]),
                          ModelEndpoint(name="judge-a", base_urls=[judge_a.base_url]),
                          ModelEndpoint(name="judge-b", base_urls=[judge_b.base_url])], judges=["judge-a", "judge-b"])
        cli("datasets", "register", "hospice_referral", str(hospice))
        cli("datasets", "register", "note_extract", str(notes))
        run = json.loads(cli("run", "--model", "eval-model", "--benchmarks", "hospice_referral,note_extract",
                             "--json"))
        # The canaries really went through the pipeline: the model saw them and the jury judged every output.
        assert any(NAME in json.dumps(body) for body in model.bodies)
        assert judge_a.completions_sent >= 12 and judge_b.completions_sent >= 12
    request = json.loads(cli("export", "request", "--runs", run["run_id"], "--key",
                             str(signers(home)[REQUESTER].private), "--json"))
    assert request["status"] == "ready", [c for c in request["checks"] if c["result"] == "fail"]
    outbox = tmp_path / "outbox"
    cli("export", "approve", request["request_id"], *approve_args(home), "--out", str(outbox))
    cli("audit", "verify")

    bundle = outbox / request["request_id"]
    aggregates = json.loads((bundle / "aggregates.json").read_text())
    jury_cell = next(c for c in aggregates["cells"] if c["benchmark"] == "note_extract")
    assert jury_cell["n_total"] == 12 and jury_cell["score"] is not None  # the jury's scores were exported

    places: dict[str, bytes] = {"stderr": "\n".join(stderr).encode(), "stdout": "\n".join(stdout).encode()}
    for path in [*bundle.iterdir(), *(home / "exports").rglob("*"), home / "audit" / "audit.jsonl",
                 *(home / "store").rglob("*"), *(home / "reports").rglob("*")]:
        if path.is_file():
            places[str(path)] = path.read_bytes()
    assert any("medhelm.duckdb" in p for p in places)
    leaks = [(place, canary) for place, data in places.items() for canary in CANARIES
             if canary.encode() in data or canary.lower().encode() in data.lower()]
    assert leaks == []
    # Sanity: the extracts on disk (the input) do hold the canaries, so the search above can find them.
    assert NAME.encode() in hospice.read_bytes()
