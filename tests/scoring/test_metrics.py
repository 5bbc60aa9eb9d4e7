"""Hand-made edge cases for every closed-ended metric."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.benchmarks.spec import MetricChoice
from medhelm_local.records import Instance
from medhelm_local.scoring.billing import extract_codes
from medhelm_local.scoring.details import ScoreDetails
from medhelm_local.scoring.ehrsql import extract_sql
from medhelm_local.scoring.engine import score_outputs
from medhelm_local.scoring.metrics import MetricInputError, known_metrics
from medhelm_local.scoring.registry import scorer_for
from medhelm_local.scoring.scorer import InstanceScorer
from medhelm_local.scoring.summary import summarise


def score(benchmark: str, instance: Instance, output: str) -> tuple[float | None, Any]:
    spec = shipped_spec(benchmark)
    scorer = scorer_for(spec.metric)
    assert isinstance(scorer, InstanceScorer)
    value, details = scorer.fn(spec, instance, output)
    assert isinstance(details, ScoreDetails)
    return value, details


def test_every_spec_metric_is_known() -> None:
    from medhelm_local.benchmarks.registry import shipped_specs

    missing = {spec.id: spec.metric for spec in shipped_specs() if spec.metric not in known_metrics()}
    assert missing == {}


# -- exact match ----------------------------------------------------------------------------------------------

def test_exact_match_choice_and_strict_rate() -> None:
    spec = shipped_spec("medqa")
    inst = Instance(benchmark="medqa", id="1", fields={}, references=["B"], label="B")
    outputs = ["B", "The answer is (B).", "C", "I am not sure"]
    scores = score_outputs(spec, [(inst.model_copy(update={"id": str(i)}), o, None) for i, o in enumerate(outputs)])
    assert [s.value for s in scores] == [1.0, 1.0, 0.0, 0.0]
    summary = summarise("medqa", "exact_match", scores)
    assert summary.score == 0.5
    assert summary.parse_rate == 0.75  # "I am not sure" has no answer: wrong, not a failure
    assert summary.strict_format_rate == 0.5  # "B" and "C": the format, right or wrong
    assert summary.n_failed == 0


def test_failed_request_is_not_a_zero() -> None:
    spec = shipped_spec("pubmedqa")
    inst = Instance(benchmark="pubmedqa", id="1", fields={}, references=["yes"], label="yes")
    scores = score_outputs(spec, [(inst, None, "timeout"), (inst.model_copy(update={"id": "2"}), "yes", None)])
    assert scores[0].value is None and scores[0].details == {"error": "timeout"}
    summary = summarise("pubmedqa", "exact_match", scores)
    assert (summary.score, summary.n, summary.n_failed, summary.failures) == (1.0, 1, 1, {"timeout": 1})


# -- micro-F1 -------------------------------------------------------------------------------------------------

def test_micro_f1_is_micro_not_mean_of_instance_f1() -> None:
    spec = shipped_spec("pubmedqa").model_copy(update={"metrics": [MetricChoice(name="micro_f1", main=True)],
                                                  "labels": None})
    a = Instance(benchmark="pubmedqa", id="a", fields={}, references=["x", "y"])
    b = Instance(benchmark="pubmedqa", id="b", fields={}, references=["z"])
    scores = score_outputs(spec, [(a, "x, y", None), (b, "w; v\nu", None)])
    assert [s.value for s in scores] == [1.0, 0.0]
    # micro: tp=2, fp=3, fn=1 -> 4 / (4 + 3 + 1) = 0.5 (the mean of instance F1s would also be 0.5: change it)
    scores = score_outputs(spec, [(a, "x", None), (b, "z, w, v", None)])
    summary = summarise("pubmedqa", "micro_f1", scores)
    # a: tp1 fn1 ; b: tp1 fp2 -> micro = 4 / (4 + 2 + 1) = 4/7 ; mean of instance F1 = (2/3 + 1/2) / 2
    assert summary.score == pytest.approx(4 / 7)


# -- MedCalc-Bench --------------------------------------------------------------------------------------------

def medcalc(category: str, answer: str, lower: Any, upper: Any) -> Instance:
    return Instance(benchmark="medcalc_bench", id="1", fields={}, references=[answer],
                    meta={"category": category, "lower_limit": lower, "upper_limit": upper})


@pytest.mark.parametrize(("instance", "output", "correct"), [
    (medcalc("lab", "25.238", 23.9761, 26.4999), "25.238", True),
    (medcalc("lab", "25.238", 23.9761, 26.4999), "24.0", True),  # within the limits: lab questions do score
    (medcalc("lab", "25.238", 23.9761, 26.4999), "26.4999", True),  # inclusive
    (medcalc("lab", "25.238", 23.9761, 26.4999), "27", False),
    (medcalc("physical", "100", 95.0, 105.0), "The MAP is 97 mm Hg", True),
    (medcalc("dosage", "53.093", 50.43835, 55.74765), "51 mg", True),
    (medcalc("risk", "4", 4.0, 4.0), "4", True),
    (medcalc("risk", "4", 4.0, 4.0), "4.0", True),
    (medcalc("risk", "4", 4.0, 4.0), "5", False),
    (medcalc("risk", "1.5", 1.425, 1.575), "1.45", False),  # risk is exact even when limits are wider
    (medcalc("risk", "-1", -1.0, -1.0), "The Wells score is -1.", True),
    (medcalc("severity", "12", 12.0, 12.0), "GCS 12", True),
    (medcalc("diagnosis", "3", 3.0, 3.0), "three", False),
    (medcalc("date", "09/23/2014", "09/23/2014", "09/23/2014"), "09/23/2014", True),
    (medcalc("date", "09/23/2014", "09/23/2014", "09/23/2014"), "September 23, 2014", True),
    (medcalc("date", "09/23/2014", "09/23/2014", "09/23/2014"), "09/24/2014", False),
    (medcalc("date", "('0 weeks', '6 days')", "('0 weeks', '6 days')", "('0 weeks', '6 days')"),
     "(0 weeks, 6 days)", True),
    (medcalc("date", "('4 weeks', '3 days')", None, None), "4 weeks and 3 days", True),
    (medcalc("date", "('4 weeks', '3 days')", None, None), "(4, 4)", False),
    (medcalc("date", "('1 weeks', '0 days')", None, None), "7 days", True),
])
def test_medcalc_categories(instance: Instance, output: str, correct: bool) -> None:
    value, details = score("medcalc_bench", instance, output)
    assert value == float(correct)
    assert details.group in {"lab", "physical", "dosage", "risk", "severity", "diagnosis", "date",
                                "gestational age"}


def test_medcalc_missing_meta_names_the_key() -> None:
    bad = Instance(benchmark="medcalc_bench", id="1", fields={}, references=["25"], meta={"category": "lab"})
    with pytest.raises(MetricInputError, match="lower_limit"):
        score("medcalc_bench", bad, "25")
    with pytest.raises(MetricInputError, match="unknown calculator category") as caught:
        score("medcalc_bench", medcalc("weird", "1", 1, 1), "1")
    assert "weird" not in str(caught.value)  # data values never go into messages


# -- MEDEC ----------------------------------------------------------------------------------------------------

def medec(flag: int, sentence: int | None = None) -> Instance:
    return Instance(benchmark="medec", id="1", fields={}, label=str(flag),
                    meta={"error_flag": flag, "error_sentence_id": sentence})


@pytest.mark.parametrize(("instance", "output", "flag_ok", "sentence_ok"), [
    (medec(0), "CORRECT", True, True),
    (medec(0), "The text is correct.", True, True),
    (medec(0), "8: The patient was given aspirin.", False, False),
    (medec(1, 8), "8: The patient was given aspirin.", True, True),
    (medec(1, 8), "Sentence 8: corrected text", True, True),
    (medec(1, 8), "<think>sentence 3?</think>8: fixed", True, True),
    (medec(1, 8), "3: fixed", True, False),  # right flag, wrong sentence
    (medec(1, 8), "CORRECT", False, False),
    (medec(1, 8), "The text is incorrect", False, False),  # unreadable: wrong, not credited
    (medec(0), "The note is not correct.", False, False),  # a negated "correct" is not CORRECT
    (medec(0), "This text isn't entirely correct.", False, False),
    (medec(0), "The text is correct, not erroneous.", True, True),
])
def test_medec(instance: Instance, output: str, flag_ok: bool, sentence_ok: bool) -> None:
    value, details = score("medec", instance, output)
    assert value == float(flag_ok)
    assert details.sub["error_sentence_accuracy"] == float(sentence_ok)


# -- EHRSQL ---------------------------------------------------------------------------------------------------

@pytest.fixture
def database(tmp_path: Path) -> str:
    path = tmp_path / "db.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE patient (id INTEGER, age INTEGER, ward TEXT);
        INSERT INTO patient VALUES (1, 70, 'icu'), (2, 45, 'ward'), (3, 82, 'icu');
    """)
    conn.commit()
    conn.close()
    return str(path)


def ehrsql(db: str, gold: str | None) -> Instance:
    return Instance(benchmark="ehrsql", id="1", fields={}, references=[gold] if gold else [],
                    meta={"db_path": db, "is_impossible": gold is None})


def test_ehrsql_execution(database: str) -> None:
    gold = "select id from patient where ward = 'icu'"
    cases = [
        ("SELECT id FROM patient WHERE ward='icu' ORDER BY id DESC;", 1.0, 1.0),  # same set, other order
        ("```sql\nselect id from patient where age > 60\n```", 1.0, 1.0),  # different query, same result
        ("select id from patient", 0.0, 1.0),
        ("select nonsense from nowhere", 0.0, 0.0),
        ("null", 0.0, None),  # abstained on an answerable question
    ]
    for output, value, valid in cases:
        got, details = score("ehrsql", ehrsql(database, gold), output)
        assert got == value, output
        assert details.sub.get("valid_sql") == valid, output


def test_ehrsql_unanswerable_expects_empty_answer(database: str) -> None:
    assert score("ehrsql", ehrsql(database, None), "")[0] == 1.0
    assert score("ehrsql", ehrsql(database, None), "null")[0] == 1.0
    assert score("ehrsql", ehrsql(database, None), "select id from patient")[0] == 0.0


def test_ehrsql_is_read_only_and_time_limited(database: str) -> None:
    gold = "select count(*) from patient"
    for attack in ("delete from patient", "drop table patient", "insert into patient values (9, 1, 'x')",
                   "attach database ':memory:' as x", "pragma query_only = off"):
        value, details = score("ehrsql", ehrsql(database, gold), attack)
        assert value == 0.0 and details.sql_error == "sql_error", attack
    assert sqlite3.connect(database).execute("select count(*) from patient").fetchone() == (3,)
    from medhelm_local.scoring.ehrsql import QueryFailed, run_query

    slow = ("with recursive r(x) as (select 1 union all select x + 1 from r) select count(*) from r")
    with pytest.raises(QueryFailed) as caught:
        run_query(database, slow, time_limit_s=0.2)
    assert caught.value.category == "timeout"


def test_ehrsql_gold_that_fails_is_unscorable(database: str) -> None:
    spec = shipped_spec("ehrsql")
    [result] = score_outputs(spec, [(ehrsql(database, "select missing_column from patient"), "select 1", None)])
    assert result.value is None and result.details == {"error": "gold_sql_error"}


def test_extract_sql() -> None:
    assert extract_sql("SQL: select 1;") == "select 1"
    assert extract_sql("Here is the query:\nSELECT a FROM t; -- done") == "SELECT a FROM t"
    assert extract_sql(" NULL ") == ""
    assert extract_sql("<think>select 2</think>null") == ""


# -- billing --------------------------------------------------------------------------------------------------

def test_billing_keeps_seventh_character_suffixes() -> None:
    assert extract_codes("S72.001A, s72001d; I10 and E11.9") == {"S72001A", "S72001D", "I10", "E119"}
    inst = Instance(benchmark="mimic_iv_billing", id="1", fields={}, references=["S72001A", "I10", "E119"])
    value, details = score("mimic_iv_billing", inst, "S72.001A, I10, E11.9")
    assert value == 1.0 and details.counts.model_dump() == {"tp": 3, "fp": 0, "fn": 0} and details.strict_format
    value, details = score("mimic_iv_billing", inst, "S72.001D, I10")  # wrong encounter suffix
    assert details.counts.model_dump() == {"tp": 1, "fp": 1, "fn": 2}
    assert value == pytest.approx(2 / (2 + 1 + 2))
    value, _ = score("mimic_iv_billing", inst, "S72.001, I10")  # truncated code is not the billed code
    assert value == pytest.approx(2 / (2 + 1 + 2))


def test_billing_benchmark_score_is_micro_f1() -> None:
    spec = shipped_spec("mimic_iv_billing")
    a = Instance(benchmark="mimic_iv_billing", id="a", fields={}, references=["I10"])
    b = Instance(benchmark="mimic_iv_billing", id="b", fields={}, references=["E119", "Z794", "S72001A"])
    scores = score_outputs(spec, [(a, "I10, E119", None), (b, "E11.9", None)])
    # a: tp1 fp1 ; b: tp1 fn2 -> 2*2 / (4 + 1 + 2)
    assert summarise("mimic_iv_billing", spec.metric, scores).score == pytest.approx(4 / 7)
