"""Scorers on real files and on outputs written the way models really write them (issue 13 §2)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.records import Instance
from medhelm_local.scoring.ehrsql import extract_sql, post_process_sql, run_query
from medhelm_local.scoring.engine import score_outputs
from medhelm_local.scoring.medec import parse_medec
from medhelm_local.scoring.summary import Breakdown, summarise
from tests.conftest import Cli
from tests.scoring.test_real_data import instances


def score_all(benchmark: str, outputs: list[tuple[Instance, str]]) -> Breakdown:
    spec = shipped_spec(benchmark)
    return summarise(benchmark, spec.metric, score_outputs(spec, [(i, o, None) for i, o in outputs]))


# -- MEDEC: the benchmark's native "<id> <corrected sentence>" answer --------------------------------------------

def medec_rows(public_data: Path) -> list[dict[str, str]]:
    path = public_data / "medec" / "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv"
    with path.open(encoding="utf-8", newline="") as handle:
        return [row for row in csv.DictReader(handle) if (row.get("Text ID") or "").strip()]


def test_medec_native_answer_format_on_real_rows(public_data: Path) -> None:
    rows = medec_rows(public_data)
    first = rows[0]
    native = f"{first['Error Sentence ID']} {first['Corrected Sentence']}"
    assert native == "10 Patient's symptoms are suspected to be due to Schistosoma mansoni."
    assert parse_medec(native) == (1, 10, True)

    flagged = {r["Text ID"]: r for r in rows if r["Error Flag"] == "1"}
    assert len(flagged) == 311
    outputs = [(i, "CORRECT" if i.meta["error_flag"] == 0
                else f"{flagged[i.id]['Error Sentence ID']} {flagged[i.id]['Corrected Sentence']}")
               for i in instances("medec")]
    summary = score_all("medec", outputs)
    assert summary.n == 597
    assert summary.score == 1.0  # the 311 native answers used to be unparsed and scored 0 (0.479 overall)
    assert summary.parse_rate == 1.0 and summary.strict_format_rate == 1.0
    assert summary.secondary["error_sentence_accuracy"]["score"] == 1.0


@pytest.mark.parametrize("form", [
    "Error sentence ID: {id}\nCorrected sentence: {corrected}",
    "The error is in sentence ID: {id}.",
    "ID {id}: {corrected}",
    "[{id}] {corrected}",
    "{id}",
])
def test_medec_sentence_id_forms_on_real_rows(public_data: Path, form: str) -> None:
    flagged = {r["Text ID"]: r for r in medec_rows(public_data) if r["Error Flag"] == "1"}
    outputs = [(i, "CORRECT" if i.meta["error_flag"] == 0 else
                form.format(id=flagged[i.id]["Error Sentence ID"], corrected=flagged[i.id]["Corrected Sentence"]))
               for i in instances("medec")]
    summary = score_all("medec", outputs)
    assert summary.score == 1.0, form  # the 311 flagged notes' answers were unparsed and scored 0 (0.479 overall)
    assert summary.parse_rate == 1.0
    assert summary.secondary["error_sentence_accuracy"]["score"] == 1.0


@pytest.mark.parametrize(("output", "expected"), [
    ("10 Patient's symptoms are suspected to be due to Schistosoma mansoni.", (1, 10, True)),
    ("The erroneous sentence (ID 10) should read: ...", (1, 10, False)),
    ("**10**", (1, 10, False)),
    ("**10** Patient's symptoms are suspected to be due to Schistosoma mansoni.", (1, 10, False)),
    ("10: Patient's symptoms are suspected to be due to Schistosoma mansoni.", (1, 10, True)),
    ("Sentence 4: The patient was given aspirin.", (1, 4, False)),
    ("CORRECT", (0, None, True)),
    ("I cannot tell.", (None, None, False)),
    # The first verdict stated wins, wherever the other one appears.
    ("There is no error in this note, but sentence 4 could be worded better.", (0, None, False)),
    ("The note contains no medical errors. (Sentence 3 mentions aspirin, which is appropriate.)", (0, None, False)),
    ("The error is in sentence 4; the rest of the note is correct.", (1, 4, False)),
    ("Sentence 4 is not correct: the patient was given aspirin.", (1, 4, False)),
    ("The note is correct except for sentence 4, which should read: ...", (1, 4, False)),
    ("There are no errors other than in sentence 7.", (1, 7, False)),
])
def test_medec_answer_forms(output: str, expected: tuple[int | None, int | None, bool]) -> None:
    assert parse_medec(output) == expected


# -- EHRSQL: fenced replies, and gold queries that return no rows -------------------------------------------------

FENCE_FORMS = [
    "Here is the SQL query:\n```sql\n{sql}\n```",
    "Here is the SQL query:\n```sql\n{sql}\n```\nIt counts the rows you asked for.",
    "Here is the SQL query:\n```\n{sql}\n```",
    "Here is the SQL query:\n```SQL\n{sql}\n```",
    "Here is the SQL query:\n```sqlite\n{sql}\n```",
    "Here is the SQL query:\n~~~sql\n{sql}\n~~~",
    "Here is the SQL query: ```{sql}```",
    "Here is the SQL query: `{sql}`",
    "```sql\n{sql}\n```",
    "Here is the SQL query:\n\n{sql}\n\nThis query returns the answer.",
]


@pytest.mark.parametrize("form", FENCE_FORMS)
def test_ehrsql_extraction_drops_every_fence(form: str) -> None:
    sql = "SELECT COUNT(*) FROM patient WHERE gender = 'female'"
    assert extract_sql(form.format(sql=sql)) == sql
    assert extract_sql(form.format(sql=sql + ";")) == sql


def test_ehrsql_fenced_real_gold_queries_score_one(public_data: Path) -> None:
    data = instances("ehrsql")
    outputs = [(i, f"Here is the SQL query:\n```sql\n{i.references[0]}\n```" if i.references else "null")
               for i in data]
    summary = score_all("ehrsql", outputs)
    assert summary.score == 1.0
    assert summary.secondary["valid_sql"]["score"] == 1.0


@pytest.mark.parametrize("abstention", [
    "**null**",
    "null\n\nThe schema has no table that records this.",
    "Answer: null",
    "**SQL:** null",
])
def test_ehrsql_abstentions_in_markdown_or_with_a_reason_on_real_items(public_data: Path, abstention: str) -> None:
    data = instances("ehrsql")
    summary = score_all("ehrsql", [(i, i.references[0] if i.references else abstention) for i in data])
    assert summary.score == 1.0, abstention  # read as SQL that failed: every unanswerable question 0 (0.672)
    assert summary.groups["unanswerable"]["score"] == 1.0
    everywhere = score_all("ehrsql", [(i, abstention) for i in data])
    assert everywhere.secondary["abstention"]["score"] == 1.0  # not counted as invalid SQL on answerable ones
    assert extract_sql("**SQL:**\nSELECT 1;") == "SELECT 1"


def test_ehrsql_empty_gold_reported_beside_execution_accuracy(public_data: Path) -> None:
    data = instances("ehrsql")
    db = str(public_data / "ehrsql" / "eicu.sqlite")
    answerable = [i for i in data if i.references]
    assert len(answerable) == 1204
    empty = 0
    for instance in answerable:
        empty += not run_query(db, post_process_sql(instance.references[0]))
    assert empty == 651

    # A model that answers every answerable question with a query returning nothing.
    nothing = [(i, "SELECT patientunitstayid FROM patient WHERE 0" if i.references else "null") for i in data]
    summary = score_all("ehrsql", nothing)
    assert summary.n_gold_empty == 651
    assert summary.score == pytest.approx((651 + 588) / 1792)  # the main score still credits those
    assert summary.score_nonempty_gold == 0.0  # the 553 answerable items with rows: none right

    gold = score_all("ehrsql", [(i, i.references[0] if i.references else "null") for i in data])
    assert (gold.n_gold_empty, gold.score_nonempty_gold, gold.score) == (651, 1.0, 1.0)


def test_ehrsql_gold_queries_run_as_the_official_evaluation_runs_them(public_data: Path) -> None:
    """EHRSQL's evaluate.py (post_process_sql) sets the dataset's "now" for current_time, fills the vital-sign
    placeholders and reads %y/%j as %Y/%J, in gold and predicted queries alike."""
    data = instances("ehrsql")
    three_years = next(i for i in data if i.references and "datetime(current_time,'-3 year')" in i.references[0]
                       and i.references[0].startswith("select count( distinct patient.uniquepid ) from patient"))
    dated = three_years.references[0].replace("current_time", "'2105-12-31 23:59:00'")
    placeholders = [i for i in data if i.references and "heart_rate_lower" in i.references[0]]
    assert placeholders
    summary = score_all("ehrsql", [(three_years, dated), (three_years, three_years.references[0])]
                        + [(i, i.references[0]) for i in placeholders])
    # the query stating the dataset's "now" is right; SQLite's own current_time (today's clock) is rewritten too
    assert summary.score == 1.0 and summary.n_failed == 0  # the placeholder gold queries run (no longer failures)


def test_score_command_reports_empty_gold_on_the_real_files(home_cli: Cli, public_data: Path,
                                                            tmp_path: Path) -> None:
    """As a user runs it: register the real EHRSQL folder, score fenced replies whose queries return nothing."""
    import json

    assert home_cli("datasets", "register", "ehrsql", str(public_data / "ehrsql")).code == 0
    nothing = "Here is the SQL query:\n```sql\nSELECT patientunitstayid FROM patient WHERE 0\n```"
    entries = json.loads((public_data / "ehrsql" / "test.json").read_text(encoding="utf-8"))
    predictions = tmp_path / "ehrsql.jsonl"
    predictions.write_text("".join(json.dumps({"id": e["id"], "output": "null" if e["is_impossible"] else nothing})
                                   + "\n" for e in entries), encoding="utf-8")
    scored = home_cli("score", "ehrsql", "--predictions", str(predictions), "--json")
    assert scored.code == 0, scored.stderr
    payload = scored.json()
    assert isinstance(payload, dict)
    assert (payload["n"], payload["n_failed"], payload["n_gold_empty"]) == (1792, 0, 651)
    assert payload["score"] == pytest.approx((651 + 588) / 1792) and payload["score_nonempty_gold"] == 0.0
    table = home_cli("score", "ehrsql", "--predictions", str(predictions))
    assert "empty gold\tscore on non-empty gold" in table.stdout and "\t651\t0.000" in table.stdout


def test_other_metrics_have_no_empty_gold_figures(public_data: Path) -> None:
    summary = score_all("pubmedqa", [(i, str(i.label)) for i in instances("pubmedqa")[:20]])
    assert summary.n_gold_empty is None and summary.score_nonempty_gold is None


# -- MedCalc-Bench: the value the answer states, never a number of a unit -----------------------------------------

def medcalc_rows(public_data: Path) -> dict[str, dict[str, str]]:
    with (public_data / "medcalc_bench" / "test_data.csv").open(encoding="utf-8", newline="") as handle:
        return {row["Row Number"]: row for row in csv.DictReader(handle)}


def test_medcalc_ground_truth_explanations_score_one(public_data: Path) -> None:
    """Each real row's Ground Truth Explanation is a step-by-step answer ending with the result ("... = 54.0
    mL/hr.\\nHence, the patient's fluid maintenance is 54.0 mL/hr."): the way reasoning models answer."""
    rows = medcalc_rows(public_data)
    data = instances("medcalc_bench")
    summary = score_all("medcalc_bench", [(i, rows[i.id]["Ground Truth Explanation"]) for i in data])
    assert summary.n == 1047
    assert summary.score == 1.0  # was 0.749: last-number reading took 1.73 of "m²", operands, LMP dates
    assert all(group["score"] == 1.0 for group in summary.groups.values())


def test_medcalc_gfr_unit_and_lmp_date_on_real_items(public_data: Path) -> None:
    rows = medcalc_rows(public_data)
    data = instances("medcalc_bench")
    gfr = [i for i in data if "Glomerular Filtration" in rows[i.id]["Calculator Name"]
           or rows[i.id]["Calculator Name"] == "MDRD GFR Equation"]
    assert len(gfr) == 40
    summary = score_all("medcalc_bench", [(i, f"{rows[i.id]['Ground Truth Answer']} mL/min/1.73 m²") for i in gfr])
    assert summary.score == 1.0

    dates = [i for i in data if rows[i.id]["Calculator Name"] in ("Estimated Due Date", "Estimated of Conception")]
    assert len(dates) == 40
    outputs = [(i, f"{rows[i.id]['Ground Truth Answer']} (LMP 12/17/2013)") for i in dates]
    assert score_all("medcalc_bench", outputs).score == 1.0


def test_medcalc_score_answers_with_the_risk_they_mean_on_real_items(public_data: Path) -> None:
    """A score's answer often gives the risk it means beside it; the percentage is never the score."""
    rows = medcalc_rows(public_data)
    scored = [i for i in instances("medcalc_bench") if i.meta["category"] in ("risk", "severity", "diagnosis")]
    assert len(scored) == 380
    for form in ("The patient's score is {gold}, which corresponds to a 4.8% annual risk.",
                 "The patient's score is {gold}. This corresponds to an estimated risk of 12.5 percent.",
                 "Total = {gold} points (predicted mortality 8%)."):
        outputs = [(i, form.format(gold=rows[i.id]["Ground Truth Answer"])) for i in scored]
        summary = score_all("medcalc_bench", outputs)
        assert summary.score == 1.0, form  # the first two read the percentage: 0.0 on every item
        assert summary.parse_rate == 1.0


def test_medcalc_answers_with_a_range_threshold_or_scale_beside_them_on_real_items(public_data: Path) -> None:
    """Chatty answers put the stated value beside numbers that frame it: a reference range, a threshold, the
    scale's maximum. Those are never the answer while the output states another."""
    rows = medcalc_rows(public_data)
    data = instances("medcalc_bench")
    for form in ("The result is {gold}, which is outside the reference range of 10-20.",
                 "The patient's score is {gold} out of 10.",
                 "The calculated value is {gold}. A value above 5 indicates high risk.",
                 "The patient's value is {gold}, above the cutoff of 2."):
        outputs = [(i, form.format(gold=rows[i.id]["Ground Truth Answer"])) for i in data]
        summary = score_all("medcalc_bench", outputs)
        assert summary.score == 1.0, form  # read 10, 10, 5 and 2: 0.080, 0.080, 0.074, 0.120
        assert summary.parse_rate == 1.0


@pytest.mark.parametrize(("output", "value"), [
    ("The corrected sodium is 140 mEq/L, which is within the normal range of 135-145 mEq/L.", 140.0),
    ("The corrected sodium is 150 mEq/L, above the normal range of 135\u2013145 mEq/L.", 150.0),
    ("The CURB-65 score is 2 out of 5.", 2.0),
    ("The score is 3. Scores between 2 and 4 mean moderate risk; > 4 means high risk.", 3.0),
    ("The heart rate is above 100.", 100.0),  # nothing else stated: the framing number is read as before
])
def test_medcalc_framing_numbers_are_not_the_answer(output: str, value: float) -> None:
    from medhelm_local.scoring.extract import extract_number

    assert extract_number(output).value == value


def test_percentages_are_read_where_a_quantity_may_be_one() -> None:
    from medhelm_local.scoring.extract import extract_number

    assert extract_number("The FENa is 0.5%.").value == 0.5
    assert extract_number("The FENa is 0.5%.", percentages=False).value is None
    assert extract_number("Risk is 4.8 per cent", percentages=False).value is None


@pytest.mark.parametrize(("output", "value"), [
    ("127.7 mL/min/1.73 m²", 127.7),
    ("The patient's GFR is 127.7 mL/min/1.73 m².", 127.7),
    ("BMI = 22.5 kg/m^2", 22.5),
    ("The answer is 4.\nLet me know if you need anything else.", 4.0),
    ("Score: 3 + 1 = 4", 4.0),
    ("so total is 1 - 2 = -1.\nThe Well's DVT score for the patient is -1.", -1.0),
    ("7.96 mg of Dexamethasone PO is equal to 53.093 mg of PrednisoLONE PO.", 53.093),
    ("ANC is 2.5 x 10^9/L", 2.5),
])
def test_medcalc_stated_number(output: str, value: float) -> None:
    from medhelm_local.scoring.extract import extract_number

    assert extract_number(output).value == value


@pytest.mark.parametrize("output", [
    "09/23/2014 (LMP 12/17/2013)",
    "Estimated due date: 09/23/2014 (LMP 12/17/2013)",
    "The LMP was 12/17/2013, so the estimated due date is 09-23-2014.",
])
def test_medcalc_stated_date(output: str) -> None:
    from datetime import date

    from medhelm_local.scoring.extract import extract_date

    assert extract_date(output).value == date(2014, 9, 23)


# -- Multiple choice: a leading answer, then the other options discussed ------------------------------------------

@pytest.mark.parametrize("form", [
    "{gold}) {text}\n\nExplanation: Option {other} is incorrect because it does not fit the presentation.",
    "**{gold}. {text}**\n\nWhy not the others: option {other} would apply only in pregnancy.",
    "{gold}\n\nOption {other} is a distractor.",
])
def test_medqa_leading_answer_outranks_an_option_discussed_after_it_on_real_items(public_data: Path,
                                                                                   form: str) -> None:
    data = instances("medqa")
    outputs = [(i, form.format(gold=i.label, text=i.meta["options"][i.label],
                               other=next(k for k in "ABCD" if k != i.label))) for i in data]
    summary = score_all("medqa", outputs)
    assert summary.n == 1273
    assert summary.score == 1.0  # read the option discussed after the answer: 0.0
    assert summary.parse_rate == 1.0


@pytest.mark.parametrize(("benchmark", "form"), [
    ("medqa", "Weighing the options, $\\boxed{{{gold}}}$"),
    ("medqa", "\\(\\boxed{{\\text{{{gold}}}}}\\)"),
    ("pubmedqa", "$\\boxed{{{gold}}}$"),
])
def test_latex_boxed_answers_on_real_items(public_data: Path, benchmark: str, form: str) -> None:
    summary = score_all(benchmark, [(i, form.format(gold=i.label)) for i in instances(benchmark)])
    assert summary.score == 1.0  # unparsed: 0.0
    assert summary.parse_rate == 1.0


# -- Hedges: two different labels offered as alternatives are no answer ----------------------------------------

@pytest.mark.parametrize(("benchmark", "hedge"), [
    ("medqa", "The answer is {gold} or {other}."),
    ("medqa", "The answer is {other} or {gold}."),
    ("medqa", "{gold} or {other}"),
    ("medqa", "Answer: **{gold}** or **{other}**"),
    ("pubmedqa", "The answer is {gold} or {other}."),
    ("pubmedqa", "{gold}/{other}"),
])
def test_hedged_answers_are_unparsed(public_data: Path, benchmark: str, hedge: str) -> None:
    spec = shipped_spec(benchmark)
    labels = list(spec.labels or [])
    data = instances(benchmark)[:100]
    outputs = [(i, hedge.format(gold=i.label, other=next(x for x in labels if x != i.label))) for i in data]
    summary = score_all(benchmark, outputs)
    assert summary.score == 0.0
    assert summary.parse_rate == 0.0 and summary.strict_format_rate == 0.0

    committed = score_all(benchmark, [(i, f"The answer is {i.label}.") for i in data])
    assert committed.score == 1.0 and committed.parse_rate == 1.0


def test_hedges_with_the_issue_examples() -> None:
    from medhelm_local.scoring.extract import extract_label

    assert extract_label("The answer is B or A.", ["A", "B", "C", "D"]) == (None, False)
    assert extract_label("The answer is yes or no.", ["yes", "no", "maybe"]) == (None, False)
    assert extract_label("The answer is B or B.", ["A", "B", "C", "D"]) == ("B", False)  # one label, twice
    assert extract_label("The answer is B, not A.", ["A", "B", "C", "D"]) == ("B", False)


# -- ICD-10-CM billing: candidates validated against the real code set ------------------------------------------

def test_billing_reads_only_real_billable_codes() -> None:
    from medhelm_local.scoring.billing import extract_codes, is_billable

    note_like = ("Codes: E11.9, I10, Z79.4. T2DM with A1c 8.2 on ceftriaxone q6h; B12 deficiency (D51.9); "
                 "staff wore N95 masks; S72.001A")
    assert extract_codes(note_like) == {"E119", "I10", "Z794", "D519", "S72001A"}
    for word in ("T2DM", "A1C", "Q6H", "B12", "N95"):
        assert not is_billable(word), word
    # 7th characters: initial and subsequent encounters are different billable codes; without it, not billable.
    assert is_billable("S72001A") and is_billable("S72001D") and not is_billable("S72001")
    assert extract_codes("S72.001D") == {"S72001D"}


def test_billing_micro_f1_is_not_charged_for_words_that_look_like_codes() -> None:
    spec = shipped_spec("mimic_iv_billing")
    instance = Instance(benchmark="mimic_iv_billing", id="1", fields={"context": "note"},
                        references=["E11.9", "I10", "S72.001A"])
    chatty = "E11.9 (T2DM, last A1c 8.2), I10; S72.001A. Also B12 and N95 noted."
    (scored,) = score_outputs(spec, [(instance, chatty, None)])
    assert scored.value == 1.0 and scored.details["counts"] == {"tp": 3, "fp": 0, "fn": 0}
    # A gold code that a later release split (no longer a leaf) still counts when the model names it.
    split = instance.model_copy(update={"references": ["S72001"]})
    (kept,) = score_outputs(spec, [(split, "S72.001", None)])
    assert kept.value == 1.0


def test_billing_code_set_agrees_with_the_packages_own_api() -> None:
    """The code list is read as a file (fast, small); its codes and leaves are the package's own."""
    import random
    import warnings

    from medhelm_local.scoring.billing import _code_set, is_billable

    codes, _ = _code_set()
    assert len(codes) == 98166  # simple-icd-10-cm 1.5.0: the April 2026 ICD-10-CM release
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import simple_icd_10_cm as icd10cm
    sample = [*random.Random(13).sample(sorted(codes), 2000), "T2DM", "A1C", "Q6H", "B12", "N95", "E11"]
    for code in sample:
        expected = bool(icd10cm.is_valid_item(code) and icd10cm.is_leaf(code))
        assert is_billable(code) == expected, code
