# ruff: noqa: E402  (helm.common.gpu_utils must be stubbed before HELM's run specs are imported)
"""Write HELM run directories with HELM's own code: the fixtures of ``tests/scoring/test_helm_run_files.py``.

Not run by CI. In the venv of ``helm_golden.py`` (crfm-helm 0.5.16):

    /tmp/helm-venv/bin/python tests/parity/tools/helm_run_fixture.py [--data ../shared/data/public]

For PubMedQA, MedQA, MedHallu, MedCalc-Bench and MTSamples, the first real items (MTSamples: the reports of the
shared sample HELM's own ``get_instances`` keeps) of the shared files become HELM ``Instance``s (the lines of
HELM's scenarios, in ``helm_golden.py``; ids as HELM's runner gives them: ``with_instance_ids`` where the
scenario sets none, MedCalc-Bench's row number where it does), HELM's adapter builds the ``RequestState``s, each
gets a ``RequestResult`` with a scripted completion (``pubmedqa_output`` / ``medcalc_output``), and the files are
written as ``helm-run`` and ``helm-summarize`` write them: ``scenario_state.json`` and ``per_instance_stats.json``
by the runner's ``asdict_without_nones`` + ``json.dumps(indent=2)``, then ``instances.json``,
``display_predictions.json`` (and ``display_requests.json``, deleted: `score` never reads it) by
``run_display.write_run_display_json`` with the MedHELM schema. Also writes ``outputs.jsonl``: the same
outputs in this appliance's format, keyed by its ids.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from dataclasses import replace
from pathlib import Path

# helm.common.codec imports every perturbation, and the synonym perturbation imports spaCy (to use it only when
# that perturbation runs): a stand-in spares installing spaCy and its models; serialisation never touches it.
sys.modules.setdefault("spacy", types.ModuleType("spacy"))

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helm_golden  # stubs helm.common.gpu_utils
from helm.benchmark.adaptation.scenario_state import ScenarioState
from helm.benchmark.metrics.metric import PerInstanceStats
from helm.benchmark.metrics.metric_name import MetricName
from helm.benchmark.metrics.statistic import Stat
from helm.benchmark.presentation.run_display import write_run_display_json
from helm.benchmark.presentation.schema import SCHEMA_YAML_PACKAGE, read_schema
from helm.benchmark.run_specs import medhelm_run_specs as rs
from helm.benchmark.scenarios.scenario import TEST_SPLIT, with_instance_ids
from helm.common.general import asdict_without_nones
from helm.common.request import GeneratedOutput, RequestResult

OUT = helm_golden.ROOT / "tests" / "scoring" / "fixtures" / "helm_runs"
N_ITEMS = 12


def pubmedqa_output(index: int, gold: str) -> str:
    """A letter as HELM's multiple-choice prompt asks (" A"): right two times in three, else another letter."""
    letters = {"yes": "A", "no": "B", "maybe": "C"}
    return f" {letters[gold]}" if index % 3 else f" {'B' if letters[gold] == 'A' else 'A'}"


def letter_output(index: int, gold_letter: str, letters: str) -> str:
    """A letter (MedQA): right two times in three, else the next letter."""
    return gold_letter if index % 3 else letters[(letters.index(gold_letter) + 1) % len(letters)]


def medcalc_output(index: int, explanation: str) -> str:
    """A step-by-step answer (the row's own Ground Truth Explanation), or every fourth time a wrong value."""
    return explanation if index % 4 else "The answer is 0.5."


def build(benchmark: str, data: Path, out: Path) -> None:
    import csv
    from importlib import resources

    run_spec = {"pubmedqa": rs.get_pubmed_qa_spec, "medcalc_bench": rs.get_medcalc_bench_spec,
                "medqa": rs.get_medhelm_med_qa_spec, "medhallu": rs.get_medhallu_spec,
                "mtsamples": rs.get_mtsamples_spec}[benchmark]()
    items = list(helm_golden.CASES[benchmark].items(data))[:N_ITEMS]
    instances = [replace(instance, split=TEST_SPLIT) for _, _, instance in items]
    if benchmark == "medcalc_bench":  # HELM's MedCalc-Bench scenario sets id = the row number
        instances = [replace(instance, id=our_id) for (_, our_id, _), instance in zip(items, instances, strict=True)]
        with (data / "medcalc_bench" / "test_data.csv").open(newline="", encoding="utf-8") as handle:
            explanations = {row["Row Number"]: row["Ground Truth Explanation"] for row in csv.DictReader(handle)}
    else:
        instances = with_instance_ids(instances)
    states, ours = [], {}
    for index, ((_, our_id, _), instance) in enumerate(zip(items, instances, strict=True)):
        gold = next(r.output.text for r in instance.references if r.is_correct)
        state = helm_golden.request_state(run_spec.adapter_spec, instance)  # HELM's adapter, as in the goldens
        ours_answer: str | None = None
        if benchmark == "pubmedqa":
            text = pubmedqa_output(index, gold)
        elif benchmark == "medqa":  # the project's answer: the letter (HELM maps it to the option text)
            letters = "".join(state.output_mapping)
            text = letter_output(index, next(k for k, v in state.output_mapping.items() if v == gold), letters)
            ours_answer = text
        elif benchmark == "mtsamples":  # the response HELM's judge prompts in the goldens were rendered with
            text = helm_golden.JUDGE_RESPONSE
        elif benchmark == "medhallu":  # HELM's prompt asks for 1 (hallucinated) or 0; the project's for yes/no
            text = gold if index % 3 else {"1": "0", "0": "1"}[gold]
            ours_answer = {"1": "yes", "0": "no"}[text]
        else:
            text = medcalc_output(index, explanations[our_id])
        result = RequestResult(success=True, embedding=[], cached=False, request_time=1.0,
                               request_datetime=1747000000,
                               completions=[GeneratedOutput(text=text, logprob=0.0, tokens=[])])
        states.append(replace(state, result=result))
        if ours_answer is None:
            ours_answer = state.output_mapping.get(text.strip()) if state.output_mapping else text
        ours[our_id] = ours_answer
    run_dir = out / benchmark
    run_dir.mkdir(parents=True, exist_ok=True)
    scenario_state = ScenarioState(adapter_spec=run_spec.adapter_spec, request_states=states)
    (run_dir / "scenario_state.json").write_text(json.dumps(asdict_without_nones(scenario_state), indent=2))
    stats = [PerInstanceStats(instance_id=s.instance.id, perturbation=None, train_trial_index=0,
                              stats=[Stat(MetricName("num_output_tokens", split=TEST_SPLIT)).add(1)])
             for s in states]
    (run_dir / "per_instance_stats.json").write_text(json.dumps(list(map(asdict_without_nones, stats)), indent=2))
    schema = read_schema(str(resources.files(SCHEMA_YAML_PACKAGE).joinpath("schema_medhelm.yaml")))
    write_run_display_json(str(run_dir), run_spec, schema, skip_completed=False)
    (run_dir / "display_requests.json").unlink()  # the prompts again, for HELM's web pages: never read by `score`
    (run_dir / "outputs.jsonl").write_text("".join(json.dumps({"id": k, "output": v}) + "\n" for k, v in ours.items()))
    print(f"{benchmark}: {len(states)} request states -> {run_dir}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=helm_golden.ROOT.parent.parent / "shared" / "data" / "public")
    args = parser.parse_args()
    for benchmark in ("pubmedqa", "medqa", "medhallu", "medcalc_bench", "mtsamples"):
        build(benchmark, args.data, OUT)


if __name__ == "__main__":
    main()
