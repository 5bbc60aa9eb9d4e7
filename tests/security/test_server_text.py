"""Text a model server chooses (its /version, its /v1/models, a reply's finish_reason, the context length its
/tokenize reports) never reaches the audit trail, the logs or the run's manifest unless the appliance can vouch for
it: a hostile server, which sees every prompt, could write a patient's name there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medhelm_local.application.evaluation import evaluate
from medhelm_local.inference.client import parse_completion
from medhelm_local.inference.server_text import UNRECOGNISED, recorded_models, recorded_version
from medhelm_local.inference.tokens import reported_context_length
from medhelm_local.logs import configure_logging
from medhelm_local.store import Store
from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
from tests.runner.helpers import app, make_home, quiet, register, synthetic_instances

PATIENT_TEXT = ("Doe Jane MRN 00123456", "Doe_Jane_MRN00123456")


@pytest.mark.parametrize("phi", PATIENT_TEXT)
def test_a_servers_version_and_model_list_never_reach_the_audit_trail_logs_or_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], phi: str
) -> None:
    """The server's /version went into every ``endpoint.use`` audit record and the manifest; its /v1/models list
    into the ``model.not_listed`` warning. Both are ``unrecognised`` now, with nothing of their content."""
    configure_logging("DEBUG", json_lines=True, force=True)
    try:
        with FakeOpenAIServer(responder=hash_responder(), model_id=phi, version=phi) as server:
            home = make_home(tmp_path / "home", [server.base_url], served_model="asked-model")
            register(home, synthetic_instances(3))
            capsys.readouterr()
            outcome = evaluate(app(home), quiet())
        captured = capsys.readouterr()
    finally:
        configure_logging(force=True)
    logs = captured.out + captured.err
    audit = home.audit_path.read_text()
    with Store.open(home, read_only=True) as store:
        run = store.get_run(outcome.run.run_id)
    assert run is not None
    manifest = json.dumps(run.manifest)
    for recorded in (logs, audit, manifest):
        assert "Jane" not in recorded and "00123456" not in recorded
    uses = [json.loads(line) for line in audit.splitlines() if json.loads(line)["action"] == "endpoint.use"]
    assert uses and all(use["objects"]["server_version"] == UNRECOGNISED for use in uses)
    not_listed = [
        json.loads(line)
        for line in logs.splitlines()
        if line.startswith("{") and json.loads(line).get("event") == "model.not_listed"
    ]
    assert [warning["served_models"] for warning in not_listed] == [[UNRECOGNISED]]
    (server_record,) = run.manifest["model"]["servers"]
    assert server_record["version"] == UNRECOGNISED and server_record["models"] == [UNRECOGNISED]


# A patient's name and MRN in hex, in suffixes shaped as the version's shape allowed (16 hex digits each): the
# audit trail's endpoint.use, the manifest and runs show kept it as sent.
SPELLED = PATIENT_TEXT[0].encode().hex()
SPELLED_VERSIONS = (f"0.1+{SPELLED[:16]}-{SPELLED[16:32]}.{SPELLED[32:]}", f"0.1+g{SPELLED[:12]}.g{SPELLED[12:24]}",
                    f"0.1.dev{SPELLED[:12]}")


def test_a_plain_version_and_a_configured_model_are_recorded_as_sent() -> None:
    for version in ("0.10.1", "v0.6.3.post1", "0.11.0+cu128", "0.10.1.dev12+g1a2b3c4", "0.0.0-fake",
                    "0.10.1.post1.dev12+g1a2b3c4d5", "0.6.3+rocm624", "1.0.0.rc1"):
        assert recorded_version(version) == version
    for not_a_version in (*PATIENT_TEXT, *SPELLED_VERSIONS, "0.1-jane", "0.1 Doe", "", "9" * 200, 3):
        assert recorded_version(not_a_version) == UNRECOGNISED
    assert recorded_version(None) is None
    assert recorded_models(["b", PATIENT_TEXT[1], "a", "c"], {"a", "b"}) == ["a", "b", UNRECOGNISED]
    assert recorded_models(["a"], {"a"}) == ["a"]


def test_a_finish_reason_outside_the_api_is_unrecognised() -> None:
    """finish_reason is kept unencrypted beside each response: a server's own text there is not kept."""

    def reason(value: object) -> str | None:
        body = {"choices": [{"message": {"content": "yes"}, "finish_reason": value}]}
        return parse_completion(json.dumps(body).encode()).finish_reason

    assert (reason("stop"), reason("length"), reason(None), reason(7)) == ("stop", "length", None, None)
    assert reason(PATIENT_TEXT[1]) == UNRECOGNISED


def test_a_context_length_that_spells_text_is_not_recorded(tmp_path: Path) -> None:
    """The ``max_model_len`` of vLLM's /tokenize went into the run's manifest (``runs show --json``'s context) as
    whatever integer the server sent: this one is a patient's name and MRN in its digits. Now a number no context
    length can be is not reported, and the run takes the default, as for a server that reports none."""
    spelled = int.from_bytes(PATIENT_TEXT[0].encode(), "big")
    with FakeOpenAIServer(responder=hash_responder(), tokenizer="vllm", context_length=spelled) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(3))
        outcome = evaluate(app(home), quiet())
    with Store.open(home, read_only=True) as store:
        run = store.get_run(outcome.run.run_id)
    assert run is not None
    assert str(spelled) not in json.dumps(run.manifest) and str(spelled) not in home.audit_path.read_text()
    context = run.manifest["context"]
    assert (context["server_reported"], context["source"], context["tokens"]["method"]) == (None, "default", "vllm")
    assert [reported_context_length(v) for v in (32768, 2**31 - 1, 2**31, 0, True, "4096")] == [
        32768, 2**31 - 1, None, None, None, None]
