"""Scoring as one abstraction: specs list metrics (one main; the older single ``metric:`` still loads), the
registry is the one list of metrics, a scorer may be async and emit several values, and a spec whose loader
options do not give what its scorers need is refused before any inference."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from medhelm_local.benchmarks.registry import SHIPPED, load_custom_spec, shipped_spec, shipped_specs
from medhelm_local.benchmarks.spec import BenchmarkSpec, MetricChoice
from medhelm_local.errors import BadInputError
from medhelm_local.prompts.styles import manifest_specs, spec_changes
from medhelm_local.records import Instance, InstanceScore
from medhelm_local.scoring import registry
from medhelm_local.scoring.checks import ScorerInputMismatch, check_spec, provided_fields
from medhelm_local.scoring.details import ScoreDetails
from medhelm_local.scoring.engine import score_outputs
from medhelm_local.scoring.jury import JuryDetails, likert_unit
from medhelm_local.scoring.registry import known_metrics, register_scorer, scorer_for
from medhelm_local.scoring.scorer import Item, Metric, Scorer, ScoringContext
from medhelm_local.scoring.summary import summarise
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.conftest import Cli

SAMPLES = Path(str(resources.files("medhelm_local.data") / "samples"))


def _sample_spec(**changes: Any) -> dict[str, Any]:
    data = yaml.safe_load((SAMPLES / "followup_needed.yaml").read_text(encoding="utf-8"))
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


# -- metrics: in a spec ------------------------------------------------------------------------------------------


def test_a_custom_spec_with_the_older_single_metric_field_still_loads(tmp_path: Path) -> None:
    spec = load_custom_spec(_write(tmp_path / "f.yaml", _sample_spec(metric="exact_match")))
    assert spec.metrics == [MetricChoice(name="exact_match", main=True)] and spec.metric == "exact_match"
    jury = BenchmarkSpec.model_validate({**shipped_spec("medication_qa").model_dump(exclude={"metrics"}),
                                         "metric": "jury"})
    # what the older field meant: the jury always came with ROUGE-L
    assert jury.metric_names == ["jury", "rouge_l"] and jury.metrics == shipped_spec("medication_qa").metrics


def test_metrics_list_with_one_main(tmp_path: Path) -> None:
    spec = load_custom_spec(_write(tmp_path / "f.yaml", _sample_spec(
        metric=None, metrics=["micro_f1", {"name": "exact_match", "main": True}])))
    assert spec.metric == "exact_match" and spec.metric_names == ["exact_match", "micro_f1"]
    assert load_custom_spec(_write(tmp_path / "g.yaml", _sample_spec(metric=None, metrics=["exact_match"]))
                            ).metric == "exact_match"  # a single metric is the main one


@pytest.mark.parametrize(("metrics", "message"), [
    (["exact_match", "micro_f1"], "exactly one metric main"),
    ([{"name": "exact_match", "main": True}, {"name": "micro_f1", "main": True}], "exactly one metric main"),
    (["exact_match", "exact_match"], "lists a metric twice"),
    ([], "field metrics"),
    ([{"name": "exact_match", "main": True}, "bleu"], r"field metrics must be one of .* \(not 'bleu'\)"),
])
def test_bad_metrics_lists_name_the_field(tmp_path: Path, metrics: list[Any], message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        load_custom_spec(_write(tmp_path / "f.yaml", _sample_spec(metric=None, metrics=metrics)))


def test_metric_and_metrics_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="not both"):
        load_custom_spec(_write(tmp_path / "f.yaml", _sample_spec(metrics=["exact_match"])))


def test_the_registry_is_the_one_list_of_metrics() -> None:
    assert known_metrics() == ["billing_micro_f1", "ehrsql_execution_accuracy", "exact_match", "jury",
                               "medcalc_accuracy", "medec_flag_accuracy", "micro_f1", "rouge_l"]
    for spec in shipped_specs():
        assert set(spec.metric_names) <= set(known_metrics()), spec.id
        check_spec(spec)
        if "jury" in spec.metric_names:  # ROUGE-L beside it where there is a gold response (not NoteExtract)
            assert spec.judge is not None
            assert spec.metric_names == (["jury", "rouge_l"] if spec.judge.uses_gold else ["jury"]), spec.id


def test_a_run_created_with_the_older_metric_field_is_not_a_changed_spec() -> None:
    spec = shipped_spec("medication_qa")
    old = manifest_specs({spec.id: spec})
    snapshot = old["specs"][spec.id]
    snapshot.pop("metrics")
    snapshot["metric"] = "jury"  # what runs created before metrics: froze
    assert spec_changes(spec.id, old, SHIPPED) == []
    snapshot["metric"] = "exact_match"
    assert spec_changes(spec.id, old, SHIPPED) == ["metrics"]


# -- the scorer abstraction -----------------------------------------------------------------------------------


class _LengthScorer(Scorer):
    """A test scorer of two values, async: the share of words that are 'yes' and whether the output is short."""

    name = "length_test"
    metrics = (Metric("yes_share"), Metric("short"))

    async def score(self, spec: BenchmarkSpec, items: Sequence[Item], context: ScoringContext,
                    roles: Mapping[str, bool]) -> list[InstanceScore]:
        rows = []
        for item in items:
            if item.output is None:
                continue
            words = item.output.split()
            values = {"yes_share": sum(w == "yes" for w in words) / len(words), "short": float(len(words) < 3)}
            rows += [InstanceScore(benchmark=spec.id, instance_id=item.instance.id, metric=name, value=value,
                                   details=ScoreDetails(sub={"words": float(len(words))}).stored())
                     for name, value in values.items() if name in roles]
        return rows


@pytest.fixture
def length_scorer() -> Iterator[Scorer]:
    scorer = register_scorer(_LengthScorer())
    yield scorer
    registry._SCORERS.pop(scorer.name)
    for metric in scorer.metrics:
        registry._BY_METRIC.pop(metric.name)


def test_a_scorer_emits_several_named_values(length_scorer: Scorer) -> None:
    spec = shipped_spec("pubmedqa").model_copy(update={"metrics": [
        MetricChoice(name="yes_share", main=True), MetricChoice(name="short"), MetricChoice(name="exact_match")]})
    a = Instance(benchmark="pubmedqa", id="a", fields={}, references=["yes"], label="yes")
    b = Instance(benchmark="pubmedqa", id="b", fields={}, references=["no"], label="no")
    scores = score_outputs(spec, [(a, "yes", None), (b, "yes no maybe no", None)])
    assert [(s.instance_id, s.metric, s.value) for s in scores] == [
        ("a", "yes_share", 1.0), ("a", "short", 1.0), ("a", "exact_match", 1.0),
        ("b", "yes_share", 0.25), ("b", "short", 0.0), ("b", "exact_match", 0.0)]
    breakdown = summarise("pubmedqa", spec.metric, scores)
    assert breakdown.score == pytest.approx(0.625) and breakdown.n == 2
    assert breakdown.secondary == {"exact_match": {"score": 0.5, "n": 2}, "short": {"score": 0.5, "n": 2},
                                   "words": {"score": 2.5, "n": 2}}


def test_details_are_typed_and_stored_as_set() -> None:
    spec = shipped_spec("pubmedqa")
    instance = Instance(benchmark="pubmedqa", id="a", fields={}, references=["yes"], label="yes")
    (row,) = score_outputs(spec, [(instance, "yes", None)])
    assert row.details == {"parsed": True, "strict_format": True}
    with pytest.raises(ValueError, match="extra"):
        ScoreDetails.model_validate({"parsed": True, "explanation": "free text"})


def test_the_likert_normalisation_is_the_jurys_for_score_and_criteria() -> None:
    details = JuryDetails(mean_rating=4.0, criteria={"accuracy": 5.0, "clarity": 2.0}, parsed=True)
    scorer = scorer_for("jury")
    assert scorer is not None and scorer.calls_models
    assert scorer.secondary(details) == {"criterion:accuracy": 1.0, "criterion:clarity": 0.25}
    assert likert_unit(1) == 0.0 and likert_unit(5) == 1.0 and likert_unit(4.0) == 0.75
    rows = [InstanceScore(benchmark="b", instance_id="i", metric="jury", value=likert_unit(4.0),
                          details=details.stored())]
    assert summarise("b", "jury", rows).secondary == {"criterion:accuracy": {"score": 1.0, "n": 1},
                                                      "criterion:clarity": {"score": 0.25, "n": 1}}


# -- a spec checked against its scorers before any inference ------------------------------------------------


def test_loader_options_give_the_fields_the_scorers_need(tmp_path: Path) -> None:
    medcalc_fields, ehrsql_fields = (provided_fields(shipped_spec(b)) for b in ("medcalc_bench", "ehrsql"))
    assert medcalc_fields is not None and ehrsql_fields is not None
    assert medcalc_fields >= {"references", "meta.category", "meta.lower_limit"}
    assert ehrsql_fields >= {"meta.db_path"}  # from sibling_files
    pubmedqa = shipped_spec("pubmedqa")
    assert provided_fields(pubmedqa) == {"label", "references"}  # a native-format loader: the fields it declares
    asks_more = pubmedqa.model_copy(update={"metrics": [MetricChoice(name="medcalc_accuracy", main=True)]})
    with pytest.raises(ScorerInputMismatch, match=r"field metrics: metric medcalc_accuracy needs meta 'category'.*"
                       r"but the pubmedqa_json loader gives none \(it gives: label, references\)"):
        check_spec(asks_more, task=False)
    medcalc = shipped_spec("medcalc_bench")
    options = dict(medcalc.loader_options)
    options["meta"] = {k: v for k, v in options["meta"].items() if k != "upper_limit"}
    with pytest.raises(ScorerInputMismatch, match="metric medcalc_accuracy needs meta 'upper_limit'"):
        check_spec(medcalc.model_copy(update={"loader_options": options}))


def _unlabelled(tmp_path: Path) -> dict[str, Any]:
    data = _sample_spec(id="followup_unlabelled")
    data["loader_options"] = {k: v for k, v in data["loader_options"].items() if k != "label_column"}
    return data


def test_registration_refuses_a_spec_whose_loader_gives_no_gold(home_cli: Cli, tmp_path: Path) -> None:
    spec = _write(tmp_path / "followup_unlabelled.yaml", _unlabelled(tmp_path))
    result = home_cli("datasets", "register", "followup_unlabelled", str(SAMPLES / "followup_needed.csv"),
                      "--spec", str(spec))
    assert result.code == 2
    assert "metric exact_match needs a label" in result.stderr and "followup_unlabelled.yaml" in result.stderr
    assert not (home_cli.home / "benchmarks" / "followup_unlabelled.yaml").exists()


def test_a_stored_spec_whose_loader_gives_no_gold_is_refused_before_any_inference(home_cli: Cli,
                                                                                 tmp_path: Path) -> None:
    # A spec stored by an earlier version, which did not check this at registration: before this check, the run
    # sent every request and then failed in scoring ("an instance has neither a label nor a reference").
    folder = home_cli.home / "benchmarks"
    folder.mkdir(exist_ok=True)
    _write(folder / "followup_unlabelled.yaml", {**_unlabelled(tmp_path), "category": None})
    registered = home_cli("datasets", "register", "followup_unlabelled", str(SAMPLES / "followup_needed.csv"))
    assert registered.code == 0, registered.stderr
    with FakeOpenAIServer(responder=lambda _m: "A") as server:
        assert home_cli("models", "add", "always-a", "--base-url", server.base_url).code == 0
        result = home_cli("run", "--model", "always-a", "--benchmarks", "followup_unlabelled", "--json")
        assert result.code == 2, result.stderr
        assert "metric exact_match needs a label" in result.stderr
        assert server.requests_seen == 0


def test_stored_details_read_back_typed_and_unknown_keys_are_left_out() -> None:
    from medhelm_local.scoring.ehrsql import EhrsqlDetails
    from medhelm_local.scoring.registry import read_details

    details = read_details("ehrsql_execution_accuracy", {"parsed": True, "sql_error": "timeout", "gold_empty": False,
                                                         "sub": {"valid_sql": 0}, "from_another_version": 1})
    assert isinstance(details, EhrsqlDetails) and details.sql_error == "timeout" and details.sub == {"valid_sql": 0.0}
    jury = read_details("jury", {"criteria": {"accuracy": 4}, "judges": 3})
    assert isinstance(jury, JuryDetails) and jury.criteria == {"accuracy": 4.0}
    assert read_details("no_such_metric", {"parsed": False}).parsed is False


def test_reading_stored_details_asks_the_model_for_its_fields_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's aggregate reads every stored score's details: the model's field names are looked up once, not once
    per key of every row (pydantic's ``model_fields`` is a property; 3-4 ms per 3,320 rows)."""
    from medhelm_local.scoring.ehrsql import EhrsqlDetails
    from medhelm_local.scoring.registry import read_details

    fields = dict(EhrsqlDetails.model_fields)
    lookups: list[type] = []

    class CountingFields:
        def __get__(self, instance: object, owner: type) -> dict[str, Any]:
            lookups.append(owner)
            return fields

    monkeypatch.setattr(EhrsqlDetails, "model_fields", CountingFields())
    for index in range(200):
        details = read_details("ehrsql_execution_accuracy",
                               {"parsed": True, "sql_error": None, "gold_empty": index % 2 == 0, "sub": {}})
        assert isinstance(details, EhrsqlDetails) and details.gold_empty is (index % 2 == 0)
    unknown = read_details("ehrsql_execution_accuracy", {"parsed": False, "from_another_version": 1})
    assert unknown.parsed is False and "from_another_version" not in unknown.model_dump()
    assert len(lookups) <= 1


# -- a metric paired with a task it cannot score ------------------------------------------------------------------

RUBRIC = {"criteria": [{"name": "accuracy", "description": "Is the answer right?"}],
          "template": "Question: {question}\nAnswer: {response}\nGold: {gold_response}\n{criteria}"}


@pytest.mark.parametrize(("changes", "field", "message"), [
    # the jury rates a written answer; a closed multiple-choice task's answer is a letter. The metric is named under
    # the field the spec lists it in (was "field output_type", a field the author had right), with the metrics that
    # suit the task.
    ({"metric": None, "metrics": [{"name": "jury", "main": True}, "rouge_l"], "judge": RUBRIC}, "metrics",
     "metric jury needs free_text answers, but this task's output_type is choice_letter; choose a metric for "
     "choice_letter answers (exact_match, micro_f1), or correct output_type if the answers are free_text"),
    ({"metric": None, "metrics": [{"name": "rouge_l", "main": True}]}, "metrics",
     "metric rouge_l needs free_text answers, but this task's output_type is choice_letter; choose a metric for "
     "choice_letter answers (exact_match, micro_f1)"),
    # the older single field is named as written
    ({"metric": "medcalc_accuracy", "output_type": "free_text", "labels": None, "label_map": None}, "metric",
     "metric medcalc_accuracy needs number_or_date answers, but this task's output_type is free_text"),
    # exact match reads the chosen letter by the answer labels: without them it compares the whole reply
    ({"labels": None, "label_map": None}, "labels",
     "metric exact_match on choice_letter answers needs the answer labels"),
    ({"output_type": "yes_no_maybe", "labels": None, "label_map": None}, "labels",
     "metric exact_match on yes_no_maybe answers needs the answer labels"),
])
def test_a_metric_paired_with_a_task_it_cannot_score_is_refused_at_registration(
        home_cli: Cli, tmp_path: Path, changes: dict[str, Any], field: str, message: str) -> None:
    """A jury on a closed multiple-choice task, ROUGE-L on a letter, a calculator's accuracy on prose, exact match on
    a choice task without its labels: `benchmarks add` took them, and the run then sent every request and scored
    nonsense. Refused now at registration, naming the file, the field, the metric and what it needs (exit 2)."""
    spec = _write(tmp_path / "followup_unsuitable.yaml", _sample_spec(id="followup_unsuitable", **changes))
    result = home_cli("benchmarks", "add", str(spec))
    assert result.code == 2, result.stdout
    error = " ".join(result.stderr.split())
    assert str(spec) in error and f"field {field}:" in error and message in error, error
    assert not (home_cli.home / "benchmarks" / "followup_unsuitable.yaml").exists()


def test_a_stored_spec_pairing_the_jury_with_a_multiple_choice_task_is_refused_before_any_inference(
        home_cli: Cli, tmp_path: Path) -> None:
    """Stored by an earlier version, which took it: the home still lists it, and a run is refused (exit 2) before a
    single request, rather than asking every judge to rate a letter."""
    folder = home_cli.home / "benchmarks"
    folder.mkdir(exist_ok=True)
    data = _sample_spec(id="followup_jury", metric=None, metrics=[{"name": "jury", "main": True}, "rouge_l"],
                        judge=RUBRIC)
    _write(folder / "followup_jury.yaml", {**data, "category": None})
    listed = home_cli("benchmarks", "list", "--json")
    assert listed.code == 0 and "followup_jury" in {b["id"] for b in listed.json()}, listed.stderr
    assert home_cli("datasets", "register", "followup_jury", str(SAMPLES / "followup_needed.csv")).code == 0
    with FakeOpenAIServer(responder=lambda _m: "A") as server:
        assert home_cli("models", "add", "always-a", "--base-url", server.base_url).code == 0
        result = home_cli("run", "--model", "always-a", "--benchmarks", "followup_jury", "--json")
        assert result.code == 2, result.stderr
        assert "field metrics: metric jury needs free_text answers" in " ".join(result.stderr.split())
        assert server.requests_seen == 0


def test_a_jury_comparing_with_a_gold_answer_needs_one(home_cli: Cli, tmp_path: Path) -> None:
    """The rubric shows the judges {gold_response}, but the loader options map no reference column and no
    judge_gold: every judge would have compared the answer with "no reference". uses_gold: false, or a reference
    column, is accepted."""
    open_ended = {"id": "followup_open", "metric": None, "metrics": [{"name": "jury", "main": True}, "rouge_l"],
                  "judge": RUBRIC, "output_type": "free_text", "labels": None, "label_map": None}
    data = _sample_spec(**open_ended)
    data["loader_options"] = {k: v for k, v in data["loader_options"].items() if k != "label_column"}
    result = home_cli("benchmarks", "add", str(_write(tmp_path / "followup_open.yaml", data)))
    assert result.code == 2 and "metric jury needs references" in " ".join(result.stderr.split()), result.stderr
    no_gold = {**data, "judge": {**RUBRIC, "uses_gold": False}, "metrics": [{"name": "jury", "main": True}]}
    assert home_cli("benchmarks", "add", str(_write(tmp_path / "followup_open.yaml", no_gold))).code == 0
    with_gold = {**data, "loader_options": {**data["loader_options"], "reference_columns": ["followup"]}}
    assert home_cli("benchmarks", "add", str(_write(tmp_path / "followup_open.yaml", with_gold))).code == 0


def test_rouge_l_without_references_is_refused_before_it_reports_nothing(home_cli: Cli, tmp_path: Path) -> None:
    """ROUGE-L compares the answer with the references: listed for a benchmark whose loader gives none (as the
    shipped note_extract did), it was accepted and never reported. A spec written with the older `metric: jury`
    (jury and rouge_l) is told how to ask for the jury alone."""
    open_ended = {"id": "followup_open", "metric": None, "output_type": "free_text", "labels": None,
                  "label_map": None, "judge": {**RUBRIC, "uses_gold": False},
                  "metrics": [{"name": "jury", "main": True}, "rouge_l"]}
    data = _sample_spec(**open_ended)
    data["loader_options"] = {k: v for k, v in data["loader_options"].items() if k != "label_column"}
    result = home_cli("benchmarks", "add", str(_write(tmp_path / "followup_open.yaml", data)))
    message = " ".join(result.stderr.split())
    assert result.code == 2 and "field loader_options: metric rouge_l needs references" in message, message
    legacy = {k: v for k, v in data.items() if k != "metrics"} | {"metric": "jury"}
    result = home_cli("benchmarks", "add", str(_write(tmp_path / "followup_open.yaml", legacy)))
    message = " ".join(result.stderr.split())
    assert result.code == 2 and "metric rouge_l needs references" in message, message
    assert "write `metrics: [{name: jury, main: true}]` for the jury alone" in message
    referenced = {**data, "loader_options": {**data["loader_options"], "reference_columns": ["followup"]}}
    assert home_cli("benchmarks", "add", str(_write(tmp_path / "followup_open.yaml", referenced))).code == 0


def test_every_shipped_spec_pairs_its_metrics_with_tasks_they_score() -> None:
    assert len(shipped_specs()) >= 35
    for spec in shipped_specs():
        check_spec(spec)  # output type, spec fields and (table loaders) instance fields
