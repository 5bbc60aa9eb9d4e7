"""The disclosure policy: cell-size and complementary suppression, rounding, the string scan, the policy file."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from medhelm_local.export.aggregates import RawCell, RawExport, RawModelUsage, RawRun, publish, publish_cell
from medhelm_local.export.policy import ExportPolicy, default_policy_bytes, parse_policy
from medhelm_local.export.scan import PATTERNS, scan_strings, strings_of
from medhelm_local.home import ModelEndpoint
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.compliance.conftest import add_models, approve_args, hospice_csv, request_export, write_policy
from tests.compliance.inproc import InProcessCli

REPO = Path(__file__).resolve().parents[2]
POLICY = ExportPolicy()


def _cell(model: str = "m", benchmark: str = "b1", score: float | None = 0.123456, n_scored: int = 40,
          n_failed: int = 0, category: str = "Cat A") -> RawCell:
    return RawCell(run_id=f"run-{model}", model=model, benchmark=benchmark, category=category, metric="exact_match",
                   score=score, n_scored=n_scored, n_failed=n_failed, n_total=n_scored + n_failed,
                   created_at=datetime(2026, 1, 1))


def test_repository_policy_is_the_packaged_default() -> None:
    assert (REPO / "policies" / "export-policy.yaml").read_bytes() == default_policy_bytes()
    loaded = parse_policy(default_policy_bytes(), "default")
    assert loaded.policy.min_cell_size == 11 and loaded.policy.approval.approvers == []
    assert loaded.policy.approval.requesters == []


def test_small_cells_are_suppressed() -> None:
    assert publish_cell(_cell(n_scored=7), POLICY).model_dump(include={"score", "n_scored", "n_total"}) == {
        "score": None, "n_scored": None, "n_total": None}
    cell = publish_cell(_cell(n_scored=10, n_failed=5), POLICY)  # 15 planned, only 10 scored
    assert cell.score is None and cell.n_scored is None and cell.n_total == 15
    assert "score:small_cell" in cell.suppressed
    published = publish_cell(_cell(n_scored=11, score=1.0), POLICY)
    assert published.score == 1.0 and published.n_scored == 11 and published.n_failed == 0


def test_complementary_suppression() -> None:
    cell = publish_cell(_cell(n_scored=40, n_failed=3, score=0.5), POLICY)  # 3 failures: the 40 would reveal them
    assert cell.n_failed is None and cell.n_scored is None and cell.n_total == 43
    # and so would the score: 0.5 x n is a whole number for n = 40 only, among 33..42 (score x n_total undone)
    assert cell.score is None
    assert set(cell.suppressed) == {"n_failed:small_cell", "n_scored:complementary", "score:complementary"}


def test_averages_use_published_scores_only() -> None:
    raw = RawExport(
        runs=[RawRun(run_id="run-m", model="m", status="finished", benchmarks=["b1", "b2"], manifest_sha256="0" * 64,
                     dataset_fingerprints={})],
        cells=[_cell(benchmark="b1", score=0.6), _cell(benchmark="b2", score=0.1, n_scored=5)],
        usage=[RawModelUsage(model="m", cost=1.23456, n_total=45)],
    )
    data = publish(raw, POLICY, request_id="exp-x", policy_sha256="0" * 64)
    model = data.models[0]
    assert model.macro_avg == 0.6 and model.benchmarks_suppressed == 1 and model.cost == 1.23
    assert model.category_scores == {"Cat A": 0.6}


@pytest.mark.parametrize(("rule", "text"), [
    ("mrn", "MRN 4471923"), ("ssn", "123-45-6789"), ("phone", "(555) 123-4567"), ("email", "jo@example.org"),
    ("date", "03/14/2025"), ("date", "March 14"), ("address", "12 Elm Street"), ("url", "https://example.org"),
])
def test_phi_patterns(rule: str, text: str) -> None:
    assert PATTERNS[rule].search(text)
    _, found, _ = scan_strings("f.json", [("$.x", f"model {text}")], patterns=[rule], terms=set(), allowed=None,
                               fixed=set())
    assert found and found[0].rule == f"PHI pattern {rule}" and text not in str(found)


def test_pattern_scan_leaves_model_names_and_numbers_alone() -> None:
    strings = [("a", "llama-3.1-8b-instruct"), ("b", "0.734"), ("c", "qwen2.5-72b"), ("d", "exact_match")]
    _, found, _ = scan_strings("f", strings, patterns=list(PATTERNS), terms=set(), allowed=None, fixed=set())
    assert found == []


def test_html_external_references_are_found() -> None:
    html = b'<html><body><img src="http://x/y.png"><p style="background:url(http://x)">t</p></body></html>'
    _, external = strings_of("report.html", html)
    assert len(external) == 3


def test_a_patient_name_in_a_model_name_blocks_the_export(tmp_path: Path) -> None:
    """The extract-term scan: a model named after a patient seen in the extract cannot be exported."""
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    write_policy(cli.home)
    with FakeOpenAIServer(responder=lambda _m: "A") as server:
        add_models(cli.home, [ModelEndpoint(name="quillonby-7b", base_urls=[server.base_url])])
        extract = hospice_csv(tmp_path / "notes.csv", 22, note=lambda i: f"Patient Ada Quillonby, visit {i}.")
        assert cli("datasets", "register", "hospice_referral", str(extract)).code == 0
        run = cli("run", "--model", "quillonby-7b", "--benchmarks", "hospice_referral", "--json")
        assert run.code == 0, run.stderr
    request = request_export(cli, json.loads(run.stdout)["run_id"])
    assert request["status"] == "blocked"
    failed = {c["id"]: c for c in request["checks"] if c["result"] == "fail"}
    assert set(failed) == {"extract_terms"}
    assert "Quillonby" not in json.dumps(request).replace("quillonby-7b", "")  # findings never quote the value
    approve = cli("export", "approve", request["request_id"], *approve_args(cli.home))
    assert approve.code == 1 and "cannot be approved" in approve.stderr
    unfinished = cli("export", "request", "--runs", "run-does-not-exist", *approve_args(cli.home, "alice-informatics"))
    assert unfinished.code == 2


def test_report_renders_several_models_with_suppressed_cells() -> None:
    from medhelm_local.export.render import render_files

    runs = [RawRun(run_id=f"run-{m}", model=m, status="finished", benchmarks=["b1", "b2"], manifest_sha256="0" * 64,
                   dataset_fingerprints={}) for m in ("alpha", "beta")]
    cells = [_cell("alpha", "b1", 0.725), _cell("alpha", "b2", 0.4, category="Cat B"),
             _cell("beta", "b1", 0.7), _cell("beta", "b2", 0.6, n_scored=4, category="Cat B")]
    usage = [RawModelUsage(model="alpha", cost=12.5, n_total=80), RawModelUsage(model="beta", cost=3.25, n_total=44)]
    data = publish(RawExport(runs=runs, cells=cells, usage=usage), POLICY, request_id="exp-x", policy_sha256="0" * 64)
    assert [m.model for m in data.models] == ["alpha", "beta"]
    assert data.models[0].win_rate == 1.0 and data.models[1].win_rate == 0.0  # b2 of beta is not published
    files = render_files(data)
    html = files["report.html"].decode()
    # two points, each ringed: both are on the cost / win-rate Pareto front (the paper's scatter)
    assert html.count("<svg") == 3 and html.count("<circle") == 4 and "suppressed" in html
    _, external = strings_of("report.html", files["report.html"])
    assert external == []
    assert json.loads(files["aggregates.json"])["cells"][3]["score"] is None
