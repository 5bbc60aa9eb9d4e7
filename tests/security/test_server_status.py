"""The HTTP status a model server answers with is a number it chooses: any from 100 to 999. Each failure's category
(``http_689``) kept it as sent, in the store, the run's manifest, ``run --json``, ``runs show --json`` and the logs:
a hostile server, which sees every prompt, could spell one in the statuses it picks, some 10 bits a request. A
failure keeps the status only where the appliance tells it apart, else its class; retrying is unchanged."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path

import pytest

from medhelm_local.application.evaluation import evaluate
from medhelm_local.inference.client import RETRYABLE_STATUS, ChatClient, RequestFailed
from medhelm_local.inference.server_text import RECORDED_STATUSES, recorded_status
from medhelm_local.inference.tokens import VllmCounter
from medhelm_local.logs import configure_logging
from medhelm_local.records import ChatMessage, InferenceRequest
from medhelm_local.scoring.jury_hints import failure_hint
from medhelm_local.store import Store
from tests.httpstub import QuietHandler, stub_server
from tests.runner.helpers import app, cli_argv, cli_env, make_home, outcomes, quiet, register, synthetic_instances

# statuses a category keeps, and the class any other is recorded as
KEPT = {400: "http_400", 401: "http_401", 404: "http_404", 408: "http_408", 429: "http_429", 500: "http_500",
        503: "http_503", 504: "http_504"}
CLASSED = {418: "http_4xx_other", 451: "http_4xx_other", 501: "http_5xx_other", 599: "http_5xx_other",
           689: "http_other", 999: "http_other", 204: "http_other", 302: "http_other"}


class StatusHandler(QuietHandler):
    """Answers a completion with the status its base URL names (``/s689/v1``); ``/v1/models`` with one model."""

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}).encode()
        self.send_response(200 if self.path.endswith("/v1/models") else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        match = re.match(r"/s(\d+)/", self.path)
        status = int(match.group(1)) if match and self.path.endswith("/chat/completions") else 404
        body = b'{"error": "Doe Jane MRN 00123456"}'
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if status >= 200 and status not in (204, 304):
            self.wfile.write(body)


def test_every_status_is_recorded_from_a_fixed_vocabulary() -> None:
    recorded = {recorded_status(status) for status in range(100, 1000)}
    assert recorded == {str(s) for s in RECORDED_STATUSES} | {"4xx_other", "5xx_other", "other"}
    assert len(recorded) == 18  # about 4 bits a failure, not 10
    assert RETRYABLE_STATUS <= RECORDED_STATUSES  # every status treated apart stays told apart
    assert failure_hint("http_4xx_other") != "unknown failure category"
    assert failure_hint("http_other") != "unknown failure category"


async def _attempts(root: str, statuses: list[int]) -> dict[int, tuple[str | None, int]]:
    async def record(_seconds: float) -> None:
        pass

    results = {}
    for status in statuses:
        base = f"{root}/s{status}/v1"
        async with ChatClient([base], "fake-model", ["http://127.0.0.1"], timeout_s=5, sleep=record) as client:
            result = await client.complete(InferenceRequest(benchmark="b", instance_id="1", max_tokens=1, messages=[
                ChatMessage(role="user", content="question")]), max_retries=2, backoff_base_s=0.0)
        results[status] = (result.error, result.attempts)
    return results


def test_a_status_is_its_category_only_where_told_apart_and_retried_as_before() -> None:
    with stub_server(StatusHandler) as base:
        root = base.removesuffix("/v1")
        results = asyncio.run(_attempts(root, [*KEPT, *CLASSED]))
    for status, category in (KEPT | CLASSED).items():
        error, attempts = results[status]
        assert error == category, status
        assert attempts == (3 if status in RETRYABLE_STATUS else 1), status  # retried as its real status says


def test_a_tokenizer_status_is_classed_too() -> None:
    async def count(root: str, status: int) -> str:
        async with ChatClient([f"{root}/v1"], "fake-model", ["http://127.0.0.1"], timeout_s=5) as client:
            try:
                await VllmCounter(client, f"{root}/s{status}", "fake-model").count(
                    [ChatMessage(role="user", content="q")])
            except RequestFailed as failure:
                return failure.category
        return "none"

    class TokenizeStatus(StatusHandler):
        def do_POST(self) -> None:
            self.path = self.path.replace("/tokenize", "/v1/chat/completions")
            super().do_POST()

    with stub_server(TokenizeStatus) as base:
        root = base.removesuffix("/v1")
        assert asyncio.run(count(root, 689)) == "tokenize_http_other"
        assert asyncio.run(count(root, 418)) == "tokenize_http_4xx_other"
        assert asyncio.run(count(root, 503)) == "tokenize_http_503"


def test_a_chosen_status_never_reaches_the_runs_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run against a server answering 689: its store, manifest, logs and ``runs show --json`` said ``http_689``;
    now ``http_other``."""
    configure_logging("DEBUG", json_lines=True, force=True)
    try:
        with stub_server(StatusHandler) as base:
            home = make_home(tmp_path / "home", [base.replace("/v1", "/s689/v1")], max_retries=1)
            register(home, synthetic_instances(3))
            capsys.readouterr()
            outcome = evaluate(app(home), quiet())
        captured = capsys.readouterr()
    finally:
        configure_logging(force=True)
    run_id = outcome.run.run_id
    assert [error for *_, error in outcomes(home, run_id)] == ["http_other"] * 3
    with Store.open(home, read_only=True) as store:
        run = store.get_run(run_id)
    assert run is not None
    shown = subprocess.run(cli_argv(home, "runs", "show", run_id, "--json"), capture_output=True, text=True,
                           env=cli_env(), check=True).stdout
    assert "http_other" in shown
    for recorded in (json.dumps(run.manifest), shown, captured.out + captured.err, home.audit_path.read_text()):
        assert "http_689" not in recorded


def _answering(status: int) -> type[QuietHandler]:
    class Answering(QuietHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

    return Answering


def test_a_chosen_status_is_classed_in_models_wait_the_console_and_serve_vllm() -> None:
    """``models wait --json`` (the runner's init container log) showed ``"status": 689, "error": "HTTP 689"``, the
    console's System page ``HTTP 689 from /models``, ``serve vllm``'s refusal ``answered HTTP 689``."""
    from medhelm_local.home.config import BackendKind, ModelEndpoint
    from medhelm_local.inference import vllm
    from medhelm_local.inference.egress import EgressPolicy
    from medhelm_local.inference.readiness import wait_for_models
    from medhelm_local.webconsole.pages_it import _probe

    local = EgressPolicy.of(["http://127.0.0.1"])
    for status, shown in ((689, "HTTP other"), (418, "HTTP 4xx_other"), (401, "HTTP 401")):
        with stub_server(_answering(status)) as base:
            endpoint = ModelEndpoint(name="m", kind=BackendKind.OPENAI_COMPATIBLE, base_urls=[base])
            (health,) = wait_for_models([endpoint], local, timeout_s=0, sleep=lambda _s: None)
            probe = _probe(local, "m", base, endpoint)
            port = int(base.rsplit(":", 1)[1].split("/")[0])
            spec = vllm.VllmSpec(weights=Path("/models/m"), served_model_name="m", port=port)
            with pytest.raises(vllm.VllmError) as refused:
                vllm.VllmProcess(spec, ["vllm"], {}, None).describe()
        assert (health.status, health.error) == (status if status == 401 else None, shown)
        assert probe.detail == f"{shown} from /models"
        assert re.search(rf"answered {shown}[: ]", str(refused.value))
