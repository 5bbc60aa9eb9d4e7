"""`serve vllm`: the command, its environment and the serve -> health -> version -> run path (fake vllm)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from medhelm_local.errors import BadInputError
from medhelm_local.home import Home
from medhelm_local.home.config import BackendKind, ModelEndpoint
from medhelm_local.inference import vllm as v
from medhelm_local.store import Store
from tests.runner.helpers import register, synthetic_instances

FAKE_VLLM = '''#!{python}
import json, os, sys
args = sys.argv[1:]
version = os.environ.get("FAKE_VLLM_VERSION", "0.11.0")
if args[:1] == ["--version"]:
    print("INFO some import noise")
    print(version)
    sys.exit(0)
keys = ["VLLM_API_KEY", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
        "VLLM_LOGGING_LEVEL", "HTTPS_PROXY", "VLLM_DEBUG_LOG_API_SERVER_REQUEST_PROMPT"]
with open(os.environ["FAKE_VLLM_RECORD"], "w") as out:
    json.dump({{"argv": args, "env": {{k: os.environ.get(k) for k in keys}}}}, out)
def opt(name):
    return args[args.index(name) + 1]
os.execv(sys.executable, [sys.executable, "-m", "medhelm_local.testing.fake_openai", "--port", opt("--port"),
         "--model-id", opt("--served-model-name"), "--api-key-env", "VLLM_API_KEY", "--version", version])
'''


def _spec(**kw: object) -> v.VllmSpec:
    return v.VllmSpec(weights=Path("/models/llama"), served_model_name="llama-3-8b", **kw)


def test_command_for_current_vllm_has_no_logging_flag_and_no_key() -> None:
    command = v.build_command(_spec(tensor_parallel_size=2, max_model_len=8192, gpu_memory_utilization=0.85),
                              version="0.11.0", executable="vllm")
    assert command[:3] == ["vllm", "serve", "/models/llama"]
    pairs = dict(zip(command[3::2], command[4::2], strict=False))
    assert pairs["--served-model-name"] == "llama-3-8b" and pairs["--tensor-parallel-size"] == "2"
    assert pairs["--max-model-len"] == "8192" and pairs["--gpu-memory-utilization"] == "0.85"
    assert "--disable-log-requests" not in command and "--enable-log-requests" not in command
    assert not any("key" in arg.lower() for arg in command)


def test_old_vllm_gets_disable_log_requests() -> None:
    assert "--disable-log-requests" in v.build_command(_spec(), version="0.9.2")
    assert "--disable-log-requests" not in v.build_command(_spec(), version="0.10.1")
    assert v.log_request_flags(None) == []


@pytest.mark.parametrize("arg", ["--enable-log-requests", "--enable-log-outputs", "--api-key=abc",
                                 # vLLM's parser reads underscores as dashes, takes abbreviations and --config files
                                 "--enable_log_requests", "--enable-log_outputs=true", "--api_key=abc",
                                 "--enable-log-req", "--config=vllm.yaml", "--config"])
def test_flags_that_would_log_prompts_or_leak_the_key_are_refused(arg: str) -> None:
    with pytest.raises(BadInputError):
        v.build_command(_spec(extra_args=[arg]), version="0.11.0")


def test_other_extra_flags_pass() -> None:
    # --data-parallel-rank and -dpl (--data-parallel-size-local) are other flags than the data parallel size.
    extra = ["--enable-prefix-caching", "--max_num_seqs=8", "-O3", "--data-parallel-rank=0", "-dpl", "1"]
    command = v.build_command(_spec(extra_args=extra), version="0.11.0")
    assert command[-len(extra):] == extra


@pytest.mark.parametrize(("arg", "option"), [
    ("--tensor-parallel-size=4", "--tensor-parallel-size"), ("--tensor_parallel_size", "--tensor-parallel-size"),
    ("--tensor-par", "--tensor-parallel-size"), ("-tp", "--tensor-parallel-size"), ("-tp=4", "--tensor-parallel-size"),
    ("-t", "--tensor-parallel-size"),
    ("--pipeline-parallel-size", "--pipeline-parallel-size"), ("--pipeline_par=2", "--pipeline-parallel-size"),
    ("-pp", "--pipeline-parallel-size"),
    ("--data-parallel-size=2", "--data-parallel-size"), ("--data_parallel", "--data-parallel-size"),
    ("-dp", "--data-parallel-size"),
])
def test_parallel_sizes_in_extra_args_are_refused(arg: str, option: str) -> None:
    """vLLM takes the last of two parallel-size flags: one in the extra arguments would override the spec's own
    (--tensor-parallel-size 2 served on 4 GPUs, or fail at start) without a word. Refused, naming the option."""
    with pytest.raises(BadInputError, match=f"use serve vllm's {option} option instead"):
        v.build_command(_spec(tensor_parallel_size=2, extra_args=[arg, "4"]), version="0.11.0")


def test_pipeline_and_data_parallel_sizes_are_passed_only_above_one() -> None:
    command = v.build_command(_spec(tensor_parallel_size=2, pipeline_parallel_size=2, data_parallel_size=3),
                              version="0.11.0")
    pairs = dict(zip(command[3::2], command[4::2], strict=False))
    assert (pairs["--tensor-parallel-size"], pairs["--pipeline-parallel-size"], pairs["--data-parallel-size"]) == (
        "2", "2", "3")
    plain = v.build_command(_spec(), version="0.11.0")  # the command (and its recorded digest) as before
    assert "--pipeline-parallel-size" not in plain and "--data-parallel-size" not in plain
    assert plain[plain.index("--tensor-parallel-size") + 1] == "1"


def test_serve_vllm_command_line_sets_the_parallel_sizes_and_refuses_them_as_extra_args(tmp_path: Path) -> None:
    """What an operator types: the sizes as options reach the vllm command (--dry-run); the same as --extra-arg
    exits 2, naming the option to use, and starts nothing."""
    from tests.conftest import Cli, cli_env

    cli = Cli(home=tmp_path / "home", env=cli_env())
    assert cli("init").code == 0
    weights = tmp_path / "weights"
    weights.mkdir()
    base = ["serve", "vllm", "--weights", str(weights), "--served-model-name", "llama-3-8b", "--dry-run", "--json"]
    done = cli(*base, "--tensor-parallel-size", "2", "--pipeline-parallel-size", "2", "--data-parallel-size", "2")
    assert done.code == 0, done.stderr
    command = done.json()["command"]
    for flag in ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size"):
        assert command.count(flag) == 1 and command[command.index(flag) + 1] == "2"
    refused = cli(*base, "--tensor-parallel-size", "2", "--extra-arg=-tp", "--extra-arg", "4")
    assert refused.code == 2 and refused.stdout == ""
    assert "-tp (--tensor-parallel-size) is refused" in refused.stderr
    assert "use serve vllm's --tensor-parallel-size option instead" in refused.stderr
    help_text = cli("serve", "vllm", "--help").stdout
    assert "GPUs per replica" not in help_text and "--pipeline-parallel-size" in help_text


def test_environment_is_offline_and_carries_the_key() -> None:
    env = v.serve_env("s3cret", base={"PATH": "/bin", "HTTPS_PROXY": "http://proxy:3128", "VLLM_API_KEY": "old",
                                      "VLLM_DEBUG_LOG_API_SERVER_REQUEST_PROMPT": "1", "VLLM_LOGGING_LEVEL": "DEBUG"})
    assert env["VLLM_NO_USAGE_STATS"] == env["DO_NOT_TRACK"] == env["HF_HUB_OFFLINE"] == "1"
    assert env["TRANSFORMERS_OFFLINE"] == "1" and env["VLLM_LOGGING_LEVEL"] == "INFO"
    assert env["VLLM_API_KEY"] == "s3cret" and env["PATH"] == "/bin"
    assert "HTTPS_PROXY" not in env and "VLLM_DEBUG_LOG_API_SERVER_REQUEST_PROMPT" not in env


def test_spec_from_appliance_model(tmp_path: Path) -> None:
    endpoint = ModelEndpoint(name="m", kind=BackendKind.VLLM, base_urls=["http://127.0.0.1:8011/v1"],
                             served_model="served", weights_path=tmp_path, context_length=4096)
    spec = v.spec_from_endpoint(endpoint, tensor_parallel_size=4)
    assert (spec.port, spec.served_model_name, spec.max_model_len, spec.tensor_parallel_size) == (8011, "served",
                                                                                                  4096, 4)
    with pytest.raises(BadInputError):
        v.spec_from_endpoint(endpoint.model_copy(update={"weights_path": None}))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_health_version_then_run_through_it(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vllm"
    fake.write_text(FAKE_VLLM.format(python=sys.executable))
    fake.chmod(0o755)
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"\x00" * 4096)
    (weights / "config.json").write_text("{}")
    port = _free_port()
    home = Home(tmp_path / "home")
    home.init()
    config = home.config.model_copy(deep=True)
    config.models.append(ModelEndpoint(name="local-vllm", kind=BackendKind.VLLM,
                                       base_urls=[f"http://127.0.0.1:{port}/v1"], served_model="local-model",
                                       weights_path=weights, api_key_env="TEST_VLLM_KEY", context_length=4096))
    home.save_config(config)
    register(home, synthetic_instances(20))
    record = tmp_path / "record.json"
    env = {k: val for k, val in os.environ.items() if not k.startswith("MEDHELM_")}
    env.update({"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "TEST_VLLM_KEY": "key-for-test",
                "FAKE_VLLM_RECORD": str(record), "HTTPS_PROXY": "http://proxy.invalid:3128"})
    base = [sys.executable, "-m", "medhelm_local.cli", "--home", str(home.root)]

    dry = subprocess.run([*base, "serve", "vllm", "--model", "local-vllm", "--dry-run", "--json"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert dry.returncode == 0, dry.stderr
    shown = json.loads(dry.stdout)
    assert shown["vllm_version"] == "0.11.0" and "key-for-test" not in dry.stdout

    serve = subprocess.Popen([*base, "serve", "vllm", "--model", "local-vllm", "--json", "--startup-timeout", "120"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert serve.poll() is None, serve.stderr.read() if serve.stderr else ""
            assert time.monotonic() < deadline
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        run = subprocess.run([*base, "run", "--model", "local-vllm", "--benchmarks", "pubmedqa", "--json"],
                             capture_output=True, text=True, env=env, timeout=300)
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["status"] == "finished"
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=60)

    recorded = json.loads(record.read_text())
    assert "key-for-test" not in " ".join(recorded["argv"])
    assert recorded["env"]["VLLM_API_KEY"] == "key-for-test"
    assert recorded["env"]["HF_HUB_OFFLINE"] == "1" and recorded["env"]["HTTPS_PROXY"] is None
    assert "--disable-log-requests" not in recorded["argv"]
    with Store.open(home, read_only=True) as store:
        (server_row,) = store.conn.execute("SELECT server_version, served_models FROM model_servers").fetchall()
        (run_info,) = store.list_runs()
    assert server_row[0] == "0.11.0" and json.loads(server_row[1]) == ["local-model"]
    model = run_info.manifest["model"]
    assert model["servers"][0]["version"] == "0.11.0" and model["servers"][0]["models"] == ["local-model"]
    assert model["weights"]["sha256"] and {f["file"] for f in model["weights"]["files"]} == {"model.safetensors",
                                                                                             "config.json"}
    actions = [json.loads(line)["action"] for line in home.audit_path.read_text().splitlines()]
    assert {"server.start", "server.ready", "server.stop", "run.start", "endpoint.use"} <= set(actions)
    assert "key-for-test" not in home.audit_path.read_text()
