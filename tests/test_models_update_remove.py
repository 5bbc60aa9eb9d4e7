"""`models update` and `models remove`: IT changes or retires an endpoint without hand-editing appliance.yaml (add
refused an existing name and there was nothing else). An update is allowlist-checked and audited like an add; the
runs of a model stay bound to its identity on resume, whoever changed the file; a removed model's runs stay listed,
ranked and exportable."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from medhelm_local.audit.trail import AuditTrail
from medhelm_local.export.policy import POLICY_ENV
from medhelm_local.testing.fake_openai import FakeOpenAIServer, Faults
from tests.compliance.conftest import evaluated_home, request_export
from tests.compliance.inproc import InProcessCli
from tests.conftest import Cli, cli_env, run_read_only
from tests.test_pipeline import write_extract


@pytest.fixture
def cli(tmp_path: Path) -> InProcessCli:
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    return cli


def _config(cli: InProcessCli) -> dict[str, Any]:
    config = yaml.safe_load((cli.home / "appliance.yaml").read_text())
    assert isinstance(config, dict)
    return config


def _model(cli: InProcessCli, name: str) -> dict[str, Any]:
    (model,) = [m for m in _config(cli)["models"] if m["name"] == name]
    assert isinstance(model, dict)
    return model


def _records(cli: InProcessCli | Cli, action: str) -> list[dict[str, Any]]:
    return [r for r in AuditTrail(cli.home / "audit" / "audit.jsonl").records() if r["action"] == action]


def test_update_replaces_the_options_given_and_keeps_the_others(cli: InProcessCli) -> None:
    added = cli("models", "add", "llama", "--kind", "vllm", "--base-url", "http://127.0.0.1:8000/v1",
                "--served-model", "llama-3-8b", "--context-length", "8192", "--api-key-env", "LLAMA_KEY")
    assert added.code == 0, added.stderr
    again = cli("models", "add", "llama", "--base-url", "http://127.0.0.1:8001/v1")
    assert again.code == 2 and "models update llama" in again.stderr  # the way to change it is named

    updated = cli("models", "update", "llama", "--base-url", "http://127.0.0.1:8001/v1", "--base-url",
                  "http://127.0.0.1:8002/v1", "--reply-model", "llama-3-8b-v2", "--json")
    assert updated.code == 0, updated.stderr
    payload = updated.json()
    assert payload["changed"] == ["--base-url", "--reply-model"] and payload["judge"] is False
    assert _model(cli, "llama") == {"name": "llama", "kind": "vllm",
                                    "base_urls": ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"],
                                    "served_model": "llama-3-8b", "reply_model": "llama-3-8b-v2",
                                    "api_key_env": "LLAMA_KEY", "timeout_s": 120.0, "context_length": 8192}
    intent, record = _records(cli, "config.model_update")  # announced, then concluded once written
    assert intent["outcome"] == "started" and record["role"] == "it-admin" and record["outcome"] == "success"
    assert record["objects"] == {"model": "llama", "changed": ["--base-url", "--reply-model"], "kind": "vllm",
                                 "endpoints": ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"],
                                 "judge": False, "intent_seq": intent["seq"]}
    report = cli("audit", "report")
    assert "config.model_update  success  model=llama  changed=['--base-url', '--reply-model']" in report.stdout

    # A setting is removed with --unset; the jury is joined and left with --judge / --no-judge.
    assert cli("models", "update", "llama", "--unset", "reply-model", "--unset", "context-length", "--judge").code == 0
    assert "reply_model" not in _model(cli, "llama") and "context_length" not in _model(cli, "llama")
    assert _config(cli)["judges"] == ["llama"]
    assert cli("models", "update", "llama", "--no-judge").code == 0
    assert _config(cli)["judges"] == []

    # The same settings again: nothing to write, nothing to audit.
    records = len(AuditTrail(cli.home / "audit" / "audit.jsonl").records())
    same = cli("models", "update", "llama", "--served-model", "llama-3-8b", "--json")
    assert same.code == 0 and same.json()["changed"] == []
    assert len(AuditTrail(cli.home / "audit" / "audit.jsonl").records()) == records


@pytest.mark.parametrize(("args", "message"), [
    ([], "models update: give at least one setting to change"),
    (["--reply-model", "x", "--unset", "reply-model"], "models update: --reply-model and --unset reply-model: give "
                                                       "one of them"),
    (["--base-url", "10.0.0.1:8000"], "models update: --base-url: '10.0.0.1:8000' is not an http(s) URL"),
    (["--unset", "base-url"], "base_urls: a model of kind vllm needs at least one base URL"),
    (["--base-url", "http://203.0.113.7:8000/v1"], "not on the allowlist"),
])
def test_a_refused_update_changes_nothing(cli: InProcessCli, args: list[str], message: str) -> None:
    assert cli("models", "add", "llama", "--kind", "vllm", "--base-url", "http://127.0.0.1:8000/v1").code == 0
    before = (cli.home / "appliance.yaml").read_bytes()
    refused = cli("models", "update", "llama", *args)
    assert refused.code == 2 and message in refused.stderr, refused.stderr
    assert (cli.home / "appliance.yaml").read_bytes() == before
    outcomes = [(r["outcome"], r["objects"].get("reason")) for r in _records(cli, "config.model_update")]
    assert outcomes == ([("denied", "endpoint_not_allowlisted")] if message == "not on the allowlist" else [])


def test_an_update_that_leaves_no_url_names_the_update_that_gives_one(cli: InProcessCli) -> None:
    """`models update llama --unset base-url` said to give a URL with `models add`, which refuses an existing name."""
    assert cli("models", "add", "llama", "--kind", "vllm", "--base-url", "http://127.0.0.1:8000/v1").code == 0
    refused = cli("models", "update", "llama", "--unset", "base-url")
    assert refused.code == 2, refused.stderr
    assert "(`models update llama --base-url URL`)" in refused.stderr and "models add" not in refused.stderr


_MODEL_COMMANDS = [["add", "llama", "--base-url", "http://127.0.0.1:8001/v1"],
                   ["update", "smollm2-135m-embedded", "--context-length", "4096"],
                   ["remove", "smollm2-135m-embedded"]]


@pytest.mark.parametrize("command", _MODEL_COMMANDS, ids=["add", "update", "remove"])
def test_a_write_that_fails_is_audited_as_a_failure_and_changes_nothing(
        cli: InProcessCli, monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    """The disk fills as appliance.yaml is written: the trail says the change failed, and why (it said "success"
    before the write was tried), the user is told which file could not be written (not "internal error
    (OSError)"), and appliance.yaml is as it was, with no temporary file left beside it."""
    config_fds: set[int] = set()
    real_open, real_write = os.open, os.write

    def tracking_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        if Path(path).name.startswith(".appliance.yaml.tmp"):
            config_fds.add(fd)
        return fd

    def disk_full(fd: int, data: Any) -> int:
        if fd in config_fds:
            config_fds.discard(fd)  # closed after this: the number may then be another file's
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    before = (cli.home / "appliance.yaml").read_bytes()
    monkeypatch.setattr(os, "open", tracking_open)
    monkeypatch.setattr(os, "write", disk_full)
    failed = cli("models", *command)
    monkeypatch.undo()
    assert failed.code == 1, failed.stderr
    assert (f"{cli.home / 'appliance.yaml'}: cannot write it (No space left on device): `models {command[0]}` "
            "changed nothing") in failed.stderr
    assert (cli.home / "appliance.yaml").read_bytes() == before
    assert sorted(p.name for p in cli.home.iterdir() if p.name.startswith(".appliance.yaml")) == []
    intent, outcome = _records(cli, f"config.model_{command[0]}")
    assert (intent["outcome"], outcome["outcome"], outcome["objects"]["reason"]) == ("started", "failure", "disk_full")
    assert outcome["objects"]["intent_seq"] == intent["seq"]
    report = cli("audit", "report", "--json")
    assert report.code == 0 and report.json()["unfinished"] == [], report.stderr


@pytest.mark.parametrize("command", _MODEL_COMMANDS, ids=["add", "update", "remove"])
def test_the_deployments_read_only_config_is_refused_with_what_to_do_instead(tmp_path: Path,
                                                                            command: list[str]) -> None:
    """The chart (and compose) mount appliance.yaml read-only and name it by $MEDHELM_CONFIG: in the toolbox pod
    `models add` audited "success", then failed with "internal error (OSError)" (exit 1). It is refused before
    anything is written or audited as done (exit 2), naming what IT changes instead."""
    cli = Cli(home=tmp_path / "home", env=cli_env())
    assert InProcessCli(cli.home)("init").code == 0
    config = tmp_path / "etc" / "appliance.yaml"
    config.parent.mkdir()
    (cli.home / "appliance.yaml").rename(config)
    before = config.read_bytes()
    cli.env["MEDHELM_CONFIG"] = str(config)

    refused = run_read_only(cli, config, "models", *command)
    assert refused.code == 2, refused.stderr
    for words in (f"{config} ($MEDHELM_CONFIG) is the deployment's appliance.yaml, read-only here: `models "
                  f"{command[0]}` cannot change it", "`appliance.extraModels`", "`helm upgrade`",
                  "deploy/appliance.compose.yaml on the host"):
        assert words in refused.stderr, refused.stderr
    assert "internal error" not in refused.stderr
    assert config.read_bytes() == before and sorted(p.name for p in config.parent.iterdir()) == ["appliance.yaml"]
    records = _records(cli, f"config.model_{command[0]}")
    assert [(r["outcome"], r["objects"]["reason"], r["objects"]["intent_seq"]) for r in records] == [
        ("refused", "config_managed_by_deployment", None)]

    # The same file, writable (a site that keeps appliance.yaml outside the home on purpose): changed as asked.
    changed = cli("models", *command)
    assert changed.code == 0, changed.stderr
    assert config.read_bytes() != before


@pytest.mark.parametrize("action", ["add", "update", "remove"])
def test_a_refusal_in_the_toolbox_records_no_patient_data_a_user_typed_as_the_model(tmp_path: Path,
                                                                                    action: str) -> None:
    """Anyone in the toolbox, where appliance.yaml is the deployment's, could run `models remove
    Okafor_Margaret_MRN7730019942_DOB_1960-03-04`: the refusal recorded the name as typed, and `audit report`
    printed it. A name that is no configured model is recorded only where it is a model name's shape reading as no
    patient data, else withheld saying why; a configured model's name is recorded as it is."""
    cli = Cli(home=tmp_path / "home", env=cli_env())
    assert InProcessCli(cli.home)("init").code == 0
    config = tmp_path / "etc" / "appliance.yaml"
    config.parent.mkdir()
    (cli.home / "appliance.yaml").rename(config)
    cli.env["MEDHELM_CONFIG"] = str(config)
    extra = {"add": ["--base-url", "http://127.0.0.1:8001/v1"], "update": ["--context-length", "4096"],
             "remove": []}[action]
    for name in ("Okafor_Margaret_MRN7730019942_DOB_1960-03-04", "Okafor Margaret 1960", "llama-70b",
                 "smollm2-135m-embedded"):
        assert run_read_only(cli, config, "models", action, name, *extra).code == 2
    recorded = [r["objects"]["model"] for r in _records(cli, f"config.model_{action}")]
    assert recorded == ["[withheld:date]", "[withheld:shape]", "llama-70b", "smollm2-135m-embedded"]
    report = cli("audit", "report")
    assert "Okafor" not in report.stdout and "7730019942" not in report.stdout


def test_a_home_config_this_user_cannot_write_is_refused(tmp_path: Path) -> None:
    cli = Cli(home=tmp_path / "home", env=cli_env())
    assert InProcessCli(cli.home)("init").code == 0
    config = cli.home / "appliance.yaml"
    before = config.read_bytes()
    refused = run_read_only(cli, config, "models", *_MODEL_COMMANDS[0])
    assert refused.code == 2, refused.stderr
    assert (f"{config}: this user cannot write it or its folder, so `models add` cannot change it; run the "
            "command as the home's owner") in refused.stderr
    assert config.read_bytes() == before
    assert [(r["outcome"], r["objects"]["reason"]) for r in _records(cli, "config.model_add")] == [
        ("refused", "config_not_writable")]


def test_an_unknown_model_is_named_with_the_configured_ones(cli: InProcessCli) -> None:
    for command in (["update", "nope", "--kind", "vllm"], ["remove", "nope"]):
        refused = cli("models", *command)
        assert refused.code == 2 and "model 'nope' is not configured (configured: smollm2" in refused.stderr


def test_a_judge_is_removed_only_with_the_jury_named(cli: InProcessCli) -> None:
    assert cli("models", "add", "grader", "--base-url", "http://127.0.0.1:9/v1", "--judge").code == 0
    before = (cli.home / "appliance.yaml").read_bytes()
    refused = cli("models", "remove", "grader")
    assert refused.code == 2 and "is a judge" in refused.stderr and "--judge" in refused.stderr
    assert (cli.home / "appliance.yaml").read_bytes() == before and _records(cli, "config.model_remove") == []

    removed = cli("models", "remove", "grader", "--judge", "--json")
    assert removed.code == 0, removed.stderr
    assert removed.json()["removed"] is True and removed.json()["judge"] is True
    config = _config(cli)
    assert config["judges"] == [] and "grader" not in [m["name"] for m in config["models"]]
    intent, record = _records(cli, "config.model_remove")
    assert record["outcome"] == "success" and record["objects"] == {
        "model": "grader", "kind": "openai-compatible", "endpoints": ["http://127.0.0.1:9/v1"], "judge": True,
        "intent_seq": intent["seq"]}


def _by_cli(cli: InProcessCli, url: str, served: str | None) -> None:
    updated = cli("models", "update", "m", "--base-url", url, *(["--served-model", served] if served else []))
    assert updated.code == 0, updated.stderr


def _by_hand(cli: InProcessCli, url: str, served: str | None) -> None:
    config = _config(cli)
    for model in config["models"]:
        if model["name"] == "m":
            model["base_urls"] = [url]
            if served:
                model["served_model"] = served
    (cli.home / "appliance.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def test_a_retry_while_the_models_server_is_down_is_not_recorded_as_a_model_change(
        cli: InProcessCli, tmp_path: Path) -> None:
    """A retry of a run whose server (version 0.9.0) is down was refused as "started against a different model
    (server_versions changed: ['0.9.0'] -> [])" and recorded as run.resume refused, model_identity_changed: the
    trail said someone tried to add to the run with another model. It is refused still (nothing can be checked),
    as model_identity_unverifiable, saying why; with the server back the retry goes on."""
    assert cli("datasets", "register", "hospice_referral", str(write_extract(tmp_path / "x.csv", n=6))).code == 0
    with FakeOpenAIServer(model_id="llama-a", version="0.9.0", faults=Faults(http_5xx=1.0)) as first:
        assert cli("models", "add", "m", "--base-url", first.base_url, "--served-model", "llama-a").code == 0
        failed = cli("run", "--model", "m", "--benchmarks", "hospice_referral", "--max-retries", "0", "--json")
        port = first.port
    assert failed.code == 1, failed.stderr
    run_id = failed.json()["run_id"]

    refused = cli("run", "--retry-errors", run_id)
    assert refused.code == 2, refused.stderr
    assert "none answers one now (down, or their /version unreachable)" in refused.stderr
    assert "different model" not in refused.stderr
    (record,) = [r for r in _records(cli, "run.resume") if r["outcome"] == "refused"]
    assert (record["objects"]["reason"], record["objects"]["changed"]) == ("model_identity_unverifiable",
                                                                         ["server_versions"])
    with FakeOpenAIServer(model_id="llama-a", version="0.9.0", port=port):
        assert cli("run", "--retry-errors", run_id).code == 0


@pytest.mark.parametrize("change", [_by_cli, _by_hand], ids=["models-update", "hand-edit"])
def test_resuming_after_the_endpoint_changed_checks_the_model_identity(
        cli: InProcessCli, tmp_path: Path, change: Callable[[InProcessCli, str, str | None], None]) -> None:
    """A run sent to llama-a (server version 0.9.0) is retried after the endpoint was changed: to another served
    model, or to a server of another version, the retry is refused before any request; to another replica of the
    same model and version (a new URL only), it goes on."""
    assert cli("datasets", "register", "hospice_referral", str(write_extract(tmp_path / "x.csv", n=6))).code == 0
    with FakeOpenAIServer(model_id="llama-a", version="0.9.0", faults=Faults(http_5xx=1.0)) as first:
        assert cli("models", "add", "m", "--base-url", first.base_url, "--served-model", "llama-a").code == 0
        failed = cli("run", "--model", "m", "--benchmarks", "hospice_referral", "--max-retries", "0", "--json")
    assert failed.code == 1, failed.stderr
    run_id = failed.json()["run_id"]

    for served, version, changed in (("llama-b", "0.9.0", "served_model"), (None, "0.10.0", "server_versions")):
        with FakeOpenAIServer(model_id=served or "llama-a", version=version) as other:
            change(cli, other.base_url, served)
            refused = cli("run", "--retry-errors", run_id)
            assert refused.code == 2 and f"({changed} changed" in refused.stderr, refused.stderr
            assert other.requests_seen == 0
        change(cli, first.base_url, "llama-a")  # back, for the next case
    # Each refusal is in the trail (who tried to add to the run with another model), naming fields, never values;
    # it opens no intent that `audit report` would list as unfinished.
    refusals = [r for r in _records(cli, "run.resume") if r["outcome"] == "refused"]
    assert [(r["objects"]["run_id"], r["objects"]["mode"], r["objects"]["reason"], r["objects"]["changed"])
            for r in refusals] == [(run_id, "retry_errors", "model_identity_changed", ["served_model"]),
                                   (run_id, "retry_errors", "model_identity_changed", ["server_versions"])]
    assert all(r["objects"]["intent_seq"] is None for r in refusals)
    assert "llama-b" not in json.dumps(refusals) and "0.10.0" not in json.dumps(refusals)
    report = cli("audit", "report", "--json")
    assert report.code == 0 and report.json()["unfinished"] == [], report.stdout
    assert [r["reason"] for r in report.json()["run_refusals"]] == ["model_identity_changed"] * 2

    with FakeOpenAIServer(model_id="llama-a", version="0.9.0") as replica:
        change(cli, replica.base_url, None)
        retried = cli("run", "--retry-errors", run_id, "--json")
        assert retried.code == 0, retried.stderr
        assert replica.requests_seen == 6


def test_a_removed_models_runs_stay_listed_ranked_and_exportable(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(POLICY_ENV, "")  # the site policy evaluated_home sets is unset again after the test
    with evaluated_home(tmp_path) as evaluated:
        cli, run_id = evaluated.cli, evaluated.run_id
        removed = cli("models", "remove", "eval-model")
        assert removed.code == 0, removed.stderr
        assert "eval-model" not in [m["name"] for m in _config(cli)["models"]]

        listed = cli("runs", "list", "--json")
        assert listed.code == 0, listed.stderr
        assert [(r["run_id"], r["model"]) for r in listed.json()] == [(run_id, "eval-model")]
        shown = cli("runs", "show", run_id, "--json")
        assert shown.code == 0 and shown.json()["cost"] is None, shown.stderr  # no pricing left to apply
        board = cli("leaderboard", "--json")
        assert board.code == 0, board.stderr
        (row,) = board.json()
        assert row["model"] == "eval-model" and row["cost"] is None  # unknown, never 0
        request = request_export(cli, run_id)
        assert request["status"] == "ready", request
        resumed = cli("run", "--resume", run_id)
        assert resumed.code == 2 and "model 'eval-model' is not configured" in resumed.stderr
