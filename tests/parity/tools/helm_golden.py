# ruff: noqa: E402  (helm.common.gpu_utils must be stubbed before HELM's run specs are imported)
"""Render HELM's own MedHELM prompts for one real item per public benchmark: the golden files of the parity tests.

Not run by CI (CI never needs crfm-helm). Regenerate by hand, in a separate virtual environment:

    python3 -m venv /tmp/helm-venv
    /tmp/helm-venv/bin/pip install --no-deps crfm-helm==0.5.16
    /tmp/helm-venv/bin/pip install filelock zstandard tqdm pyhocon pyyaml colorlog sqlitedict retrying mako \
        dacite 'cattrs~=22.2' requests openpyxl
    # and for helm_run_fixture.py (HELM's run_display and codec): numpy nltk
    /tmp/helm-venv/bin/python tests/parity/tools/helm_golden.py [--data ../shared/data/public]

For each benchmark: HELM's run spec function (``helm.benchmark.run_specs.medhelm_run_specs``) gives the
AdapterSpec; the item is read from the benchmark's native file (the shared public data, or a one-item fixture
in ``tests/parity/fixtures/``) and turned into a HELM ``Instance`` by the same lines as HELM's scenario (quoted
per benchmark below; the scenarios themselves download their data, which this script never does); HELM's own
adapter (GenerationAdapter or MultipleChoiceJointAdapter) then renders the Request. Context-window truncation is
skipped (it needs the model's tokenizer; these items fit every model). Writes
``tests/parity/golden/helm/<benchmark>.json``: the prompt, the decoding parameters and the judge prompt for
jury-scored benchmarks (HELM's annotator template with the instance input, a placeholder response and the gold).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

# The jury run specs import helm.common.gpu_utils (torch) only to name a BERTScore device: a stand-in avoids
# installing torch; it changes nothing in the adapter spec or the annotator prompt.
_gpu_utils = types.ModuleType("helm.common.gpu_utils")
_gpu_utils.get_torch_device_name = lambda: "cpu"  # type: ignore[attr-defined]
sys.modules.setdefault("helm.common.gpu_utils", _gpu_utils)

from helm.benchmark.adaptation.adapter_spec import ADAPT_MULTIPLE_CHOICE_JOINT, AdapterSpec
from helm.benchmark.adaptation.adapters.generation_adapter import GenerationAdapter
from helm.benchmark.adaptation.adapters.in_context_learning_adapter import InContextLearningAdapter
from helm.benchmark.adaptation.adapters.multiple_choice_joint_adapter import MultipleChoiceJointAdapter
from helm.benchmark.run_specs import medhelm_run_specs as rs
from helm.benchmark.scenarios.scenario import CORRECT_TAG, Input, Instance, Output, PassageQuestionInput, Reference

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "parity" / "fixtures"
OUT = ROOT / "tests" / "parity" / "golden" / "helm"
# The response a judge prompt is rendered with in the golden files (the model's output at scoring time).
JUDGE_RESPONSE = "<<model response>>"


Item = tuple[str, str, Instance]  # (source file, this project's instance id, HELM instance)


@dataclass
class Case:
    run_spec: str  # HELM run spec function name
    adapter: Callable[[], AdapterSpec]
    items: Callable[[Path], Iterable[Item]]  # data root -> (source file, our instance id, HELM instance) ...
    annotator: str | None = None  # HELM annotator module:class whose PROMPT_TEMPLATE judges it
    golden: Callable[[Instance], bool] = lambda _: True  # which item is the golden one (the first that passes)
    every_item: bool = False  # also render every item HELM keeps (small samples): the golden's "items"


def _adapter(run_spec_fn: Callable[..., Any], **kwargs: Any) -> Callable[[], AdapterSpec]:
    return lambda: run_spec_fn(**kwargs).adapter_spec


def _mc(text: str, options: list[str], correct: int) -> Instance:
    return Instance(input=Input(text=text), references=[
        Reference(Output(text=o), tags=[CORRECT_TAG] if i == correct else []) for i, o in enumerate(options)])


def pubmedqa(data: Path) -> Iterator[Item]:
    # pubmed_qa_scenario.py: background = "\n".join(f"{label.title()}. {context}"); PassageQuestionInput(
    #   passage=background, question=question + "\n", passage_prefix="Context: ", separator="\n\n")
    file = data / "pubmedqa" / "ori_pqal.json"
    for pmid, example in json.loads(file.read_text()).items():
        background = "\n".join(f"{label.title()}. {context}" for label, context in zip(
            example["LABELS"], example["CONTEXTS"], strict=True))
        prompt = PassageQuestionInput(passage=background, question=example["QUESTION"] + "\n",
                                      passage_prefix="Context: ", separator="\n\n")
        answers = ["yes", "no", "maybe"]
        yield "pubmedqa/ori_pqal.json", pmid, Instance(input=prompt, references=[
            Reference(Output(text=a), tags=[CORRECT_TAG] if a == example["final_decision"] else []) for a in answers])


def medcalc(data: Path) -> Iterator[Item]:
    # medcalc_bench_scenario.py: PassageQuestionInput(passage=patient_note + "\n", question=question + "\n",
    #   passage_prefix="Patient note: ")
    with (data / "medcalc_bench" / "test_data.csv").open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            prompt = PassageQuestionInput(passage=row["Patient Note"] + "\n", question=row["Question"] + "\n",
                                          passage_prefix="Patient note: ")
            yield "medcalc_bench/test_data.csv", row["Row Number"], Instance(
                input=prompt, references=[Reference(Output(text=row["Ground Truth Answer"]), tags=[CORRECT_TAG])])


def medec(data: Path) -> Iterator[Item]:
    # medec_scenario.py: rows without "Sentences" skipped; input_text = row["Sentences"].strip()
    name = "medec/MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv"
    with (data / name).open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if not row.get("Sentences"):
                continue
            gold = (f"{row['Error Sentence ID'].strip()} {row['Corrected Sentence'].strip()}"
                    if row["Error Flag"] == "1" else "CORRECT")
            yield name, row["Text ID"], Instance(input=Input(text=row["Sentences"].strip()),
                                                 references=[Reference(Output(text=gold), tags=[CORRECT_TAG])])


def ehrsql(data: Path) -> Iterator[Item]:
    # ehr_sql_scenario.py: extract_schema (CREATE TABLE statements, lines stripped) and
    #   input_text = f"-- Database Schema:\n{schema_prompt}\n\n-- \<newline>                    Question:\n..."
    schema_text, current, inside = [], [], False
    for line in (data / "ehrsql" / "eicu.sql").read_text(encoding="utf-8").splitlines(keepends=True):
        line = line.strip()
        if line.startswith("CREATE TABLE"):
            inside, current = True, [line]
        elif inside:
            current.append(line)
            if line.endswith(";"):
                inside = False
                schema_text.append("\n".join(current))
    schema_prompt = "\n\n".join(schema_text)
    for entry in json.loads((data / "ehrsql" / "test.json").read_text()):
        if "question" not in entry or "query" not in entry:
            continue
        input_text = f"-- Database Schema:\n{schema_prompt}\n\n-- \
                    Question:\n{entry['question']}\n\n"
        yield "ehrsql/test.json", entry["id"], Instance(
            input=Input(text=input_text), references=[Reference(Output(text=entry["query"]), tags=[CORRECT_TAG])],
            extra_data={"is_impossible": entry.get("is_impossible", False)})


def medhallu(data: Path) -> Iterator[Item]:
    # medhallu_scenario.py create_instance, for the ground truth ("0") then the hallucinated answer ("1"):
    #   f"World Knowledge: {knowledge}\n\nQuestion: {question}\n\nAnswer: {answer}\n" (knowledge is a list)
    lines = (data / "medhallu" / "medhallu_pqa_labeled.jsonl").read_text().split("\n")
    for index, line in enumerate(line for line in lines if line.strip()):
        row = json.loads(line)
        for variant, column, label in (("ground_truth", "Ground Truth", "0"),
                                       ("hallucinated", "Hallucinated Answer", "1")):
            text = f"""World Knowledge: {row["Knowledge"]}

Question: {row["Question"]}

Answer: {row[column]}
"""
            yield "medhallu/medhallu_pqa_labeled.jsonl", f"{index}:{variant}", Instance(
                input=Input(text=text), references=[Reference(Output(text=label), tags=[CORRECT_TAG])])


def medqa(data: Path) -> Iterator[Item]:
    # med_qa_scenario.py: Input(text=example["question"]); references answer.rstrip('"').rstrip() in options order
    lines = (data / "medqa" / "phrases_no_exclude_test.jsonl").read_text().split("\n")
    for index, line in enumerate(line for line in lines if line.strip()):
        example = json.loads(line)
        letters = list(example["options"])
        yield "medqa/phrases_no_exclude_test.jsonl", str(index), _mc(
            example["question"], [a.rstrip('"').rstrip() for a in example["options"].values()],
            letters.index(example["answer_idx"]))


def medmcqa(_: Path) -> Iterator[Item]:
    # med_mcqa_scenario.py: Input(text=example["question"]); references opa..opd, "cop" indexes them (0-based there;
    #   HELM's copy of the data uses 0-3, the upstream dev.json 1-4; the prompt does not show which is right)
    example = json.loads((FIXTURES / "medmcqa" / "dev.jsonl").read_text().split("\n")[0])
    yield "fixtures/medmcqa/dev.jsonl", example["id"], _mc(
        example["question"], [example[k] for k in ("opa", "opb", "opc", "opd")], example["cop"] - 1)


def head_qa(_: Path) -> Iterator[Item]:
    # headqa_scenario.py: Input(text=example["qtext"]); references in example["answers"] order
    exams = json.loads((FIXTURES / "head_qa" / "HEAD_EN.json").read_text())["exams"]
    exam, content = next(iter(exams.items()))
    example = content["data"][0]
    answers = example["answers"]
    right = next(i for i, a in enumerate(answers) if str(a["aid"]) == str(example["ra"]))
    yield "fixtures/head_qa/HEAD_EN.json", f"{exam}:{example['qid']}", _mc(
        example["qtext"], [a["atext"] for a in answers], right)


def medbullets(_: Path) -> Iterator[Item]:
    # medbullets_scenario.py: Input(text=row["question"]); references opa..ope in A..E order
    with (FIXTURES / "medbullets" / "medbullets_op5.csv").open(newline="", encoding="utf-8") as handle:
        row = next(csv.DictReader(handle))
    yield "fixtures/medbullets/medbullets_op5.csv", "0", _mc(
        row["question"], [row[k] for k in ("opa", "opb", "opc", "opd", "ope")], "ABCDE".index(row["answer_idx"]))


def race_bias(_: Path) -> Iterator[Item]:
    # race_based_med_scenario.py create_benchmark (the backslash continuations keep the next line's indentation)
    with (FIXTURES / "race_bias" / "race_based.csv").open(newline="", encoding="utf-8") as handle:
        row = next(csv.DictReader(handle))
    question, response = row["Question"], row["Response"]
    prompt = (
        f"For the following question-answer pair, respond 'A' for yes if \
                    the answer involves harmful, innacurate,"
        f"and/or race-based content and respond 'B' for no otherwise.\n\n \
                    Question: {question}\nResponse: {response}\n"
    )
    yield "fixtures/race_bias/race_based.csv", "0", _mc(prompt, ["yes", "no"],
                                                         0 if row["True/False"] == "True" else 1)


def medication_qa(_: Path) -> Iterator[Item]:
    # medication_qa_scenario.py: Input(row.Question), Reference(Output(row.Answer)) (pandas.read_excel)
    import openpyxl

    sheet = openpyxl.load_workbook(FIXTURES / "medication_qa" / "MedInfo2019-QA-Medications.xlsx").active
    header, row = [c.value for c in sheet[1]], [c.value for c in sheet[2]]
    item = dict(zip(header, row, strict=True))
    yield "fixtures/medication_qa/MedInfo2019-QA-Medications.xlsx", "0", Instance(
        input=Input(item["Question"]), references=[Reference(Output(item["Answer"]), tags=[CORRECT_TAG])])


def mediqa_qa(_: Path) -> Iterator[Item]:
    # medi_qa_scenario.py: Input(row["QuestionText"]), the ReferenceRank-1 answer as reference
    import xml.etree.ElementTree as ElementTree

    question = ElementTree.parse(FIXTURES / "mediqa_qa" / "test.xml").getroot().find("Question")
    assert question is not None
    best = next(a for a in question.findall("./AnswerList/Answer") if a.get("ReferenceRank") == "1")
    yield "fixtures/mediqa_qa/test.xml", str(question.get("QID")), Instance(
        input=Input(question.findtext("QuestionText") or ""),
        references=[Reference(Output(best.findtext("AnswerText") or ""), tags=[CORRECT_TAG])])


def med_dialog(_: Path) -> Iterator[Item]:
    # med_dialog_scenario.py: Input(text=example["src"]) for each of json.load(f)["data"] (the fixture is the
    #   bare array the spec reads by default; the items are the same)
    example = json.loads((FIXTURES / "med_dialog" / "test.json").read_text())[0]
    yield "fixtures/med_dialog/test.json", "0", Instance(
        input=Input(text=example["src"]), references=[Reference(Output(text=example["tgt"]), tags=[CORRECT_TAG])])


def _mtsamples(scenario_module: str, folder: str) -> Callable[[Path], Iterator[Item]]:
    """HELM's own MTSamples scenario, ``get_instances`` unmodified, on the shared sample's reports.

    The scenario lists its folder through the GitHub API and downloads each report unless the file is already in
    its output folder; here the report is copied into a scratch output folder first (so HELM's ``download_file``
    finds it and downloads nothing) and ``fetch_file_list`` names that one file, so that each HELM instance is
    known to come from its report (HELM's instances carry no file name). Everything else, from reading the file
    to the kept/dropped decision, the reference and the cleaned input, is HELM's code.
    """
    import importlib
    import shutil
    import tempfile

    def items(data: Path) -> Iterator[Item]:
        module = importlib.import_module(f"helm.benchmark.scenarios.{scenario_module}")
        scenario_cls = next(v for k, v in vars(module).items() if k.startswith("MTSamples") and k.endswith("Scenario"))
        for report in sorted((data / "mtsamples_sample" / folder).glob("*.txt")):
            with tempfile.TemporaryDirectory() as scratch:
                shutil.copyfile(report, Path(scratch) / report.name)
                scenario = scenario_cls()
                scenario.fetch_file_list = lambda name=report.name: [name]
                instances = scenario.get_instances(scratch)
            if instances:  # HELM drops reports without a PLAN, SUMMARY or FINDINGS reference on the line
                (instance,) = instances
                yield f"mtsamples_sample/{folder}/{report.name}", report.stem, instance

    return items


mtsamples = _mtsamples("mtsamples_replicate_scenario", "mtsamples_processed")
mtsamples_procedures = _mtsamples("mtsamples_procedures_scenario", "mtsample_procedure")


def aci_bench(data: Path) -> Iterator[Item]:
    # aci_bench_scenario.py: input_text = f"Doctor-patient dialogue:\n\n{dialogue}"
    for file in sorted((data / "aci_bench").glob("*_full.json")):
        name = f"aci_bench/{file.name}"
        for entry in json.loads(file.read_text())["data"]:
            yield name, entry["file"], Instance(input=Input(text=f"Doctor-patient dialogue:\n\n{entry['src']}"),
                                                references=[Reference(Output(text=entry["tgt"]), tags=[CORRECT_TAG])])


CASES: dict[str, Case] = {
    "pubmedqa": Case("pubmed_qa", _adapter(rs.get_pubmed_qa_spec), pubmedqa),
    "medcalc_bench": Case("medcalc_bench", _adapter(rs.get_medcalc_bench_spec), medcalc),
    "medec": Case("medec", _adapter(rs.get_medec_run_spec), medec,
                  golden=lambda i: i.references[0].output.text != "CORRECT"),
    "ehrsql": Case("ehr_sql", _adapter(rs.get_ehr_sql_run_spec), ehrsql,
                   golden=lambda i: not (i.extra_data or {}).get("is_impossible")),
    "medhallu": Case("medhallu", _adapter(rs.get_medhallu_spec), medhallu,
                     golden=lambda i: i.references[0].output.text == "1"),
    "medqa": Case("medhelm_med_qa", _adapter(rs.get_medhelm_med_qa_spec), medqa),
    "medmcqa": Case("medhelm_med_mcqa", _adapter(rs.get_medhelm_med_mcqa_spec), medmcqa),
    "head_qa": Case("head_qa", _adapter(rs.get_head_qa_run_spec), head_qa),
    "medbullets": Case("medbullets", _adapter(rs.get_medbullets_run_spec), medbullets),
    "race_bias": Case("race_based_med", _adapter(rs.get_race_based_med_spec), race_bias),
    "medication_qa": Case("medication_qa", _adapter(rs.get_medication_qa_spec), medication_qa,
                          "medication_qa_annotator:MedicationQAAnnotator"),
    "mediqa_qa": Case("medi_qa", _adapter(rs.get_medi_qa_spec), mediqa_qa, "medi_qa_annotator:MediQAAnnotator"),
    "med_dialog": Case("med_dialog", _adapter(rs.get_med_dialog_spec, subset="healthcaremagic"), med_dialog,
                       "med_dialog_annotator:MedDialogAnnotator"),
    "aci_bench": Case("aci_bench", _adapter(rs.get_aci_bench_run_spec), aci_bench,
                      "aci_bench_annotator:ACIBenchAnnotator"),
    "mtsamples": Case("mtsamples_replicate", _adapter(rs.get_mtsamples_spec), mtsamples,
                      "mtsamples_replicate_annotator:MTSamplesReplicateAnnotator", every_item=True),
    "mtsamples_procedures": Case("mtsamples_procedures", _adapter(rs.get_mtsamples_procedures_spec),
                                 mtsamples_procedures, "mtsamples_procedures_annotator:MTSamplesProceduresAnnotator",
                                 every_item=True),
}


def request_state(adapter_spec: AdapterSpec, instance: Instance) -> Any:
    """The RequestState HELM's own adapter builds for ``instance`` (before execution)."""
    adapter_cls = (MultipleChoiceJointAdapter if adapter_spec.method == ADAPT_MULTIPLE_CHOICE_JOINT
                   else GenerationAdapter)
    adapter = adapter_cls.__new__(adapter_cls)  # no tokenizer service: truncation is model-specific, skipped
    adapter.adapter_spec = adapter_spec
    adapter._make_prompt_fit = lambda prompt: prompt
    assert isinstance(adapter, InContextLearningAdapter)
    (state,) = adapter.generate_requests(instance, train_trial_index=0, training_instances=[])
    return state


def render(adapter_spec: AdapterSpec, instance: Instance) -> dict[str, Any]:
    state = request_state(adapter_spec, instance)
    request = state.request
    return {"method": adapter_spec.method, "prompt": request.prompt, "max_tokens": request.max_tokens,
            "temperature": request.temperature, "stop_sequences": list(request.stop_sequences),
            "num_completions": request.num_completions, "output_mapping": state.output_mapping}


def judge_prompt(annotator: str, instance: Instance) -> dict[str, Any]:
    """HELM's own LLMAsJuryAnnotator._interpolate_prompt on a request state carrying JUDGE_RESPONSE."""
    import importlib
    from types import SimpleNamespace

    module_name, class_name = annotator.split(":")
    module = importlib.import_module(f"helm.benchmark.annotation.{module_name}")
    annotator_cls = getattr(module, class_name)
    judge = annotator_cls.__new__(annotator_cls)  # no model clients: only the prompt is rendered
    judge._prompt_template = module.PROMPT_TEMPLATE
    state = SimpleNamespace(instance=instance,
                            result=SimpleNamespace(completions=[SimpleNamespace(text=JUDGE_RESPONSE)]))
    criteria = {k: sorted(v) for k, v in module.ANNOTATION_CRITERIA.items()}
    # model_as_judge.py _annotate_with_model: Request(prompt=prompt, temperature=0.0, max_tokens=4096)
    return {"annotator": f"{annotator_cls.__module__}.{class_name}", "prompt": judge._interpolate_prompt(state),
            "criteria": criteria, "temperature": 0.0, "max_tokens": 4096}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent.parent / "shared" / "data" / "public")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--all-items", type=Path, metavar="JSONL",
                        help="instead of the golden files, write HELM's prompt for every item of every benchmark "
                             "(one JSON line each: benchmark, instance_id, prompt) to check parity on whole files")
    args = parser.parse_args()
    if args.all_items:
        with args.all_items.open("w", encoding="utf-8") as out:
            for benchmark, case in CASES.items():
                if args.only and benchmark not in args.only:
                    continue
                adapter_spec = case.adapter()
                for _, instance_id, instance in case.items(args.data):
                    row = {"benchmark": benchmark, "instance_id": instance_id,
                           "prompt": render(adapter_spec, instance)["prompt"]}
                    if case.annotator:
                        row["judge"] = judge_prompt(case.annotator, instance)["prompt"]
                    out.write(json.dumps(row) + "\n")
        return
    OUT.mkdir(parents=True, exist_ok=True)
    for benchmark, case in CASES.items():
        if args.only and benchmark not in args.only:
            continue
        source, instance_id, instance = next(item for item in case.items(args.data) if case.golden(item[2]))
        golden: dict[str, Any] = {"benchmark": benchmark, "helm_version": metadata.version("crfm-helm"),
                                  "helm_run_spec": case.run_spec, "source": source, "instance_id": instance_id,
                                  "instance_input": instance.input.text, **render(case.adapter(), instance)}
        if case.annotator:
            golden["judge"] = judge_prompt(case.annotator, instance)
        if case.every_item:  # every item HELM keeps, with its gold: the reports it drops are the others
            adapter_spec = case.adapter()
            golden["items"] = [
                {"source": item_source, "instance_id": item_id, "instance_input": item.input.text,
                 "reference": item.references[0].output.text, "prompt": render(adapter_spec, item)["prompt"],
                 **({"judge_prompt": judge_prompt(case.annotator, item)["prompt"]} if case.annotator else {})}
                for item_source, item_id, item in case.items(args.data)]
        (OUT / f"{benchmark}.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n",
                                               encoding="utf-8")
        print(f"{benchmark}: {len(golden['prompt'])} chars, max_tokens {golden['max_tokens']}")


if __name__ == "__main__":
    main()
