"""Jury validation against clinicians: ICC(3,k) after per-rater z-scoring, clinician pairs, ROUGE-L, CSV input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from medhelm_local.analysis.agreement import read_clinician_ratings, validate_jury
from medhelm_local.analysis.stats import icc3k, zscore
from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.errors import ExtractError
from medhelm_local.records import Instance, InstanceScore
from medhelm_local.store import Store
from medhelm_local.store.judgments import Judgment, JudgmentStatus, record_judgment
from tests.conftest import Cli, cli_env
from tests.scoring.helpers import add_run, make_home, register

SPEC = shipped_spec("medication_qa")
IDS = [f"m{i}" for i in range(8)]
QUALITY = [1.0, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0]  # the "true" quality of each response


def write_csv(path: Path, rows: list[tuple[str, str, float, float, float]]) -> Path:
    lines = ["instance_id,rater,accuracy,completeness,clarity"]
    lines += [f"{i},{r},{a},{b},{c}" for i, r, a, b, c in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def clinician_rows(noise: dict[str, list[float]]) -> list[tuple[str, str, float, float, float]]:
    rows = []
    for rater, offsets in noise.items():
        for iid, quality, offset in zip(IDS, QUALITY, offsets, strict=True):
            value = min(5.0, max(1.0, quality + offset))
            rows.append((iid, rater, value, value, value))
    return rows


def test_perfect_jury_agreement_and_pairwise_clinicians(tmp_path: Path) -> None:
    rows = clinician_rows({"dr_a": [0.0] * 8, "dr_b": [0.0] * 8})
    clinicians = read_clinician_ratings(write_csv(tmp_path / "r.csv", rows), SPEC)
    # judges on their own scales (a harsh and a lenient one): z-scoring removes that
    jury = {"j1": {i: 1 + (q - 1) * 0.5 for i, q in zip(IDS, QUALITY, strict=True)},
            "j2": {i: q for i, q in zip(IDS, QUALITY, strict=True)}}
    # ROUGE-L ranks them backwards (not exactly: an exact mirror has MS_cases = 0, an undefined ICC)
    rouge = {i: 1 - q / 5 + (0.05 if n % 2 else 0.0) for n, (i, q) in enumerate(zip(IDS, QUALITY, strict=True))}
    result = validate_jury(SPEC, "run-1", clinicians, jury, rouge, resamples=200)
    assert result.jury.icc == pytest.approx(1.0)
    assert result.jury.n == 8
    assert result.clinician_clinician.icc == pytest.approx(1.0) and result.clinician_clinician.n == 1
    assert result.rouge_l.icc is not None and result.rouge_l.icc < 0


def test_icc_matches_the_hand_procedure(tmp_path: Path) -> None:
    noise = {"dr_a": [0.5, -0.5, 0.0, 1.0, -1.0, 0.0, 0.5, -0.5], "dr_b": [0, 0.5, -0.5, 0, 0.5, -1.0, 0, 0],
             "dr_c": [1.0, 0, 0, -0.5, 0, 0.5, -1.0, 0]}
    clinicians = read_clinician_ratings(write_csv(tmp_path / "r.csv", clinician_rows(noise)), SPEC)
    jury = {"j1": {i: q + (0.7 if n % 2 else -0.3) for n, (i, q) in enumerate(zip(IDS, QUALITY, strict=True))}}
    result = validate_jury(SPEC, "run-1", clinicians, jury, {}, resamples=300)
    # by hand: z-score each clinician, average per instance; z-score the judge; ICC(3,2) of the two columns
    scored = {r: zscore(np.array([min(5.0, max(1.0, q + o)) for q, o in zip(QUALITY, offsets, strict=True)]))
              for r, offsets in noise.items()}
    z = {r: v for r, v in scored.items() if v is not None}
    assert len(z) == len(scored)
    clinician_mean = np.mean(list(z.values()), axis=0)
    judge = zscore(np.array([jury["j1"][i] for i in IDS]))
    assert judge is not None
    expected = float(icc3k(np.column_stack([clinician_mean, judge])))
    assert result.jury.icc == pytest.approx(expected)
    assert result.jury.ci_low is not None and result.jury.ci_high is not None
    assert result.jury.ci_low <= expected <= result.jury.ci_high
    pairs = [float(icc3k(np.column_stack([z[a], z[b]]))) for a, b in (("dr_a", "dr_b"), ("dr_a", "dr_c"),
                                                                          ("dr_b", "dr_c"))]
    assert result.clinician_clinician.icc == pytest.approx(np.mean(pairs))
    assert result.clinician_clinician.n == 3
    assert result.rouge_l.icc is None and result.rouge_l.n == 0


def test_constant_rater_is_excluded(tmp_path: Path) -> None:
    rows = clinician_rows({"dr_a": [0.0] * 8}) + [(i, "dr_flat", 3, 3, 3) for i in IDS]
    clinicians = read_clinician_ratings(write_csv(tmp_path / "r.csv", rows), SPEC)
    result = validate_jury(SPEC, "run-1", clinicians, {"j1": dict(zip(IDS, QUALITY, strict=True))}, {},
                           resamples=50)
    assert result.excluded_raters == {"dr_flat": "the same rating for every instance"}
    assert result.jury.icc == pytest.approx(1.0)


@pytest.mark.parametrize(("text", "message"), [
    ("instance_id,accuracy\nm1,3\n", "column named 'rater'"),
    ("instance_id,rater,colour\nm1,a,3\n", "rating columns"),
    ("instance_id,rater,accuracy,completeness,clarity\nm1,a,3,3,3\nm2,a,3,9,3\n",
     "row 3 (the 2nd data row), column 'completeness'"),
    ("instance_id,rater,score\nm1,a,3\nm1,a,4\n", "row 3 (the 2nd data row)"),
    ("instance_id,rater,score\nm1,,3\n", "row 2 (the 1st data row), column 'rater'"),
    ("instance_id,rater,score\n", "at least one rating row"),
    # A row cut short was read with None for its missing cells; one with an extra field lost it silently.
    ("instance_id,rater,score,comment\nm1,a,3\n",
     "row 2 (the 1st data row): expected 4 fields as in the header, found 3"),
    ("instance_id,rater,score\nm1,a,3,4\n", "row 2 (the 1st data row): expected 3 fields as in the header, found 4"),
    # Excel where the decimal mark is a comma saves ';': it was "a column named 'instance_id' (found none ...)"
    ("instance_id;rater;score\nm1;a;3\n", "the file is semicolon-separated"),
])
def test_bad_ratings_csv(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ExtractError) as caught:
        read_clinician_ratings(path, SPEC)
    assert message in str(caught.value)
    assert caught.value.exit_code == 2


def test_headerless_ratings_csv_does_not_echo_its_first_row(tmp_path: Path) -> None:
    # Without a header the first rating row is read as the header: it must not come back as "found: ...".
    path = tmp_path / "ratings.csv"
    path.write_text("MRN8812-PHIMARKER,Dr Roe: patient Jane PHIMARKER,4,5,3\nm2,b,3,3,3\n")
    with pytest.raises(ExtractError) as caught:
        read_clinician_ratings(path, SPEC)
    assert "column named 'instance_id'" in str(caught.value)
    assert "PHIMARKER" not in str(caught.value)
    assert "5 other column name(s) not shown" in str(caught.value)
    # A real header still names the expected columns it holds.
    path.write_text("instance_id,reviewer,accuracy\nm1,a,3\n")
    with pytest.raises(ExtractError) as caught:
        read_clinician_ratings(path, SPEC)
    assert "found: instance_id, accuracy" in str(caught.value)


def test_jury_validate_cli(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    data = [Instance(benchmark="medication_qa", id=i, fields={"question": f"q {i}"}, references=["ref"]) for i in IDS]
    with Store.open(home) as store:
        fingerprint = register(store, "medication_qa", data)
        run_id = add_run(store, "model-x", "medication_qa", fingerprint, data, {i: "answer" for i in IDS})
        for judge, scale in (("j1", 1.0), ("j2", 0.5)):
            for iid, quality in zip(IDS, QUALITY, strict=True):
                score = round(1 + (quality - 1) * scale)
                record_judgment(store, Judgment(run_id=run_id, benchmark="medication_qa", instance_id=iid,
                                                judge=judge, prompt_hash="h", status=JudgmentStatus.OK,
                                                ratings={"accuracy": score, "completeness": score,
                                                         "clarity": score}))
        record_judgment(store, Judgment(run_id=run_id, benchmark="medication_qa", instance_id="m0", judge="j3",
                                        prompt_hash="h", status=JudgmentStatus.INVALID_REPLY, error="not_json"))
        store.replace_scores(run_id, "medication_qa", [
            InstanceScore(benchmark="medication_qa", instance_id=i, metric="rouge_l", value=q / 5)
            for i, q in zip(IDS, QUALITY, strict=True)])
    ratings = write_csv(tmp_path / "ratings.csv", clinician_rows({"dr_a": [0.0] * 8, "dr_b": [0.5] * 8}))
    cli = Cli(home=home.root, env=cli_env())
    result = cli("jury", "validate", "--ratings", str(ratings), "--run", run_id, "--benchmark", "medication_qa",
                 "--json", "--resamples", "100")
    assert result.code == 0, result.stderr
    payload = result.json()
    assert isinstance(payload, dict)
    assert payload["jury"]["n"] == 8 and payload["jury"]["icc"] > 0.9
    assert payload["rouge_l"]["icc"] > 0.9
    assert payload["clinician_clinician"]["n"] == 1
    failures = cli("jury", "failures", "--run", run_id, "--json").json()
    assert isinstance(failures, list)
    assert {f["judge"]: f["failure_rate"] for f in failures} == {"j1": 0.0, "j2": 0.0, "j3": 1.0}

    unknown = write_csv(tmp_path / "unknown.csv", [("zz", "dr_a", 3, 3, 3), ("m1", "dr_a", 4, 4, 4)])
    bad = cli("jury", "validate", "--ratings", str(unknown), "--run", run_id, "--benchmark", "medication_qa")
    assert bad.code == 2 and "not items of run" in bad.stderr
    closed = cli("jury", "validate", "--ratings", str(ratings), "--run", run_id, "--benchmark", "pubmedqa")
    assert closed.code == 2


def test_jury_validate_combined_over_benchmarks(tmp_path: Path) -> None:
    from tests.scoring.helpers import add_multi_run

    home = make_home(tmp_path / "home")
    plan = {}
    with Store.open(home) as store:
        for benchmark, field in (("medication_qa", "question"), ("aci_bench", "conversation")):
            data = [Instance(benchmark=benchmark, id=i, fields={field: f"text {i}"}, references=["ref"]) for i in IDS]
            plan[benchmark] = (register(store, benchmark, data), data, {i: "answer" for i in IDS})
        run_id = add_multi_run(store, "model-x", plan)
        for benchmark, flip in (("medication_qa", False), ("aci_bench", True)):
            for iid, quality in zip(IDS, QUALITY, strict=True):
                score = round(6 - quality) if flip else round(quality)  # the jury disagrees on aci_bench
                record_judgment(store, Judgment(run_id=run_id, benchmark=benchmark, instance_id=iid, judge="j1",
                                                prompt_hash="h", status=JudgmentStatus.OK,
                                                ratings={"accuracy": max(1, min(5, score))}))
    lines = ["benchmark,instance_id,rater,accuracy,completeness,clarity"]
    for benchmark in ("medication_qa", "aci_bench"):
        for rater, offset in (("dr_a", 0.0), ("dr_b", 0.5)):
            for iid, quality in zip(IDS, QUALITY, strict=True):
                value = min(5.0, quality + offset)
                lines.append(f"{benchmark},{iid},{rater},{value},{value},{value}")
    ratings = tmp_path / "ratings.csv"
    ratings.write_text("\n".join(lines) + "\n")
    cli = Cli(home=home.root, env=cli_env())
    result = cli("jury", "validate", "--ratings", str(ratings), "--run", run_id, "--benchmark", "medication_qa",
                 "--benchmark", "aci_bench", "--json", "--resamples", "100")
    assert result.code == 0, result.stderr
    payload = result.json()
    assert isinstance(payload, dict)
    assert payload["benchmark"] == "combined" and payload["jury"]["n"] == 16
    parts = {p["benchmark"]: p for p in payload["per_benchmark"]}
    assert parts["medication_qa"]["jury"]["icc"] > 0.9
    assert parts["aci_bench"]["jury"]["icc"] < 0
    assert parts["medication_qa"]["jury"]["n"] == 8
    missing_column = tmp_path / "no-benchmark.csv"
    missing_column.write_text("instance_id,rater,score\nm1,dr_a,3\n")
    bad = cli("jury", "validate", "--ratings", str(missing_column), "--run", run_id, "--benchmark", "medication_qa",
              "--benchmark", "aci_bench")
    assert bad.code == 2 and "'benchmark'" in bad.stderr


def test_a_constant_rater_is_excluded_whatever_the_float_rounding_of_their_mean(tmp_path: Path) -> None:
    """A clinician who gives (3, 3, 4) to each of 12 responses has the composite 10/3 throughout: no spread, so no
    z-score. The mean of twelve 3.3333333333333335 is 1 ulp off, so the computed SD was 4.6e-16, not 0: the rater
    was kept with z = 0.957 on every instance, shrank the clinicians' mean and added a clinician pair of ICC 0."""
    ids = [f"m{i}" for i in range(12)]
    quality = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 2.0, 3.0, 4.0]
    rows = [(i, "dr_a", q, q, q) for i, q in zip(ids, quality, strict=True)]
    rows += [(i, "dr_flat", 3.0, 3.0, 4.0) for i in ids]
    clinicians = read_clinician_ratings(write_csv(tmp_path / "r.csv", rows), SPEC)
    assert np.std(list(clinicians.composites["dr_flat"].values()), ddof=1) > 0  # the float noise this is about
    assert zscore(np.array(list(clinicians.composites["dr_flat"].values()))) is None
    jury = {"j1": dict(zip(ids, quality, strict=True))}
    result = validate_jury(SPEC, "run-1", clinicians, jury, {}, resamples=50)
    assert result.excluded_raters == {"dr_flat": "the same rating for every instance"}
    assert result.jury.icc == pytest.approx(1.0)  # dr_a alone, who agrees with the judge
    assert result.clinician_clinician.icc is None and result.clinician_clinician.n == 0
