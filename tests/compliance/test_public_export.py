"""A legitimate export of public benchmarks comes out `ready`: the bundle's own schema keys and fixed text are
vocabulary, never extract terms (issue 12 §4: `min_cell_size` was split into words and matched against
capitalised words of the extracts, so three models on PubMedQA, MedQA, MEDEC and MedHallu were `blocked`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from medhelm_local.home import ModelEndpoint
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.compliance.conftest import add_models, request_export, run_json, write_policy
from tests.compliance.inproc import InProcessCli

MODELS = ("llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "mistral-7b-instruct-v0.3")
SOURCES = {"pubmedqa": "pubmedqa", "medqa": "medqa/phrases_no_exclude_test.jsonl", "medec": "medec",
           "medhallu": "medhallu"}
ANSWERS = ("A", "B", "C", "D", "yes", "no", "CORRECT", "0", "1")


def _answer(messages: list[dict[str, Any]]) -> str:
    digest = hashlib.sha256(json.dumps(messages).encode()).digest()
    return f"The answer is {ANSWERS[digest[0] % len(ANSWERS)]}."


def _request(public_data: Path, tmp_path: Path, max_instances: int, **policy: Any) -> tuple[dict[str, Any], Path]:
    """Three models on the four public benchmarks, exported under the site policy (``policy``: its overrides)."""
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    write_policy(cli.home, **policy)
    for benchmark, source in SOURCES.items():
        assert cli("datasets", "register", benchmark, str(public_data / source)).code == 0, benchmark
    run_ids = []
    with FakeOpenAIServer(responder=_answer) as server:
        add_models(cli.home, [ModelEndpoint(name=m, base_urls=[server.base_url]) for m in MODELS])
        for model in MODELS:
            run = run_json(cli, "run", "--model", model, "--benchmarks", ",".join(SOURCES), "--max-instances",
                           str(max_instances))
            run_ids.append(str(run["run_id"]))
    request = request_export(cli, *run_ids)
    failed = {c["id"]: c["findings"][:5] for c in request["checks"] if c["result"] == "fail"}
    assert request["status"] == "ready", failed
    return request, cli.home / "exports" / request["request_id"] / "bundle"


def test_three_models_on_four_public_benchmarks_give_a_ready_request(public_data: Path, tmp_path: Path) -> None:
    request, bundle = _request(public_data, tmp_path, 200)
    data = json.loads((bundle / "aggregates.json").read_text())
    assert len(data["cells"]) == 12 and {c["n_total"] for c in data["cells"]} == {200}
    assert [c for c in data["cells"] if c["score"] is not None]  # scores are published, not all suppressed
    extract_terms = next(c for c in request["checks"] if c["id"] == "extract_terms")
    assert not extract_terms["detail"].startswith("0 term")  # the public extracts' terms were really checked


def test_counts_rounded_on_public_benchmarks_give_a_ready_request(public_data: Path, tmp_path: Path) -> None:
    """Counts rounded to 5: n = 203 is published as 205 beside scores to 2 decimals. The checks once multiplied
    the published score by the published n (MEDEC's 0.05 x 205 = 10.25, "a small count") and blocked it."""
    _, bundle = _request(public_data, tmp_path, 203,
                         rounding={"score_decimals": 3, "cost_decimals": 2, "count_multiple": 5})
    cells = json.loads((bundle / "aggregates.json").read_text())["cells"]
    assert len(cells) == 12 and {c["n_scored"] for c in cells} == {205}
    published = [c for c in cells if c["score"] is not None]
    assert published and all(c["score_decimals"] == 2 and round(c["score"], 2) == c["score"] for c in published)


def test_the_embedded_models_own_name_is_no_extract_term(public_data: Path, tmp_path: Path) -> None:
    """The appliance's default model is named ``smollm2-135m-embedded``; PubMedQA's abstracts hold "Paraffin-embedded"
    (a capitalised word, so an extract term), and every export of the embedded model's PubMedQA runs was blocked.
    The name is the appliance's own, as a shipped benchmark id is: fixed vocabulary, not data."""
    from medhelm_local.export.bundle import fixed_vocabulary
    from medhelm_local.export.scan import extract_terms, scan_strings, vocabulary_tokens
    from medhelm_local.home import Home
    from medhelm_local.home.config import EMBEDDED_MODEL_NAME
    from medhelm_local.store import Store

    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    assert cli("datasets", "register", "pubmedqa", str(public_data / "pubmedqa")).code == 0
    fixed = fixed_vocabulary()
    with Store.open(Home(cli.home), read_only=True) as store:
        dataset = store.current_dataset("pubmedqa")
        assert dataset is not None
        terms = extract_terms(store, [("pubmedqa", dataset.fingerprint)], min_length=4, vocabulary=set())
        assert "embedded" in terms  # the extract does hold it
        terms = extract_terms(store, [("pubmedqa", dataset.fingerprint)], min_length=4,
                              vocabulary=vocabulary_tokens(fixed))
    strings = [("$.runs[0].model", EMBEDDED_MODEL_NAME), ("$.runs[1].model", "paraffin-7b")]
    _, _, seen = scan_strings("aggregates.json", strings, patterns=[], terms=terms, allowed=None, fixed=fixed)
    assert [f.location for f in seen] == ["$.runs[1].model"]  # a name a user chose is still scanned
