"""``serve``: model servers managed by the appliance (vLLM on a GPU host)."""

from __future__ import annotations

import signal
import sys
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

import typer

from medhelm_local.audit import audit_event
from medhelm_local.console import emit_json, info
from medhelm_local.context import app_context
from medhelm_local.errors import BadInputError
from medhelm_local.inference import vllm as v
from medhelm_local.inference.backends import resolve_api_key
from medhelm_local.store import runs as runs_db

NAME = "serve"
HELP = "Start local model servers (vLLM on a GPU host) and the web console."
app = typer.Typer(no_args_is_help=True)


@app.command("vllm")
def vllm(
    ctx: typer.Context,
    model: str | None = typer.Option(None, "--model", help="A `kind: vllm` model of appliance.yaml with "
                                     "weights_path (its URL gives host and port, context_length the max length)."),
    weights: Path | None = typer.Option(None, "--weights", help="Local weights directory (instead of --model)."),
    served_model_name: str | None = typer.Option(None, "--served-model-name", help="Model id clients ask for."),
    host: str | None = typer.Option(None, "--host", help="Listen address [default: 127.0.0.1]."),
    port: int | None = typer.Option(None, "--port", min=1, max=65535, help="Port [default: 8000]."),
    tensor_parallel_size: int | None = typer.Option(
        None, "--tensor-parallel-size", min=1, max=64,
        help="GPUs each layer is split over [default: 1]. vLLM uses tensor x pipeline x data parallel size GPUs."),
    pipeline_parallel_size: int | None = typer.Option(
        None, "--pipeline-parallel-size", min=1, max=64,
        help="Stages the layers are split into, each on --tensor-parallel-size GPUs [default: 1]."),
    data_parallel_size: int | None = typer.Option(
        None, "--data-parallel-size", min=1, max=64,
        help="Copies of the model served, each on tensor x pipeline parallel size GPUs [default: 1]."),
    max_model_len: int | None = typer.Option(None, "--max-model-len", min=256, help="Context length."),
    gpu_memory_utilization: float | None = typer.Option(None, "--gpu-memory-utilization", min=0.05, max=1.0,
                                                        help="Fraction of GPU memory vLLM may use [default: 0.9]."),
    dtype: str | None = typer.Option(None, "--dtype", help="Weights dtype (auto, bfloat16, float16 ...)."),
    api_key_env: str | None = typer.Option(None, "--api-key-env", help="Environment variable holding the API key."),
    api_key_file: Path | None = typer.Option(None, "--api-key-file", help="File holding the API key (a Secret)."),
    extra_arg: list[str] = typer.Option([], "--extra-arg", help="Extra `vllm serve` argument (repeatable); "
                                        "flags that log prompts or outputs, --api-key, --config and the parallel "
                                        "sizes (-tp, -pp, -dp: use the options above) are refused."),
    startup_timeout: float = typer.Option(1800.0, "--startup-timeout", min=1.0, help="Seconds to wait on /health."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the command and environment names; start nothing."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Serve local weights with vLLM: offline, no usage stats, prompts never logged, key from a secret."""
    app_ctx = app_context(ctx)
    config = app_ctx.home.config
    endpoint = config.model(model) if model else None
    overrides: dict[str, Any] = {"served_model_name": served_model_name, "host": host, "port": port,
                 "tensor_parallel_size": tensor_parallel_size, "pipeline_parallel_size": pipeline_parallel_size,
                 "data_parallel_size": data_parallel_size, "max_model_len": max_model_len,
                 "gpu_memory_utilization": gpu_memory_utilization, "dtype": dtype, "extra_args": extra_arg or None}
    if endpoint is not None:
        if weights is not None:
            overrides["weights"] = weights
        spec = v.spec_from_endpoint(endpoint, **overrides)
    else:
        if weights is None or served_model_name is None:
            raise BadInputError("give --model (from appliance.yaml) or both --weights and --served-model-name")
        spec = v.VllmSpec(weights=weights, **{k: val for k, val in overrides.items() if val is not None})
    v.check_weights(spec)
    if api_key_env or api_key_file:
        api_key = v.read_api_key(api_key_env, api_key_file)
    else:
        api_key = resolve_api_key(endpoint) if endpoint is not None else None
    if api_key is None and spec.host not in ("127.0.0.1", "localhost", "::1"):
        raise BadInputError(f"--host {spec.host}: an API key is required when vLLM listens beyond loopback "
                            "(--api-key-env/--api-key-file, or api_key_env/api_key_file in appliance.yaml)")
    executable = v.find_vllm() if not dry_run else (v.shutil.which("vllm") or "vllm")
    version = v.probe_version(executable) if not dry_run or executable != "vllm" else None
    command = v.build_command(spec, version=version, executable=executable)
    env = v.serve_env(api_key)
    digest = v.command_sha256(command)
    shown: dict[str, Any] = {"command": command, "vllm_version": version, "base_url": spec.base_url,
             "env": {k: env[k] for k in sorted(v.OFFLINE_ENV)} | ({"VLLM_API_KEY": "<secret>"} if api_key else {}),
             "command_sha256": digest}
    if dry_run:
        if version is None:
            shown["note"] = ("vllm not probed: assuming vLLM >= 0.10.1, where request logging is off by default; "
                             "the real start probes the installed version")
        if as_json:
            emit_json(shown)
        else:
            info(" ".join(command))
        return
    server_id = uuid.uuid4().hex[:12]
    audit_event(app_ctx.home, app_ctx.actor, "server.start", role="it-admin", server_id=server_id,
                model=spec.served_model_name, base_url=spec.base_url, command_sha256=digest,
                vllm_version=version)
    process = v.VllmProcess(spec, command, env, api_key)

    def forward(signum: int, _frame: FrameType | None) -> None:
        process.stop()
        raise SystemExit(128 + signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        process.start()
        process.wait_healthy(startup_timeout)
        described = process.describe()
        with app_ctx.open_store() as store:
            runs_db.record_model_server(store, server_id, endpoint.name if endpoint else spec.served_model_name,
                                        spec.base_url, described["version"], described["models"],
                                        digest)
        audit_event(app_ctx.home, app_ctx.actor, "server.ready", role="it-admin", server_id=server_id,
                    base_url=spec.base_url, server_version=described["version"], served_models=described["models"])
        ready = {"status": "ready", "server_id": server_id, **described}
        if as_json:
            emit_json(ready)
        else:
            info(f"vLLM ready at {spec.base_url} (version {described['version']}, models {described['models']})")
        code = process.wait()
    finally:
        process.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        audit_event(app_ctx.home, app_ctx.actor, "server.stop", role="it-admin", server_id=server_id,
                    exit_code=process.proc.returncode if process.proc is not None else None)
    raise typer.Exit(code)


@app.command("console")
def console(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="Listen address (standalone: loopback only)."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Port (0: any free port)."),
    role: list[str] = typer.Option([], "--role", help="Standalone only: the roles of the one-time login "
                                   "(informatics, compliance, clinician, it; repeatable) [default: all]."),
    as_json: bool = typer.Option(False, "--json", help="Print the start line (mode, port, login URL) as JSON."),
) -> None:
    """The web console. Behind the hospital's authenticating proxy when `console.trusted_proxies` is set in
    appliance.yaml; otherwise standalone on loopback with a one-time login link, printed here."""
    from medhelm_local.home.config import ConsoleRole
    from medhelm_local.webconsole.server import ConsoleStart, serve

    app_ctx = app_context(ctx)
    config = app_ctx.home.config
    try:
        roles = frozenset(ConsoleRole(r) for r in role) if role else frozenset(ConsoleRole)
    except ValueError:
        raise BadInputError(f"--role: expected one of {', '.join(r.value for r in ConsoleRole)}") from None
    if role and config.console.trusted_proxies:
        raise BadInputError("--role applies to the standalone console only; behind the proxy, roles come from the "
                            "identity provider's groups (console.roles in appliance.yaml)")

    def started(start: ConsoleStart) -> None:
        audit_event(app_ctx.home, app_ctx.actor, "console.start", role="it-admin", mode=start.mode, host=start.host,
                    port=start.port, roles=sorted(r.value for r in roles) if start.mode == "standalone" else None)
        if as_json:
            emit_json({"mode": start.mode, "host": start.host, "port": start.port, "login_url": start.login_url})
        elif start.login_url:
            # Written as is (never wrapped to the terminal's width): the link must copy whole.
            sys.stderr.write(f"console (standalone, {start.host}:{start.port}); open this one-time login link:\n"
                             f"    {start.login_url}\n")
        else:
            info(f"console behind the proxy at {start.host}:{start.port}; identity from "
                 f"{', '.join(config.console.trusted_proxies)} only")
        sys.stdout.flush()
        sys.stderr.flush()

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the signal: end through SystemExit, so the
    # stop is audited.
    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        serve(app_ctx.home, host=host, port=port, user=app_ctx.actor, roles=roles, on_start=started)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        audit_event(app_ctx.home, app_ctx.actor, "console.stop", role="it-admin")
