"""Prompts that fit the model (issue 14 §3), through the runner: against a fake server that serves a tokenizer
and refuses, like vLLM, any prompt + max_tokens beyond its context, long prompts are cut to fit (the designated
field, counted by the server's own tokenizer), the cut is recorded per instance, and the leaderboard shows the
truncated share. Without a tokenize endpoint the conservative estimate is used and the manifest says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medhelm_local.application.evaluation import evaluate
from medhelm_local.home.config import BackendKind
from medhelm_local.inference.client import ChatClient
from medhelm_local.inference.tokens import open_counter
from medhelm_local.records import Instance
from medhelm_local.runner.fitting import PromptFitter
from medhelm_local.store import Store
from medhelm_local.testing.fake_openai import FakeOpenAIServer, Send, _respond, fake_chat_tokens, hash_responder
from tests.conftest import cli_env
from tests.runner.helpers import app, make_home, outcomes, quiet, register, synthetic_instances

CONTEXT = 512


def _instances(public_data: Path) -> list[Instance]:
    """Real PubMedQA abstracts, five of them made longer than the context by repeating them."""
    raw = json.loads((public_data / "pubmedqa" / "ori_pqal.json").read_text())
    out = []
    for i, (pmid, row) in enumerate(sorted(raw.items())[:12]):
        context = " ".join(row["CONTEXTS"])
        if i % 2 == 0 and i < 10:
            context = " ".join([context] * 6)
        label = row["final_decision"]
        out.append(Instance(benchmark="pubmedqa", id=pmid, fields={"context": context, "question": row["QUESTION"]},
                            references=[label], label=label))
    return out


def _too_long(instances: list[Instance]) -> set[str]:
    """The instances whose whole prompt does not fit (as the fake server counts it)."""
    from medhelm_local.benchmarks.registry import shipped_spec
    from medhelm_local.prompts.build import build_request

    spec = shipped_spec("pubmedqa")
    return {i.id for i in instances
            if fake_chat_tokens([m.model_dump() for m in build_request(spec, i).messages]) + 8 > CONTEXT}


def _truncations(home_root: Path, run_id: str) -> dict[str, tuple[str, int, int, int, int]]:
    from medhelm_local.home import Home

    with Store.open(Home(home_root), read_only=True) as store:
        rows = store.conn.execute(
            "SELECT instance_id, field, field_chars, removed_chars, removed_tokens, prompt_tokens "
            "FROM runner_truncations WHERE run_id = ?", [run_id]).fetchall()
    return {str(r[0]): (str(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows}


class _OvercountingServer(FakeOpenAIServer):
    """A server whose tokenizer counts a prompt beyond its context as more tokens than any prompt has (2**40)."""

    async def _tokenize(self, path: str, body: bytes, send: Send) -> None:
        if fake_chat_tokens(json.loads(body).get("messages") or []) > CONTEXT:
            await _respond(send, 200, {"count": 2**40, "max_model_len": CONTEXT})
            return
        await super()._tokenize(path, body, send)


def test_a_count_beyond_any_prompt_is_a_recorded_tokenizer_failure(tmp_path: Path, public_data: Path) -> None:
    """A count of 2**40 tokens was taken as a measurement: the cut's record could not be stored and the run ended
    with 'internal error (ConstraintException)'. Now it is no count (tokenize_invalid_json): the prompts it was
    given for are recorded as failed, never sent, and the others are answered."""
    instances = _instances(public_data)
    with _OvercountingServer(responder=hash_responder(), tokenizer="vllm", context_length=CONTEXT) as server:
        home = make_home(tmp_path / "home", [server.base_url], extra={"context_length": CONTEXT})
        register(home, instances)
        outcome = evaluate(app(home), quiet(backoff_base_s=0.001))
    errors = {instance_id: error for _, instance_id, _, error in outcomes(home, outcome.run.run_id)}
    assert {i for i, error in errors.items() if error is not None} == _too_long(instances)
    assert set(errors.values()) == {None, "tokenize_invalid_json"}
    assert _truncations(home.root, outcome.run.run_id) == {}


@pytest.mark.parametrize("tokenizer", ["vllm", "llama.cpp"])
def test_long_prompts_are_cut_to_fit_and_recorded(tmp_path: Path, public_data: Path, tokenizer: str) -> None:
    instances = _instances(public_data)
    with FakeOpenAIServer(responder=hash_responder(), tokenizer=tokenizer, context_length=CONTEXT,
                          record_bodies=True) as server:
        home = make_home(tmp_path / "home", [server.base_url], extra={"context_length": CONTEXT})
        register(home, instances)
        outcome = evaluate(app(home), quiet())
    run_id = outcome.run.run_id
    # Every instance was answered: none was refused by the server for its length.
    assert server.context_rejections == 0
    assert [o[3] for o in outcomes(home, run_id)] == [None] * len(instances)
    assert all(fake_chat_tokens(b["messages"]) + b["max_tokens"] <= CONTEXT for b in server.bodies)
    # The long ones, and only they, were cut, and the cut is recorded: field, how much, what is left.
    cut = _truncations(home.root, run_id)
    long_ids = _too_long(instances)
    assert len(long_ids) >= 5 and set(cut) == long_ids
    for field, field_chars, removed_chars, removed_tokens, prompt_tokens in cut.values():
        assert field == "context" and 0 < removed_chars < field_chars and removed_tokens > 0
        assert prompt_tokens + 8 <= CONTEXT  # pubmedqa's max_tokens
    sent = {b["messages"][-1]["content"] for b in server.bodies}
    for instance in instances:
        if instance.id in long_ids:
            assert not any(instance.fields["context"] in text for text in sent)
            assert any(instance.fields["context"][:300] in text for text in sent)  # the start is kept
        else:
            assert any(instance.fields["context"] in text for text in sent)  # short ones go out whole
    manifest = outcome.run.manifest
    assert manifest["context"]["context_length"] == CONTEXT
    assert manifest["context"]["tokens"]["method"] == tokenizer
    assert outcome.report is not None and outcome.report.truncated == len(long_ids)
    # The store keeps no copy of the prompts, only their hashes: the console rebuilds each prompt from the run's
    # spec, the instance and its recorded cut, and what it shows is exactly what the server received.
    from medhelm_local.webconsole.data import instances as console_instances

    rows, total = console_instances(home, run_id, "pubmedqa")
    assert total == len(instances) and {r.prompt_source for r in rows} == {"rebuilt"}
    shown = sorted(json.dumps(r.messages) for r in rows)
    received = sorted(json.dumps([{"role": m["role"], "content": m["content"]} for m in b["messages"]])
                      for b in server.bodies)
    assert shown == received
    assert {r.instance_id for r in rows if r.cut} == long_ids
    # A prompt rebuilt differently from what was sent (the prompt code changed since the run) is flagged.
    with Store.open(home) as store:
        store.conn.execute("UPDATE requests SET request_hash = 'not-what-was-sent' WHERE run_id = ? "
                           "AND instance_id = ?", [run_id, rows[0].instance_id])
    flagged = {r.instance_id: r.prompt_source for r in console_instances(home, run_id, "pubmedqa")[0]}
    assert flagged.pop(rows[0].instance_id) == "differs" and set(flagged.values()) == {"rebuilt"}


def test_leaderboard_reports_the_truncated_share(tmp_path: Path, public_data: Path) -> None:
    import subprocess
    import sys

    instances = _instances(public_data)
    with FakeOpenAIServer(responder=hash_responder(), tokenizer="vllm", context_length=CONTEXT) as server:
        home = make_home(tmp_path / "home", [server.base_url], extra={"context_length": CONTEXT})
        register(home, instances)
        evaluate(app(home), quiet())
    base = [sys.executable, "-m", "medhelm_local.cli", "--home", str(home.root), "leaderboard"]
    as_json = subprocess.run([*base, "--json"], capture_output=True, text=True, env=cli_env(), timeout=300)
    assert as_json.returncode == 0, as_json.stderr
    (row,) = json.loads(as_json.stdout)
    share = len(_too_long(instances)) / len(instances)
    assert row["benchmarks"]["pubmedqa"]["truncated_share"] == pytest.approx(share)
    table = subprocess.run(base, capture_output=True, text=True, env=cli_env(), timeout=300)
    assert f"prompts truncated to fit: {share:.0%}" in table.stdout + table.stderr
    # The console's leaderboard says it beside the score too (it showed the score, CI and n alone, so a score on
    # cut prompts read as one on whole prompts).
    from medhelm_local.home.config import ConsoleRole
    from tests.console.pages import page_as

    page = page_as(home, "/leaderboard", ConsoleRole.INFORMATICS)
    scores = page.text.split('id="scores"')[1].split("</table>")[0]
    assert f"prompts cut to fit: {share:.0%}" in scores
    # `runs show` says per benchmark how many prompts were cut and by how much.
    (run_id,) = [r["run_id"] for r in json.loads(subprocess.run(
        [*base[:-1], "runs", "list", "--json"], capture_output=True, text=True, env=cli_env(), timeout=300).stdout)]
    shown = json.loads(subprocess.run([*base[:-1], "runs", "show", run_id, "--json"], capture_output=True, text=True,
                                      env=cli_env(), timeout=300).stdout)
    cut = shown["truncated"]["pubmedqa"]
    assert cut["field"] == "context" and cut["prompts"] == len(_too_long(instances))
    assert cut["removed_tokens"] >= cut["max_removed_tokens"] > 0
    assert shown["context"]["context_length"] == CONTEXT


def test_without_a_tokenize_endpoint_the_estimate_fits_and_the_manifest_says_so(tmp_path: Path,
                                                                              public_data: Path) -> None:
    instances = _instances(public_data)
    with FakeOpenAIServer(responder=hash_responder(), context_length=CONTEXT) as server:
        home = make_home(tmp_path / "home", [server.base_url], extra={"context_length": CONTEXT})
        register(home, instances)
        outcome = evaluate(app(home), quiet())
    assert outcome.run.manifest["context"]["source"] == "config"
    tokens = outcome.run.manifest["context"]["tokens"]
    assert tokens["method"] == "estimate" and tokens["exact"] is False and "no tokenize endpoint" in tokens["note"]
    assert server.context_rejections == 0
    assert [o[3] for o in outcomes(home, outcome.run.run_id)] == [None] * len(instances)
    assert set(_truncations(home.root, outcome.run.run_id)) >= _too_long(instances)


def test_server_limit_lowers_an_unset_context_length(tmp_path: Path) -> None:
    """A model configured without context_length takes the server's own limit (vLLM's max_model_len)."""
    with FakeOpenAIServer(responder=hash_responder(), tokenizer="vllm", context_length=300) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(6, context_chars=3000))
        outcome = evaluate(app(home), quiet())
    context = outcome.run.manifest["context"]
    assert context["context_length"] == 300 and context["source"] == "server" and context["configured"] is None
    assert server.context_rejections == 0
    assert [o[3] for o in outcomes(home, outcome.run.run_id)] == [None] * 6


async def test_prompt_without_a_designated_field_is_prompt_too_long() -> None:
    from medhelm_local.benchmarks.registry import shipped_spec
    from medhelm_local.inference.client import RequestFailed
    from medhelm_local.prompts.build import build_request

    spec = shipped_spec("medqa")
    assert spec.truncate is None
    instance = Instance(benchmark="medqa", id="1", fields={"question": "A 45-year-old man " * 400,
                                                           "options": "A. x\nB. y\nC. z\nD. w"})
    with FakeOpenAIServer(tokenizer="vllm", context_length=CONTEXT) as server:
        async with ChatClient([server.base_url], server.model_id, ["http://127.0.0.1"]) as client:
            fitter = PromptFitter(await open_counter(client, BackendKind.VLLM), CONTEXT)
            request = build_request(spec, instance)
            assert not fitter.fits_unchecked(request)
            with pytest.raises(RequestFailed) as raised:
                await fitter.fit(spec, instance, request)
    assert raised.value.category == "prompt_too_long"


def test_context_length_unset_and_unreported_is_the_default_and_says_so() -> None:
    from medhelm_local.home.config import ModelEndpoint
    from medhelm_local.inference.tokens import EstimateCounter
    from medhelm_local.runner.fitting import context_entry

    unset = ModelEndpoint(name="m", base_urls=["http://127.0.0.1:9/v1"])
    entry = context_entry(unset, EstimateCounter())
    assert entry["context_length"] == 2048 and entry["source"] == "default" and entry["configured"] is None
    explicit = ModelEndpoint(name="m", base_urls=["http://127.0.0.1:9/v1"], context_length=8192)
    assert context_entry(explicit, EstimateCounter())["source"] == "config"


def test_models_add_without_context_length_leaves_it_to_the_server(tmp_path: Path) -> None:
    """The saved appliance.yaml keeps an unset context_length unset (a default written back as 2048 would cut
    every prompt of a 128k-token vLLM model to 2,048 tokens)."""
    import subprocess
    import sys

    from medhelm_local.home import Home

    base = [sys.executable, "-m", "medhelm_local.cli", "--home", str(tmp_path / "home")]
    for args in (["init"], ["models", "add", "big", "--base-url", "http://127.0.0.1:9/v1"],
                 ["models", "add", "small", "--base-url", "http://127.0.0.1:9/v1", "--context-length", "4096"]):
        done = subprocess.run([*base, *args], capture_output=True, text=True, env=cli_env(), timeout=300)
        assert done.returncode == 0, done.stderr
    config = Home(tmp_path / "home").config
    assert config.model("big").context_length is None and config.model("big").context_tokens == 2048
    assert config.model("small").context_length == 4096


def test_a_benchmark_whose_reply_fills_the_context_is_refused_before_the_run(tmp_path: Path) -> None:
    from medhelm_local.benchmarks.registry import shipped_spec
    from medhelm_local.errors import BadInputError

    max_tokens = shipped_spec("pubmedqa").max_tokens
    with FakeOpenAIServer(responder=hash_responder(), tokenizer="vllm", context_length=max_tokens) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(5))
        fills = rf"pubmedqa \(max_tokens {max_tokens}\).*no prompt would fit"
        with pytest.raises(BadInputError, match=fills) as refused:
            evaluate(app(home), quiet())
        # the model exists: its context is changed with models update (models add refuses its name)
        assert "`models update fake --context-length N`" in str(refused.value)
        sent = server.stats()["completions_sent"]
    assert sent == 0
    with Store.open(home, read_only=True) as store:
        assert store.list_runs() == []  # nothing created: no run, no plan, no audit of a start
