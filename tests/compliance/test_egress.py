"""Zero egress: non-allowlisted endpoints are refused before a connection opens, and audited; the pipeline
runs in a network namespace that has nothing but loopback."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.audit.trail import AuditTrail
from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.context import AppContext
from medhelm_local.errors import EgressDenied
from medhelm_local.home import Home, ModelEndpoint
from medhelm_local.home.config import ApplianceConfig
from medhelm_local.inference.backends import open_client
from medhelm_local.inference.client import ChatClient
from medhelm_local.inference.egress import EgressPolicy, check_egress, is_allowed
from medhelm_local.records import Instance
from medhelm_local.scoring.engine import score_benchmark
from tests.compliance.conftest import add_models, hospice_csv
from tests.compliance.inproc import InProcessCli
from tests.scoring.helpers import add_run, make_home, register

REPO = Path(__file__).resolve().parents[2]
ALLOW = ["http://127.0.0.1", "https://*.svc.cluster.local", "http://judge.internal:8000"]


def test_allowlist_rules() -> None:
    assert is_allowed("http://127.0.0.1:8080/v1", ALLOW)
    assert is_allowed("https://vllm.models.svc.cluster.local/v1", ALLOW)
    assert is_allowed("http://judge.internal:8000/v1", ALLOW)
    for url in ("http://judge.internal:8001/v1", "http://api.openai.com/v1", "https://127.0.0.1/v1",
                "http://127.0.0.2:80/v1", "ftp://127.0.0.1/", "http://evil.svc.cluster.local.attacker.io/v1",
                "http://127.0.0.1:notaport/v1", "http:///v1"):
        assert not is_allowed(url, ALLOW), url


def test_denial_is_reported_to_the_auditor_with_target_only() -> None:
    seen: list[str] = []
    with pytest.raises(EgressDenied, match="not on the allowlist"):
        check_egress("https://api.example.com:8443/v1/chat/completions?key=secret", ALLOW, on_denied=seen.append)
    assert seen == ["https://api.example.com:8443"]
    policy = EgressPolicy(tuple(ALLOW), on_denied=seen.append)
    policy.check("http://judge.internal:8000/v1/models")  # allowed: nothing recorded
    with pytest.raises(EgressDenied):
        policy.check("http://judge.internal:8001/v1?token=x")
    assert seen == ["https://api.example.com:8443", "http://judge.internal:8001"]


def test_a_library_made_context_audits_a_denial_with_no_global_set_up(tmp_path: Path) -> None:
    """The bench, the demo or a test makes an AppContext and a client from it: the refusal is audited in that
    home, as that actor, with nothing process-wide installed first (issue 16 §3)."""
    home = Home(tmp_path / "home")
    home.init()
    ctx = AppContext(home=home, actor="library-caller")
    with pytest.raises(EgressDenied, match="refused before connecting"):
        ChatClient(["http://203.0.113.9:8000/v1"], "m", ctx.egress)
    (denial,) = _denials(home.root)
    assert denial["actor"] == "library-caller" and denial["outcome"] == "denied"
    assert denial["objects"] == {"target": "http://203.0.113.9:8000", "reason": "not_allowlisted"}


def test_open_client_takes_the_callers_policy(tmp_path: Path) -> None:
    """What the runner and the jury open their clients with: the context's policy, so a judge or candidate slipped
    into appliance.yaml by hand is refused and audited as the acting user."""
    home = Home(tmp_path / "home")
    home.init()
    ctx = AppContext(home=home, actor="judge-runner")
    endpoint = ModelEndpoint(name="judge-outside", base_urls=["http://203.0.113.20:8000/v1"])

    async def opened() -> None:
        async with open_client(home.config, endpoint, egress=ctx.egress):
            pytest.fail("a client was opened to a non-allowlisted endpoint")

    with pytest.raises(EgressDenied):
        asyncio.run(opened())
    assert [(d["actor"], d["objects"]["target"]) for d in _denials(home.root)] == [
        ("judge-runner", "http://203.0.113.20:8000")]


def test_a_judge_outside_the_allowlist_is_refused_and_audited_when_scoring(tmp_path: Path) -> None:
    """The jury reaches its judges with the caller's policy (ScoringContext.egress): a judge slipped into
    appliance.yaml by hand is refused before any connection, and the refusal is in the trail as the scorer."""
    home = make_home(tmp_path / "home", {"judge-outside": "http://192.0.2.50:8000/v1"}, max_retries=0)
    data = [Instance(benchmark="medication_qa", id=f"m{i}", fields={"question": f"Drug {i}?"},
                     references=[f"Answer {i}."]) for i in range(2)]
    ctx = AppContext(home=home, actor="scorer")
    with ctx.open_store() as store:
        fingerprint = register(store, "medication_qa", data)
        run_id = add_run(store, "model-x", "medication_qa", fingerprint, data, {i.id: "an answer" for i in data})
        with pytest.raises(EgressDenied, match="refused before connecting"):
            score_benchmark(store, SHIPPED, run_id, "medication_qa", config=home.config, egress=ctx.egress)
    assert [(d["actor"], d["objects"]["target"]) for d in _denials(home.root)] == [
        ("scorer", "http://192.0.2.50:8000")]


def test_two_contexts_in_one_process_do_not_share_egress_state(tmp_path: Path) -> None:
    """Each context's refusals land in its own home, as its own actor; making the second context changes
    nothing for the first (no process-wide auditor that the last one made wins)."""
    first, second = Home(tmp_path / "first"), Home(tmp_path / "second")
    first.init()
    second.init()
    data = second.config.model_dump()
    data["allowlist"] = [*data["allowlist"], "http://198.51.100.4:8000"]
    second.save_config(ApplianceConfig.model_validate(data))
    ctx_a = AppContext(home=first, actor="alice")
    ctx_b = AppContext(home=second, actor="bob")
    with pytest.raises(EgressDenied):
        ctx_a.egress.check("http://198.51.100.4:8000/v1")  # on bob's allowlist, not on alice's
    ctx_b.egress.check("http://198.51.100.4:8000/v1")
    with pytest.raises(EgressDenied):
        ctx_b.egress.check("http://203.0.113.9:8000/v1")
    with pytest.raises(EgressDenied):
        ctx_a.egress.check("http://192.0.2.77/v1")
    assert [(d["actor"], d["objects"]["target"]) for d in _denials(first.root)] == [
        ("alice", "http://198.51.100.4:8000"), ("alice", "http://192.0.2.77")]
    assert [(d["actor"], d["objects"]["target"]) for d in _denials(second.root)] == [
        ("bob", "http://203.0.113.9:8000")]
    # A bare allowlist audits nowhere (and says nothing about either home).
    with pytest.raises(EgressDenied):
        check_egress("http://192.0.2.78/v1", ALLOW)
    assert len(_denials(first.root)) == 2 and len(_denials(second.root)) == 1


def _denials(home: Path) -> list[dict[str, Any]]:
    return [r for r in AuditTrail(home / "audit" / "audit.jsonl").records() if r["action"] == "egress.denied"]


def test_models_add_refuses_and_audits(tmp_path: Path) -> None:
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    config_before = (cli.home / "appliance.yaml").read_bytes()
    result = cli("models", "add", "outside", "--base-url", "http://203.0.113.7:8000/v1")
    assert result.code == 2 and "not on the allowlist" in result.stderr
    assert (cli.home / "appliance.yaml").read_bytes() == config_before
    assert [d["objects"] for d in _denials(cli.home)] == [{"target": "http://203.0.113.7:8000",
                                                           "reason": "not_allowlisted"}]
    # The refusal is the IT action's, under the role its success is recorded with (no undocumented "operator").
    refused = [r for r in AuditTrail(cli.home / "audit" / "audit.jsonl").records()
               if r["action"] == "config.model_add" and r.get("outcome") == "denied"]
    assert [(r["role"], r["objects"]["reason"]) for r in refused] == [("it-admin", "endpoint_not_allowlisted")]


def test_models_add_records_a_denial_only_for_a_refused_endpoint(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Another error while checking an endpoint is no "endpoint_not_allowlisted" refusal in the trail."""
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0

    def broken(self: EgressPolicy, url: str) -> None:
        raise RuntimeError("allowlist unreadable")

    monkeypatch.setattr(EgressPolicy, "check", broken)
    result = cli("models", "add", "inside", "--base-url", "http://127.0.0.1:8000/v1")
    assert result.code != 0
    refusals = [r for r in AuditTrail(cli.home / "audit" / "audit.jsonl").records()
                if r["action"] == "config.model_add" and r.get("outcome") == "denied"]
    assert refusals == []


def test_run_against_a_non_allowlisted_endpoint_never_connects(tmp_path: Path) -> None:
    """A model slipped into appliance.yaml by hand: the run is refused before any connection, and audited."""
    listener = socket.socket()
    listener.bind(("127.0.0.2", 0))  # loopback, but not on the allowlist
    listener.listen(8)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    add_models(cli.home, [ModelEndpoint(name="sneaky", base_urls=[f"http://127.0.0.2:{port}/v1"])])
    extract = hospice_csv(tmp_path / "notes.csv", 12)
    assert cli("datasets", "register", "hospice_referral", str(extract)).code == 0
    result = cli("run", "--model", "sneaky", "--benchmarks", "hospice_referral")
    assert result.code == 2, result.stderr
    assert "refused before connecting" in result.stderr
    with pytest.raises(TimeoutError):
        listener.accept()  # nobody ever connected
    listener.close()
    assert [d["objects"]["target"] for d in _denials(cli.home)][:1] == [f"http://127.0.0.2:{port}"]


NETNS_SCRIPT = textwrap.dedent("""
    import json, socket, sys
    from pathlib import Path

    root = Path(sys.argv[1])
    try:  # proof that this namespace has no route out
        socket.create_connection(("192.0.2.1", 80), timeout=3).close()
        sys.exit("a connection outside loopback succeeded: the namespace is not isolated")
    except OSError:
        pass

    from medhelm_local.cli import main
    from medhelm_local.context import AppContext
    from medhelm_local.demo.run_demo import finish, prepare
    from medhelm_local.home import Home, ModelEndpoint
    from medhelm_local.home.config import ApplianceConfig
    from medhelm_local.testing.fake_openai import FakeOpenAIServer

    def cli(*args):
        sys.argv = ["medhelm-local", "--home", str(root), *args]
        try:
            main()
        except SystemExit as exc:
            if exc.code:
                raise

    def answer(messages):
        return "A" if "A or B" in messages[-1]["content"] else "yes"

    ctx = AppContext(home=Home(root), actor="netns-test")
    counts = prepare(ctx)
    with FakeOpenAIServer(responder=answer) as server:
        home = Home(root)
        data = home.config.model_dump()
        data["models"].append(ModelEndpoint(name="fake-in-netns", base_urls=[server.base_url]).model_dump())
        home.save_config(ApplianceConfig.model_validate(data))
        cli("run", "--model", "fake-in-netns", "--benchmarks", "pubmedqa,hospice_referral", "--max-instances", "12",
            "--json")
        served = server.completions_sent
    board, report = finish(ctx)
    print(json.dumps({"counts": counts, "served": served, "models": [r.model for r in board.rows],
                      "report": str(report)}))
""")


def _namespace_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    ip = shutil.which("ip") or next((p for p in ("/usr/sbin/ip", "/sbin/ip") if os.path.exists(p)), None)
    if unshare is None or ip is None:
        pytest.fail("the zero-egress test needs `unshare` (util-linux) and `ip` (iproute2) to build a network "
                    "namespace with only loopback; install them (CI runs as root on Linux)")
    flags = "-n" if os.geteuid() == 0 else "-rn"
    probe = subprocess.run([unshare, flags, ip, "link", "set", "lo", "up"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.fail(f"cannot create a network namespace with `unshare {flags}` ({probe.stderr.strip()}); the "
                    "zero-egress test must run where namespaces are allowed (root, or user namespaces enabled)")
    return [unshare, flags, "sh", "-c", f'{ip} link set lo up && exec "$@"', "netns"]


def test_demo_pipeline_runs_with_only_loopback(tmp_path: Path) -> None:
    prefix = _namespace_prefix()
    root = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDHELM_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run([*prefix, sys.executable, "-c", NETNS_SCRIPT, str(root)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["served"] == 24 and "fake-in-netns" in result["models"]
    assert Path(result["report"]).exists()
    records = AuditTrail(root / "audit" / "audit.jsonl").records()
    assert any(r["action"] == "run.finish" and r["outcome"] == "success" for r in records)
    assert not any(r["action"] == "egress.denied" for r in records)
