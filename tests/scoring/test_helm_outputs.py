"""``score --predictions`` on model outputs as HELM writes them gives the project-format result (issue 13).

The fixtures follow HELM's own schema (crfm-helm: ``ScenarioState`` / ``RequestState`` / ``Instance`` /
``RequestResult`` serialised with ``asdict_without_nones``; ``DisplayPrediction`` and ``PerInstanceStats`` lists)
and HELM's scenarios for the instances: PubMedQA's input is a ``PassageQuestionInput`` ("Context: <Label>.
<context>" lines, then "Question: ..."), three references of which one is tagged correct, answered through the
multiple-choice-joint adapter (a letter and an ``output_mapping``), with positional ids "id0", "id1", ...;
MedCalc-Bench keeps its row number as the instance id and generates free text.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli, cli_env

LETTERS = {"A": "yes", "B": "no", "C": "maybe"}
SECRET = "Ambrose-Fenwhistle"  # invented patient text inside an output: never in messages


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory, public_data: Path) -> Cli:
    cli = Cli(home=tmp_path_factory.mktemp("helm") / "home", env=cli_env())
    assert cli("init").code == 0
    for benchmark, path in (("pubmedqa", public_data / "pubmedqa" / "ori_pqal.json"),
                            ("medcalc_bench", public_data / "medcalc_bench" / "test_data.csv"),
                            ("medqa", public_data / "medqa"), ("medhallu", public_data / "medhallu")):
        result = cli("datasets", "register", benchmark, str(path))
        assert result.code == 0, result.stderr
    return cli


def _request(prompt: str, max_tokens: int) -> dict[str, Any]:
    return {"model_deployment": "huggingface/llama-3.1-8b-instruct", "model": "meta/llama-3.1-8b-instruct",
            "embedding": False, "prompt": prompt, "temperature": 0.0, "num_completions": 1, "top_k_per_token": 1,
            "max_tokens": max_tokens, "stop_sequences": [], "echo_prompt": False, "top_p": 1,
            "presence_penalty": 0, "frequency_penalty": 0}


def _result(text: str | None) -> dict[str, Any]:
    if text is None:
        return {"success": False, "embedding": [], "completions": [], "cached": False,
                "error": "Request timed out after 60 seconds"}
    return {"success": True, "embedding": [], "completions": [{"text": text, "logprob": 0.0, "tokens": []}],
            "cached": False, "request_time": 1.31, "request_datetime": 1747000000}


def _state(instance: dict[str, Any], text: str | None, *, max_tokens: int,
           output_mapping: dict[str, str] | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"instance": instance, "train_trial_index": 0,
                             "request": _request(instance["input"]["text"], max_tokens), "result": _result(text),
                             "num_train_instances": 0, "prompt_truncated": False, "num_conditioning_tokens": 0}
    if output_mapping is not None:
        state["output_mapping"] = output_mapping
    return state


def _adapter_spec(method: str, max_tokens: int) -> dict[str, Any]:
    return {"method": method, "global_prefix": "", "global_suffix": "", "instructions": "",
            "input_prefix": "", "input_suffix": "\n", "reference_prefix": "A. ", "reference_suffix": "\n",
            "output_prefix": "Answer: ", "output_suffix": "\n", "instance_prefix": "\n", "substitutions": [],
            "max_train_instances": 0, "max_eval_instances": 1000, "num_outputs": 1, "num_train_trials": 1,
            "num_trials": 1, "sample_train": True, "model_deployment": "huggingface/llama-3.1-8b-instruct",
            "model": "meta/llama-3.1-8b-instruct", "temperature": 0.0, "max_tokens": max_tokens,
            "stop_sequences": [], "multi_label": False}


def write_run(run_dir: Path, states: list[dict[str, Any]], method: str, max_tokens: int) -> Path:
    """A HELM run directory: scenario_state.json, per_instance_stats.json, display_predictions.json,
    instances.json (what helm-run and helm-summarize write)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "scenario_state.json").write_text(json.dumps(
        {"adapter_spec": _adapter_spec(method, max_tokens), "request_states": states}, indent=2))
    stats, display, instances = [], [], []
    for state in states:
        instance = state["instance"]
        instances.append(instance)
        stat = {"name": {"name": "num_output_tokens", "split": "test"}, "count": 1, "sum": 1.0,
                "sum_squared": 1.0, "min": 1.0, "max": 1.0, "mean": 1.0, "variance": 0.0, "stdev": 0.0}
        stats.append({"instance_id": instance["id"], "train_trial_index": 0, "stats": [stat]})
        if state["result"]["success"]:
            text = state["result"]["completions"][0]["text"]
            entry = {"instance_id": instance["id"], "train_trial_index": 0, "predicted_text": text,
                     "stats": {"num_output_tokens": 1.0}}
            if state.get("output_mapping") and text.strip() in state["output_mapping"]:
                entry["mapped_output"] = state["output_mapping"][text.strip()]
            display.append(entry)
    (run_dir / "per_instance_stats.json").write_text(json.dumps(stats, indent=2))
    (run_dir / "display_predictions.json").write_text(json.dumps(display, indent=2))
    (run_dir / "instances.json").write_text(json.dumps(instances, indent=2))
    return run_dir


def write_jsonl(path: Path, outputs: dict[str, str | None]) -> Path:
    path.write_text("".join(json.dumps({"id": iid, "output": out}) + "\n" for iid, out in outputs.items()))
    return path


# -- PubMedQA: HELM's positional ids, matched by input text; letters through the output mapping -----------------

def pubmedqa_run(public_data: Path, tmp_path: Path, n: int = 120) -> tuple[Path, dict[str, str | None]]:
    data = json.loads((public_data / "pubmedqa" / "ori_pqal.json").read_text(encoding="utf-8"))
    states, same = [], {}
    for index, (pmid, example) in enumerate(list(data.items())[:n]):
        background = "\n".join(f"{label.title()}. {context}"
                               for label, context in zip(example["LABELS"], example["CONTEXTS"], strict=True))
        text = f"Context: {background}\n\nQuestion: {example['QUESTION']}\n"
        references = [{"output": {"text": answer}, "tags": ["correct"] if answer == example["final_decision"] else []}
                      for answer in LETTERS.values()]
        instance = {"input": {"text": text}, "references": references, "split": "test", "id": f"id{index}"}
        gold = next(letter for letter, answer in LETTERS.items() if answer == example["final_decision"])
        wrong = next(letter for letter in LETTERS if letter != gold)
        letter: str | None = gold if index % 3 else wrong  # two thirds right
        if index % 17 == 5:
            letter = None  # HELM's request failed
        states.append(_state(instance, None if letter is None else f" {letter}", max_tokens=1,
                             output_mapping=LETTERS))
        same[pmid] = None if letter is None else LETTERS[letter]
    return write_run(tmp_path / "pubmedqa-run", states, "multiple_choice_joint", 1), same


def _comparable(payload: object) -> dict[str, Any]:
    assert isinstance(payload, dict)
    return {k: v for k, v in payload.items() if k not in ("predictions_sha256", "predictions_format", "prompt_style")}


def test_pubmedqa_helm_run_scores_like_jsonl(cli: Cli, public_data: Path, tmp_path: Path) -> None:
    run_dir, same = pubmedqa_run(public_data, tmp_path)
    jsonl = cli("score", "pubmedqa", "--predictions", str(write_jsonl(tmp_path / "p.jsonl", same)), "--json")
    assert jsonl.code == 0, jsonl.stderr
    expected = _comparable(jsonl.json())
    assert expected["n_failed"] == 7 and expected["n"] == 113
    assert 0.6 < expected["score"] < 0.7

    for source in (run_dir, run_dir / "scenario_state.json", run_dir / "per_instance_stats.json"):
        result = cli("score", "pubmedqa", "--predictions", str(source), "--json")
        assert result.code == 0, result.stderr
        payload = result.json()
        assert isinstance(payload, dict) and payload["predictions_format"] == "helm:scenario_state.json"
        assert _comparable(payload) == {**expected, "breakdown": {**expected["breakdown"],
                                                                  "failures": {"helm_request_failed": 7}}}

    # display_predictions.json (+ instances.json) holds no failed requests: the 113 answered ones
    result = cli("score", "pubmedqa", "--predictions", str(run_dir / "display_predictions.json"), "--json")
    assert result.code == 0, result.stderr
    payload = result.json()
    assert isinstance(payload, dict) and payload["predictions_format"] == "helm:display_predictions.json"
    assert (payload["score"], payload["n"], payload["n_failed"]) == (expected["score"], 113, 0)


def test_helm_run_without_outputs_or_from_another_dataset_exits_2(cli: Cli, public_data: Path,
                                                                 tmp_path: Path) -> None:
    run_dir, _ = pubmedqa_run(public_data, tmp_path, n=12)
    only_stats = tmp_path / "stats-only"
    only_stats.mkdir()
    (only_stats / "per_instance_stats.json").write_bytes((run_dir / "per_instance_stats.json").read_bytes())
    result = cli("score", "pubmedqa", "--predictions", str(only_stats), "--json")
    assert result.code == 2 and "not the model outputs" in result.stderr and result.stdout == ""

    state = json.loads((run_dir / "scenario_state.json").read_text())
    state["request_states"][3]["instance"]["input"]["text"] = f"Context: {SECRET} was seen today.\n"
    state["request_states"][4]["result"]["completions"][0]["text"] = SECRET
    (run_dir / "scenario_state.json").write_text(json.dumps(state))
    result = cli("score", "pubmedqa", "--predictions", str(run_dir), "--json")
    assert result.code == 2
    assert "match no registered instance (ids id3)" in result.stderr
    assert SECRET not in result.stderr + result.stdout

    (run_dir / "scenario_state.json").write_text('{"request_states": 3}')
    result = cli("score", "pubmedqa", "--predictions", str(run_dir), "--json")
    assert result.code == 2 and "request_states" in result.stderr


# -- MedCalc-Bench: HELM keeps the row number as the id; free-text answers --------------------------------------

def test_medcalc_helm_run_scores_like_jsonl(cli: Cli, public_data: Path, tmp_path: Path) -> None:
    with (public_data / "medcalc_bench" / "test_data.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))[:200]
    states, same = [], {}
    for index, row in enumerate(rows):
        text = f"Patient Note:\n\n{row['Patient Note']}\n\nQuestion:\n\n{row['Question']}"
        instance = {"input": {"text": text},
                    "references": [{"output": {"text": row["Ground Truth Answer"]}, "tags": ["correct"]}],
                    "split": "test", "id": row["Row Number"],
                    "extra_data": {"lower_limit": row["Lower Limit"], "upper_limit": row["Upper Limit"],
                                   "calculator_id": row["Calculator ID"]}}
        output: str | None = row["Ground Truth Explanation"] if index % 4 else "The answer is 0.5."
        if index == 7:
            output = None
        states.append(_state(instance, output, max_tokens=10))
        same[row["Row Number"]] = output
    run_dir = write_run(tmp_path / "medcalc-run", states, "generation", 10)
    jsonl = cli("score", "medcalc_bench", "--predictions", str(write_jsonl(tmp_path / "m.jsonl", same)), "--json")
    helm = cli("score", "medcalc_bench", "--predictions", str(run_dir), "--json")
    assert jsonl.code == 0 and helm.code == 0, jsonl.stderr + helm.stderr
    expected, got = _comparable(jsonl.json()), _comparable(helm.json())
    assert expected["n"] == 199 and expected["n_failed"] == 1
    got["breakdown"]["failures"] = expected["breakdown"]["failures"]
    assert got == expected


# -- Run directories written by crfm-helm 0.5.16's own code (tests/parity/tools/helm_run_fixture.py) --------------

HELM_RUNS = Path(__file__).parent / "fixtures" / "helm_runs"


@pytest.mark.parametrize(("benchmark", "score", "n"), [
    ("pubmedqa", 8 / 12, 12),  # letters, which HELM's output mapping maps to yes/no/maybe: right 2 times in 3
    ("medqa", 8 / 12, 12),  # letters, which HELM's output mapping maps to the option text
    ("medhallu", 8 / 12, 12),  # HELM's prompt asks for 1 (hallucinated) or 0; the project's for yes or no
    ("medcalc_bench", 9 / 12, 12),  # the rows' own step-by-step explanations, every fourth a wrong value
])
def test_run_files_written_by_helm_itself_score_like_the_projects_format(cli: Cli, benchmark: str, score: float,
                                                                        n: int) -> None:
    """HELM's outputs answer HELM's prompts: ``score`` reads them in the medhelm prompt style (HELM's letters and
    1/0 mapped to the spec's labels), the project's JSONL in the default style; the figures are the same."""
    run_dir = HELM_RUNS / benchmark
    jsonl = cli("score", benchmark, "--predictions", str(run_dir / "outputs.jsonl"), "--json")
    assert jsonl.code == 0, jsonl.stderr
    assert jsonl.json()["prompt_style"] == "default"
    expected = _comparable(jsonl.json())
    assert (expected["score"], expected["n"], expected["n_failed"]) == (pytest.approx(score), n, 0)
    formats = {run_dir: "helm:scenario_state.json", run_dir / "scenario_state.json": "helm:scenario_state.json",
               run_dir / "per_instance_stats.json": "helm:scenario_state.json",
               run_dir / "display_predictions.json": "helm:display_predictions.json"}
    for source, name in formats.items():
        result = cli("score", benchmark, "--predictions", str(source), "--json")
        assert result.code == 0, result.stderr
        payload = result.json()
        assert isinstance(payload, dict) and payload["predictions_format"] == name, source.name
        assert payload["prompt_style"] == "medhelm"
        assert _comparable(payload) == expected, source.name


def test_helm_outputs_in_the_default_style_read_the_mapped_answer_only_where_it_is_a_label(cli: Cli) -> None:
    """--prompt-style default on HELM outputs: PubMedQA's mapped "yes" is a label; MedQA's mapped option text is
    not, so its letter is read; MedHallu's "1" answers no default-style question (yes/no): unparsed, scored 0."""
    figures = {}
    for benchmark in ("pubmedqa", "medqa", "medhallu"):
        result = cli("score", benchmark, "--predictions", str(HELM_RUNS / benchmark), "--prompt-style", "default",
                     "--json")
        assert result.code == 0, result.stderr
        payload = result.json()
        assert isinstance(payload, dict) and payload["prompt_style"] == "default"
        figures[benchmark] = (payload["score"], payload["breakdown"]["parse_rate"])
    assert figures == {"pubmedqa": (pytest.approx(8 / 12), 1.0), "medqa": (pytest.approx(8 / 12), 1.0),
                       "medhallu": (0.0, 0.0)}
    refused = cli("score", "mimic_iv_billing", "--predictions", str(HELM_RUNS / "medqa"), "--prompt-style",
                  "medhelm")
    assert refused.code == 2 and "MedHELM parity is impossible" in refused.stderr
