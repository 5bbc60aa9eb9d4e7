"""MTSamples and MTSamples-Procedures in ``--prompt-style medhelm``, report by report on the 40 shared reports.

HELM 0.5.16's own scenario code (``get_instances``, run unmodified by ``tools/helm_golden.py`` on each report of
``shared/data/public/mtsamples_sample``; the scenarios download from GitHub, the tool hands them the local copy)
decided which reports HELM keeps, its input and its reference; HELM's adapter and annotator rendered the prompt
and the judge prompt (``golden/helm/<benchmark>.json``, ``items``). This appliance's loader and parity templates
must give the same, for every report HELM keeps, and a parity run plans exactly those reports.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from medhelm_local.benchmarks.registry import SHIPPED, shipped_spec
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.loaders import load_dataset
from medhelm_local.loaders.mtsamples import helm_input, helm_reference, helm_text
from medhelm_local.prompts.build import build_request
from medhelm_local.prompts.styles import DEFAULT_STYLE, MEDHELM_STYLE, styled_spec
from medhelm_local.records import Instance
from medhelm_local.runner.plan import compute_plan, plan_items
from medhelm_local.scoring.jury import judge_prompt
from medhelm_local.store import Store
from tests.parity.helm_cases import helm_goldens
from tests.runner.helpers import make_home

GOLDENS = {g["benchmark"]: g for g in helm_goldens() if g["benchmark"].startswith("mtsamples")}
FOLDERS = {"mtsamples": "mtsamples_processed", "mtsamples_procedures": "mtsample_procedure"}
JUDGE_RESPONSE = "<<model response>>"  # what tools/helm_golden.py rendered HELM's judge prompt with
BENCHMARKS = sorted(FOLDERS)


def parity_spec(benchmark: str) -> BenchmarkSpec:
    return styled_spec(shipped_spec(benchmark), MEDHELM_STYLE)


def loaded(public_data: Path, benchmark: str) -> dict[str, Instance]:
    folder = public_data / "mtsamples_sample" / FOLDERS[benchmark]
    return {i.id: i for i in load_dataset(shipped_spec(benchmark), folder).instances}


@pytest.mark.parametrize(("benchmark", "reports", "helm_kept"), [
    ("mtsamples", 25, 7),
    ("mtsamples_procedures", 15, 4),
])
def test_the_loader_marks_exactly_the_reports_helms_scenario_keeps(public_data: Path, benchmark: str, reports: int,
                                                                   helm_kept: int) -> None:
    golden = GOLDENS[benchmark]
    assert len(list((public_data / "mtsamples_sample" / FOLDERS[benchmark]).glob("*.txt"))) == reports
    helm_ids = {item["instance_id"] for item in golden["items"]}
    assert len(helm_ids) == helm_kept
    instances = loaded(public_data, benchmark)
    assert {i for i, inst in instances.items() if inst.meta["medhelm_kept"]} == helm_ids
    assert helm_ids <= set(instances)  # the default style keeps at least HELM's reports


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_every_report_helm_keeps_gets_helms_prompt_and_judge_prompt_byte_for_byte(public_data: Path,
                                                                                  benchmark: str) -> None:
    instances = loaded(public_data, benchmark)
    spec = parity_spec(benchmark)
    for item in GOLDENS[benchmark]["items"]:
        instance = instances[item["instance_id"]]
        assert instance.fields["report_medhelm"] == item["instance_input"], item["instance_id"]
        assert instance.fields["reference_medhelm"] == item["reference"], item["instance_id"]
        request = build_request(spec, instance)
        assert [(m.role, m.content) for m in request.messages] == [("user", item["prompt"])], item["instance_id"]
        assert request.max_tokens == GOLDENS[benchmark]["max_tokens"] == 512
        assert judge_prompt(spec, instance, JUDGE_RESPONSE) == item["judge_prompt"], item["instance_id"]


def test_helms_input_keeps_the_reference_where_a_report_has_no_plan(public_data: Path) -> None:
    """HELM's MTSamples scenario removes only PLAN from its input: a FINDINGS reference stays in the prompt (and
    the gold runs to the end of its line). Parity reproduces it; the default style never shows the reference."""
    instance = loaded(public_data, "mtsamples")["Arthroscopy - Shoulder"]
    assert instance.meta["section"] == "FINDINGS" and instance.meta["medhelm_kept"] is True
    assert instance.fields["reference_medhelm"] in instance.fields["report_medhelm"]
    assert instance.references[0] not in instance.fields["context"]
    assert instance.fields["reference_medhelm"].startswith(instance.references[0])


def test_procedures_input_stops_at_the_first_of_plan_summary_findings(public_data: Path) -> None:
    instance = loaded(public_data, "mtsamples_procedures")["Arthroscopy, Meniscoplasty, & Chondroplasty"]
    report = instance.fields["report_medhelm"]
    assert report.endswith("however.GROSS OPERATIVE")  # HELM cuts inside the heading "GROSS OPERATIVE FINDINGS:"
    assert "FINDINGS:" not in report and "PLAN:" not in report and "SUMMARY:" not in report


@pytest.mark.parametrize(("text", "reference"), [
    ("HPI: x.\nPLAN: Rest.ALLERGIES: None.\nKeywords: a", "Rest.ALLERGIES: None."),  # the rest of the line
    ("HPI: x.\nPLAN:\n1. Rest.", None),  # an empty PLAN line and no SUMMARY/FINDINGS: HELM drops the report
    ("HPI: x.\nPLAN:\n1. Rest.\nSUMMARY: Stable.", "Stable."),
    ("HPI: x.\nPlan: rest.\nSUMMARY: Stable.", None),  # "PLAN:" only upper-cased: IndexError, report dropped
    ("HPI: x.\nPLAN: Rest.\nSummary: fine.", None),  # even beside a found PLAN: the SUMMARY split fails
    ("HPI: x.\nASSESSMENT AND PLAN: Rest.", "Rest."),
    ("HPI: x.", None),
])
def test_helms_reference_rule(text: str, reference: str | None) -> None:
    assert helm_reference(text) == reference


def test_helms_input_rule_and_text() -> None:
    text = "A.\nSUMMARY: s.\nFINDINGS: f.\nPLAN: p."
    assert helm_input(text, ["PLAN:"]) == "A.\nSUMMARY: s.\nFINDINGS: f."
    assert helm_input(text, ["PLAN:", "SUMMARY:", "FINDINGS:"]) == "A."
    # HELM reads the file in text mode (universal newlines, a byte-order mark kept) and strips it
    assert helm_text(b"\xef\xbb\xbfA\r\nB\r \n", "A\r\nB\r \n") == "\ufeffA\nB"


def test_a_report_helm_keeps_is_kept_even_when_its_heading_is_glued_to_a_word(tmp_path: Path) -> None:
    (tmp_path / "glued.txt").write_text("HISTORY: Cough.\nTREATMENTPLAN: Rest and fluids.\nKeywords: cough\n")
    (instance,) = load_dataset(shipped_spec("mtsamples"), tmp_path).instances
    assert instance.references == ["Rest and fluids."] and instance.meta["medhelm_kept"] is True
    assert instance.fields["context"] == "HISTORY: Cough.\nTREATMENT"  # the Keywords line left out, as always
    assert instance.fields["report_medhelm"] == "HISTORY: Cough.\nTREATMENT"


def sample_with_a_report_helm_drops(public_data: Path, tmp_path: Path) -> Path:
    """The 7 real reports HELM keeps, and one of them with its PLAN moved to the next line (HELM's reference is the
    rest of the heading's line: empty, so HELM drops it; this loader keeps it)."""
    folder = tmp_path / "mtsamples"
    folder.mkdir()
    for item in GOLDENS["mtsamples"]["items"]:
        shutil.copyfile(public_data / item["source"], folder / Path(item["source"]).name)
    text = (public_data / "mtsamples_sample" / "mtsamples_processed" / "Gen Med Consult - 5.txt").read_text()
    assert text.count("PLAN: ") == 1
    (folder / "Gen Med Consult - 5 (plan on its own line).txt").write_text(text.replace("PLAN: ", "PLAN:\n"))
    return folder


def test_a_parity_run_plans_only_the_reports_helm_keeps(public_data: Path, tmp_path: Path) -> None:
    folder = sample_with_a_report_helm_drops(public_data, tmp_path)
    result = load_dataset(shipped_spec("mtsamples"), folder)
    assert len(result.instances) == 8
    dropped = {i.id for i in result.instances if not i.meta["medhelm_kept"]}
    assert dropped == {"Gen Med Consult - 5 (plan on its own line)"}
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    with Store.open(home) as store:
        store.register_dataset("mtsamples", "sha", "mtsamples_txt", str(folder), result.instances, {})
        default = compute_plan(store, SHIPPED, "fake", ["mtsamples"], max_instances=None, seed=0)
        parity = compute_plan(store, SHIPPED, "fake", ["mtsamples"], max_instances=None, seed=0,
                              prompt_style=MEDHELM_STYLE)
        sampled = compute_plan(store, SHIPPED, "fake", ["mtsamples"], max_instances=3, seed=0,
                               prompt_style=MEDHELM_STYLE)
        planned = {name: {i.instance_id for chunk in plan_items(store, plan) for i in chunk}
                   for name, plan in (("default", default), ("parity", parity), ("sampled", sampled))}
    assert default.prompt_style == DEFAULT_STYLE and len(planned["default"]) == 8
    assert planned["parity"] == {item["instance_id"] for item in GOLDENS["mtsamples"]["items"]}
    assert parity.datasets["mtsamples"]["planned"] == parity.datasets["mtsamples"]["style_instances"] == 7
    assert parity.datasets["mtsamples"]["instances"] == 8 and "style_instances" not in default.datasets["mtsamples"]
    assert len(planned["sampled"]) == 3 and planned["sampled"] <= planned["parity"]
    assert sampled.datasets["mtsamples"]["planned"] == 3


def test_a_parity_run_of_reports_helm_keeps_none_of_is_refused(public_data: Path, tmp_path: Path) -> None:
    from medhelm_local.errors import BadInputError

    folder = sample_with_a_report_helm_drops(public_data, tmp_path)
    result = load_dataset(shipped_spec("mtsamples"), folder)
    dropped = [i for i in result.instances if not i.meta["medhelm_kept"]]
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    with Store.open(home) as store:
        store.register_dataset("mtsamples", "sha", "mtsamples_txt", str(folder), dropped, {})
        assert compute_plan(store, SHIPPED, "fake", ["mtsamples"], max_instances=None, seed=0).datasets["mtsamples"][
            "planned"] == 1
        with pytest.raises(BadInputError) as caught:
            compute_plan(store, SHIPPED, "fake", ["mtsamples"], max_instances=None, seed=0, prompt_style=MEDHELM_STYLE)
    assert caught.value.exit_code == 2 and "medhelm_kept" in str(caught.value)


def test_a_parity_run_through_the_cli_sends_helms_prompts_and_judge_prompts(public_data: Path,
                                                                            tmp_path: Path) -> None:
    from medhelm_local.home.config import ModelEndpoint
    from medhelm_local.testing.fake_openai import FakeOpenAIServer
    from tests.conftest import Cli, cli_env
    from tests.scoring import helpers

    folder = sample_with_a_report_helm_drops(public_data, tmp_path)
    items = GOLDENS["mtsamples"]["items"]

    def respond(messages: list[dict[str, object]]) -> str:
        if "Evaluation Criteria" in str(messages[-1]["content"]):  # a judge prompt
            return '{"accuracy": {"score": 4, "explanation": "x"}, "completeness": {"score": 4, "explanation": "x"}, ' \
                   '"clarity": {"score": 4, "explanation": "x"}}'
        return JUDGE_RESPONSE  # the response HELM's judge prompts were rendered with

    with FakeOpenAIServer(responder=respond, record_bodies=True) as server:
        home = helpers.make_home(tmp_path / "home", {"j1": server.base_url})
        config = home.config.model_copy(deep=True)
        # Models with a context as large as HELM assumes: nothing is cut to fit, so the prompts are HELM's own
        # (a server that reports no context is fitted to 2,048 tokens, and these reports do not fit it).
        config.models = [m.model_copy(update={"context_length": 32_768}) for m in config.models]
        config.models.append(ModelEndpoint(name="candidate", base_urls=[server.base_url], timeout_s=5.0,
                                           context_length=32_768))
        home.save_config(config)
        cli = Cli(home=home.root, env=cli_env())
        registered = cli("datasets", "register", "mtsamples", str(folder), "--json")
        assert registered.code == 0, registered.stderr
        run = cli("run", "--model", "candidate", "--benchmarks", "mtsamples", "--prompt-style", "medhelm", "--json")
        assert run.code == 0, run.stderr
        bodies = list(server.bodies)
    (result,) = run.json()["results"]
    assert result["n"] == 7 and result["score"] == 0.75  # the 7 reports HELM keeps, each rated 4 of 5
    judge_bodies = [b for b in bodies if "Evaluation Criteria" in b["messages"][-1]["content"]]
    model_bodies = [b for b in bodies if b not in judge_bodies]
    assert sorted((b["messages"] for b in model_bodies), key=str) == sorted(
        ([{"role": "user", "content": i["prompt"]}] for i in items), key=str)
    assert sorted(b["messages"][-1]["content"] for b in judge_bodies) == sorted(i["judge_prompt"] for i in items)
    assert {b["max_tokens"] for b in model_bodies} == {512}


def test_score_on_helms_own_mtsamples_run_matches_the_reports_and_judges_with_helms_prompt(
        public_data: Path, tmp_path: Path) -> None:
    """A run directory written by crfm-helm's own code (tests/scoring/fixtures/helm_runs/mtsamples: HELM's ids
    id0..id6, its cleaned input) is matched to the registered reports by content and judged with HELM's
    annotator prompt, byte for byte."""
    from medhelm_local.testing.fake_openai import FakeOpenAIServer
    from tests.conftest import Cli, cli_env
    from tests.scoring import helpers

    run_dir = Path(__file__).parents[1] / "scoring" / "fixtures" / "helm_runs" / "mtsamples"
    rating = ('{"accuracy": {"score": 4, "explanation": "x"}, "completeness": {"score": 4, "explanation": "x"}, '
              '"clarity": {"score": 4, "explanation": "x"}}')
    with FakeOpenAIServer(responder=lambda _: rating, record_bodies=True) as server:
        home = helpers.make_home(tmp_path / "home", {"j1": server.base_url})
        config = home.config.model_copy(deep=True)  # a judge with room for HELM's whole judge prompts
        config.models = [m.model_copy(update={"context_length": 32_768}) for m in config.models]
        home.save_config(config)
        cli = Cli(home=home.root, env=cli_env())
        folder = public_data / "mtsamples_sample" / FOLDERS["mtsamples"]
        assert cli("datasets", "register", "mtsamples", str(folder)).code == 0
        scored = cli("score", "mtsamples", "--predictions", str(run_dir), "--json")
        assert scored.code == 0, scored.stderr
        judged = sorted(b["messages"][-1]["content"] for b in server.bodies)
    payload = scored.json()
    assert isinstance(payload, dict) and payload["prompt_style"] == "medhelm"
    assert (payload["n"], payload["n_failed"], payload["score"]) == (7, 0, 0.75)
    assert judged == sorted(item["judge_prompt"] for item in GOLDENS["mtsamples"]["items"])
