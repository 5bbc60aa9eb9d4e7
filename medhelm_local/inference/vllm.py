"""vLLM managed by the appliance: the ``vllm serve`` command, its environment, startup and what it reports.

* Weights come from a local path; nothing is downloaded (``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``) and
  no usage statistics are sent (``VLLM_NO_USAGE_STATS=1``, ``DO_NOT_TRACK=1``).
* The API key travels in ``VLLM_API_KEY`` (read by vLLM), never on the command line where ``ps`` shows it.
* Prompts are not logged. Since vLLM 0.10.1 request logging is off unless ``--enable-log-requests`` is given
  (``--disable-log-requests`` was deprecated then and later removed); older versions log requests unless
  ``--disable-log-requests`` is given. The installed vLLM is probed (``vllm --version``) and the right flag, or
  none, is used; flags that would log prompts or outputs are refused. ``VLLM_LOGGING_LEVEL`` is kept at INFO:
  recent versions log prompt details at DEBUG.
* The parallel sizes (tensor, pipeline, data) come from the spec, as the Helm chart's come from its values: an
  extra argument setting one is refused, since vLLM would take it over ours without a word.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from medhelm_local.errors import BadInputError, ConfigError, MedhelmError
from medhelm_local.home.config import BackendKind, ModelEndpoint
from medhelm_local.inference.backends import served_models, server_root
from medhelm_local.inference.lane import MAX_RESPONSE_BYTES, ResponseTooLarge
from medhelm_local.inference.server_text import recorded_models, recorded_status, recorded_version
from medhelm_local.inference.small_reply import get_small
from medhelm_local.patterns import SERVED_MODEL_NAME

OFFLINE_ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "VLLM_LOGGING_LEVEL": "INFO",
}
# Environment that must not reach vLLM: prompt logging switches, and proxies (it never needs the network).
DROPPED_ENV = ("VLLM_DEBUG_LOG_API_SERVER_REQUEST_PROMPT", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
               "https_proxy", "all_proxy", "VLLM_API_KEY")
FORBIDDEN_ARGS = ("--enable-log-requests", "--enable-log-outputs", "--api-key")
# `--config FILE` reads any flag (a forbidden one included) from a YAML file: refused too.
FORBIDDEN_ANYWHERE = (*FORBIDDEN_ARGS, "--config")
# The parallel-size flags the spec sets itself, long and short (vLLM's -tp, -pp, -dp).
PARALLEL_FLAGS = {
    "--tensor-parallel-size": "-tp",
    "--pipeline-parallel-size": "-pp",
    "--data-parallel-size": "-dp",
}
LOG_REQUESTS_DEFAULT_OFF = (0, 10, 1)  # vllm-project/vllm#21739
HEALTH_TIMEOUT_S = 2.0  # one /health probe while vLLM starts, in all
IDENTITY_TIMEOUT_S = 10.0  # reading /version or /v1/models, in all


class VllmError(MedhelmError):
    """vLLM could not be started, or did not become healthy."""


class VllmSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weights: Path
    served_model_name: str = Field(pattern=SERVED_MODEL_NAME)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    pipeline_parallel_size: int = Field(default=1, ge=1, le=64)
    data_parallel_size: int = Field(default=1, ge=1, le=64)
    max_model_len: int | None = Field(default=None, ge=256)
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    dtype: str | None = None
    extra_args: list[str] = Field(default_factory=list)

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}/v1"


def spec_from_endpoint(endpoint: ModelEndpoint, **overrides: Any) -> VllmSpec:
    """A ``kind: vllm`` model of appliance.yaml, with ``weights_path``, as a serve spec."""
    if endpoint.kind != BackendKind.VLLM:
        raise BadInputError(f"model {endpoint.name} is of kind {endpoint.kind.value}, not vllm")
    if endpoint.weights_path is None:
        raise BadInputError(f"model {endpoint.name}: weights_path is required to serve it with vLLM")
    url = httpx.URL(endpoint.base_urls[0])
    values: dict[str, Any] = {
        "weights": endpoint.weights_path, "served_model_name": endpoint.model_id,
        "host": url.host or "127.0.0.1", "port": url.port or 8000, "max_model_len": endpoint.context_tokens,
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    return VllmSpec(**values)


def parse_version(text: str) -> tuple[int, int, int] | None:
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def probe_version(executable: str, *, timeout_s: float = 300.0) -> str | None:
    """``vllm --version`` of the installed vLLM (importing it takes a while), or None."""
    try:
        done = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=timeout_s,
                              env=serve_env(None), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in done.stdout.splitlines() if parse_version(line)]
    return lines[-1] if done.returncode == 0 and lines else None


def log_request_flags(version: str | None) -> list[str]:
    """The flag that keeps prompts out of vLLM's log for this version (none needed since 0.10.1)."""
    parsed = parse_version(version) if version else None
    if parsed is not None and parsed < LOG_REQUESTS_DEFAULT_OFF:
        return ["--disable-log-requests"]
    return []


def matching_flag(arg: str, flags: dict[str, str | None]) -> str | None:
    """The flag of ``flags`` (long name -> short form or None) that ``arg`` stands for, as vLLM's parser reads it:
    underscores as dashes (``--enable_log_requests``), an unambiguous abbreviation (``--enable-log-req``) and a
    prefix of the short form (``-tp``, ``-t``) included; ``=value`` attached or not."""
    name = arg.split("=", 1)[0].replace("_", "-")
    if name.startswith("--"):
        if len(name) <= 2:
            return None
        return next((flag for flag in flags if flag.startswith(name)), None)
    if name.startswith("-") and len(name) > 1:
        return next((flag for flag, short in flags.items() if short is not None and short.startswith(name)), None)
    return None


def forbidden_arg(arg: str) -> str | None:
    """The forbidden flag ``arg`` stands for (logging prompts or outputs, the API key, a flags file), or None."""
    return matching_flag(arg, dict.fromkeys(FORBIDDEN_ANYWHERE))


def parallel_flag(arg: str) -> str | None:
    """The parallel-size flag ``arg`` sets (``--tensor-parallel-size`` for ``-tp`` or ``--tensor_par``), or None."""
    return matching_flag(arg, dict(PARALLEL_FLAGS))


def check_extra_args(extra_args: list[str]) -> None:
    """Refuse an extra argument vLLM would read as a forbidden flag or as one of the parallel sizes."""
    for arg in extra_args:
        name = arg.split("=", 1)[0]
        flag = forbidden_arg(arg)
        if flag is not None:
            raise BadInputError(f"extra vLLM argument {name} ({flag}) is refused: it would log prompts or outputs, "
                                "put the API key on the command line, or read other flags from a file")
        flag = parallel_flag(arg)
        if flag is not None:
            raise BadInputError(f"extra vLLM argument {name} ({flag}) is refused: serve vllm passes the parallel "
                                "sizes itself and vLLM would take this one over them without a word; use serve "
                                f"vllm's {flag} option instead")


def build_command(spec: VllmSpec, *, version: str | None, executable: str = "vllm") -> list[str]:
    check_extra_args(spec.extra_args)
    command = [
        executable, "serve", str(spec.weights),
        "--served-model-name", spec.served_model_name,
        "--host", spec.host,
        "--port", str(spec.port),
        "--tensor-parallel-size", str(spec.tensor_parallel_size),
    ]
    # Only above 1, as the chart does: a command without them stays the same (and so does its recorded digest).
    if spec.pipeline_parallel_size > 1:
        command += ["--pipeline-parallel-size", str(spec.pipeline_parallel_size)]
    if spec.data_parallel_size > 1:
        command += ["--data-parallel-size", str(spec.data_parallel_size)]
    command += ["--gpu-memory-utilization", str(spec.gpu_memory_utilization)]
    if spec.max_model_len is not None:
        command += ["--max-model-len", str(spec.max_model_len)]
    if spec.dtype:
        command += ["--dtype", spec.dtype]
    return command + log_request_flags(version) + list(spec.extra_args)


def serve_env(api_key: str | None, base: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in DROPPED_ENV}
    env.update(OFFLINE_ENV)
    if api_key:
        env["VLLM_API_KEY"] = api_key
    return env


def command_sha256(command: list[str]) -> str:
    return hashlib.sha256("\0".join(command).encode()).hexdigest()


def find_vllm() -> str:
    path = shutil.which("vllm")
    if path is None:
        raise VllmError("vllm is not installed on this host (it runs on GPU hosts: pip install "
                        "'medhelm-local[vllm]' or use the appliance's GPU image)")
    return path


def check_weights(spec: VllmSpec) -> None:
    if not spec.weights.exists():
        raise BadInputError(f"weights path {spec.weights} does not exist (vLLM serves local weights only)")


def read_api_key(env_name: str | None, file: Path | None) -> str | None:
    """The key from an environment variable or a file (a mounted Secret); its value is never printed."""
    if env_name:
        value = os.environ.get(env_name)
        if not value:
            raise ConfigError(f"--api-key-env: environment variable {env_name} is not set")
        return value
    if file is not None:
        try:
            value = file.read_text(encoding="utf-8").strip()
        except OSError:
            raise ConfigError(f"--api-key-file: cannot read {file}") from None
        if not value:
            raise ConfigError(f"--api-key-file: {file} is empty")
        return value
    return None


class VllmProcess:
    """A started ``vllm serve``: wait until healthy, read what it reports, stop it."""

    def __init__(self, spec: VllmSpec, command: list[str], env: dict[str, str], api_key: str | None) -> None:
        self.spec = spec
        self.command = command
        self.env = env
        self.api_key = api_key
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # vLLM's own output (startup, throughput stats) goes to our stderr: with request logging off it holds
        # no prompt, and on Kubernetes it belongs in the pod's log.
        self.proc = subprocess.Popen(self.command, env=self.env, stdin=subprocess.DEVNULL, stdout=2,
                                     start_new_session=True)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def wait_healthy(self, timeout_s: float) -> None:
        assert self.proc is not None
        root = server_root(self.spec.base_url)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise VllmError(f"vllm serve exited during startup (exit code {self.proc.returncode}); see its "
                                "output above")
            try:
                if get_small(f"{root}/health", timeout_s=HEALTH_TIMEOUT_S)[0] == 200:
                    return
            except (httpx.HTTPError, TimeoutError, ResponseTooLarge):
                pass
            time.sleep(0.5)
        self.stop()
        raise VllmError(f"vllm serve did not become healthy within {timeout_s:.0f}s")

    def _get_json(self, url: str, what: str, *, headers: dict[str, str] | None = None) -> Any:
        """A small JSON document from the started server, read up to ``MAX_RESPONSE_BYTES`` and for
        ``IDENTITY_TIMEOUT_S`` in all (``small_reply``); VllmError (never a silent None) when it cannot be read."""
        try:
            status, body = get_small(url, timeout_s=IDENTITY_TIMEOUT_S, headers=headers)
        except httpx.HTTPError as error:
            raise VllmError(f"vLLM's {what} could not be read from {url} ({type(error).__name__}): its identity "
                            "cannot be checked") from None
        except TimeoutError:
            raise VllmError(f"vLLM's {what} at {url} was not read within {IDENTITY_TIMEOUT_S:.0f}s: its identity "
                            "cannot be checked") from None
        except ResponseTooLarge:
            raise VllmError(f"vLLM's {what} at {url} is longer than {MAX_RESPONSE_BYTES >> 20} MiB: its identity "
                            "cannot be checked") from None
        if status != 200:
            hint = " (is the API key the one vLLM was started with?)" if status in (401, 403) else ""
            raise VllmError(f"vLLM's {what} at {url} answered HTTP {recorded_status(status)}{hint}: its identity "
                            "cannot be checked")
        try:
            return json.loads(body)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's recursion limit
            raise VllmError(f"vLLM's {what} at {url} is not JSON: its identity cannot be checked") from None

    def describe(self) -> dict[str, Any]:
        """What the started server reports: its version and the models it serves, which must include ours.

        Both are its identity (recorded with the server and in the audit trail): a server that does not report
        them is refused (VllmError), not described as if it had."""
        root = server_root(self.spec.base_url)
        body = self._get_json(f"{root}/version", "version")
        version = body.get("version") if isinstance(body, dict) else None
        if not isinstance(version, str) or not version:
            raise VllmError(f"vLLM's version at {root}/version carries no version: its identity cannot be checked")
        listing = self._get_json(f"{self.spec.base_url}/models", "model list", headers=self._headers())
        listed = served_models(listing)
        if listed is None:
            raise VllmError(f"vLLM's model list at {self.spec.base_url}/models has no data: its identity cannot be "
                            "checked")
        # Both are the server's own text: recorded (store, audit, messages) only as server_text allows.
        models = recorded_models(listed, {self.spec.served_model_name})
        if self.spec.served_model_name not in listed:
            raise ConfigError(f"vLLM serves {models}, not {self.spec.served_model_name!r}")
        return {"base_url": self.spec.base_url, "version": recorded_version(version), "models": models}

    def wait(self) -> int:
        assert self.proc is not None
        return self.proc.wait()

    def stop(self, timeout_s: float = 30.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
