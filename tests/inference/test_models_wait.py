"""`models wait`: a run (the chart's runner init container, its `helm test` pod) starts only when every
replica of every model and judge answers its health check; a server still loading holds it back, a server
that never comes up fails it with exit 1 naming the replica, and nothing off the allowlist is contacted."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.conftest import Cli, cli_env
from tests.httpstub import QuietHandler, stub_server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def loading_server(busy_probes: int) -> Iterator[tuple[str, list[str]]]:
    """A replica still loading its weights: /health answers 503 for the first ``busy_probes`` probes, then
    200. Yields its base URL and the list of paths it was asked for."""
    seen: list[str] = []

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            status = 503 if self.path == "/health" and seen.count("/health") <= busy_probes else 200
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

    with stub_server(Handler) as base_url:
        yield base_url, seen


def _config(tmp_path: Path, models: list[dict[str, object]], judges: list[str]) -> Path:
    """An appliance.yaml outside the home, as the chart mounts it (MEDHELM_CONFIG), with an API key file."""
    key = tmp_path / "api-key"
    key.write_text("k3y-for-tests\n")
    for m in models:
        m.setdefault("api_key_file", str(key))
    path = tmp_path / "appliance.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "models": [
        {"name": "smollm2-135m-embedded", "kind": "embedded", "context_length": 2048}, *models], "judges": judges}))
    return path


def _cli(tmp_path: Path, config: Path) -> Cli:
    # A home that was never initialised: the helm test pod has no volume but the config and the key.
    env = cli_env() | {"MEDHELM_CONFIG": str(config)}
    return Cli(home=tmp_path / "empty-home", env=env)


def test_waits_for_every_replica_of_models_and_judges(tmp_path: Path) -> None:
    with (FakeOpenAIServer() as a, FakeOpenAIServer(api_key="k3y-for-tests", model_id="judge") as judge,
          loading_server(busy_probes=3) as (loading, seen)):
        config = _config(tmp_path, [
            {"name": "llama", "kind": "vllm", "base_urls": [a.base_url, loading]},
            {"name": "judge-a", "kind": "openai-compatible", "base_urls": [judge.base_url]},
        ], ["judge-a"])
        result = _cli(tmp_path, config)("models", "wait", "--timeout", "60", "--interval", "0.5", "--json")
    assert result.code == 0, result.stderr
    payload = result.json()
    assert isinstance(payload, dict) and payload["ok"] is True
    replicas = {r["url"]: r for r in payload["replicas"]}
    late = loading[: -len("/v1")] + "/health"
    assert set(replicas) == {f"{a.base_url[: -len('/v1')]}/health", late, f"{judge.base_url}/models"}
    # The loading replica was asked until it answered 200 (4 probes, 0.5 s apart), and only /health.
    assert replicas[late]["attempts"] == 4 and seen == ["/health"] * 4
    assert replicas[late]["ready_after_s"] >= 1.0
    assert payload["skipped_embedded"] == ["smollm2-135m-embedded"]
    # The judge (not vLLM) was asked /v1/models with its key: the fake server answers 401 without it.
    assert replicas[f"{judge.base_url}/models"]["status"] == 200


def test_a_server_that_never_answers_fails_naming_the_replica(tmp_path: Path) -> None:
    dead = _free_port()
    with FakeOpenAIServer() as up:
        config = _config(tmp_path, [
            {"name": "llama", "kind": "vllm", "base_urls": [up.base_url]},
            {"name": "judge-b", "kind": "vllm", "base_urls": [f"http://127.0.0.1:{dead}/v1"]},
        ], ["judge-b"])
        t0 = time.monotonic()
        result = _cli(tmp_path, config)("models", "wait", "--timeout", "2", "--interval", "0.5", "--json")
        elapsed = time.monotonic() - t0
    assert result.code == 1
    payload = result.json()
    assert isinstance(payload, dict) and payload["ok"] is False
    (down,) = [r for r in payload["replicas"] if not r["ok"]]
    assert down["model"] == "judge-b" and down["url"] == f"http://127.0.0.1:{dead}/health"
    assert down["error"] == "ConnectError" and down["attempts"] >= 2
    assert elapsed >= 2.0
    text = _cli(tmp_path, config)("models", "wait", "--timeout", "1", "--interval", "0.5")
    assert text.code == 1 and "judge-b" in text.stderr + text.stdout and "NOT READY" in text.stdout


def test_wrong_api_key_is_not_ready(tmp_path: Path) -> None:
    with FakeOpenAIServer(api_key="another-key") as server:
        config = _config(tmp_path, [{"name": "m", "kind": "openai-compatible", "base_urls": [server.base_url]}], [])
        result = _cli(tmp_path, config)("models", "wait", "m", "--timeout", "1", "--interval", "0.5", "--json")
    assert result.code == 1
    payload = result.json()
    assert isinstance(payload, dict)
    assert payload["replicas"][0]["status"] == 401 and payload["replicas"][0]["error"] == "HTTP 401"


def test_named_models_only_and_unknown_names_are_bad_input(tmp_path: Path) -> None:
    dead = _free_port()
    with FakeOpenAIServer() as up:
        config = _config(tmp_path, [
            {"name": "llama", "kind": "vllm", "base_urls": [up.base_url]},
            {"name": "other", "kind": "vllm", "base_urls": [f"http://127.0.0.1:{dead}/v1"]},
        ], [])
        cli = _cli(tmp_path, config)
        only = cli("models", "wait", "llama", "--timeout", "5", "--json")
        assert only.code == 0, only.stderr
        payload = only.json()
        assert isinstance(payload, dict) and [r["model"] for r in payload["replicas"]] == ["llama"]
        unknown = cli("models", "wait", "ghost", "--timeout", "1")
        assert unknown.code == 2 and "ghost" in unknown.stderr


def test_an_endpoint_off_the_allowlist_is_refused_before_connecting(tmp_path: Path) -> None:
    config = _config(tmp_path, [{"name": "outside", "kind": "vllm", "base_urls": ["http://203.0.113.7:8000/v1"]}], [])
    t0 = time.monotonic()
    result = _cli(tmp_path, config)("models", "wait", "--timeout", "30")
    assert result.code == 2 and "allowlist" in result.stderr
    assert time.monotonic() - t0 < 20  # refused at once, not after a 30 s timeout


def test_models_wait_does_not_create_the_home(tmp_path: Path) -> None:
    with FakeOpenAIServer() as up:
        config = _config(tmp_path, [{"name": "llama", "kind": "vllm", "base_urls": [up.base_url]}], [])
        result = _cli(tmp_path, config)("models", "wait", "--timeout", "5")
    assert result.code == 0, result.stderr
    assert not (tmp_path / "empty-home" / "store").exists()


@contextmanager
def trickling_server() -> Iterator[str]:
    """A replica that accepts, reads the probe, then sends its status line and headers a byte every 0.2 s,
    never finishing them. Yields its base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100000:
                if stop.is_set():
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.2)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        listener.close()


def test_a_replica_trickling_its_reply_does_not_hold_models_wait_past_its_timeout(tmp_path: Path) -> None:
    """httpx's timeout bounds each read; a probe's must bound the whole probe, or `models wait --timeout 2`
    waits for as long as the server trickles (hours here)."""
    with trickling_server() as slow:
        config = _config(tmp_path, [{"name": "llama", "kind": "vllm", "base_urls": [slow]}], [])
        t0 = time.monotonic()
        result = _cli(tmp_path, config)("models", "wait", "--timeout", "2", "--interval", "0.5", "--json",
                                        timeout=60)
        elapsed = time.monotonic() - t0
    assert result.code == 1
    payload = result.json()
    assert isinstance(payload, dict) and payload["ok"] is False
    assert elapsed < 30
