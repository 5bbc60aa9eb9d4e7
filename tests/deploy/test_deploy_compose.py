"""deploy/docker-compose.yml: valid against the Compose Specification schema (vendored, offline) and
hardened: internal network only, read-only non-root containers, verified weights, no telemetry."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
import yaml
from deploykit import DEPLOY_TESTS, REPO

COMPOSE = REPO / "deploy" / "docker-compose.yml"
SCHEMA = DEPLOY_TESTS / "compose-spec.schema.json"
TELEMETRY_OFF = {"VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"}


def load() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def schema_errors(doc: dict[str, Any]) -> list[str]:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def problems(doc: dict[str, Any]) -> list[str]:
    """The hardening rules, as a list of violations (empty: compliant)."""
    found: list[str] = []
    networks = doc.get("networks", {})
    if not networks:
        found.append("no networks declared")
    for name, net in networks.items():
        if (net or {}).get("internal") is not True:
            found.append(f"network {name} is not internal")
    for name, svc in doc["services"].items():
        where = f"service {name}"
        for key in ("ports", "network_mode", "privileged", "cap_add", "devices", "pid", "ipc", "userns_mode"):
            if key in svc:
                found.append(f"{where}: {key} is not allowed")
        if set(svc.get("networks", [])) - set(networks) or not svc.get("networks"):
            found.append(f"{where}: must join only the declared internal networks")
        if svc.get("read_only") is not True:
            found.append(f"{where}: read_only must be true")
        user = str(svc.get("user", "0")).split(":")[0]
        if not user.isdigit() or int(user) == 0:
            found.append(f"{where}: must run as a numeric non-root user")
        if svc.get("cap_drop") != ["ALL"]:
            found.append(f"{where}: cap_drop must be [ALL]")
        if "no-new-privileges:true" not in svc.get("security_opt", []):
            found.append(f"{where}: no-new-privileges missing")
        if not any(t.startswith("/tmp") for t in svc.get("tmpfs", [])):
            found.append(f"{where}: /tmp must be a tmpfs")
        if ":latest" in svc["image"] or ("@" not in svc["image"] and ":" not in svc["image"].split("/")[-1]):
            found.append(f"{where}: image needs a version tag")
        for volume in svc.get("volumes", []):
            if volume.startswith("${") and "/models/" in volume and not volume.endswith(":ro"):
                found.append(f"{where}: weights must be mounted read-only")
        command = [*svc.get("entrypoint", []), *svc.get("command", [])]
        if command[:2] == ["vllm", "serve"]:
            env = svc.get("environment", {})
            for var in TELEMETRY_OFF:
                if str(env.get(var)) != "1":
                    found.append(f"{where}: {var} must be 1")
            if any(str(a).startswith(("--enable-log-requests", "--api-key")) for a in command):
                found.append(f"{where}: request logging or an API key in argv")
            if "healthcheck" not in svc:
                found.append(f"{where}: no healthcheck")
            deps = svc.get("depends_on", {})
            if not any(d.get("condition") == "service_completed_successfully" for d in deps.values()):
                found.append(f"{where}: must wait for its weights check")
    return found


def test_compose_file_is_valid_against_the_compose_spec():
    assert schema_errors(load()) == []


def test_compose_file_is_hardened():
    assert problems(load()) == []


def test_compose_has_the_appliance_a_model_and_a_judge():
    services = load()["services"]
    assert {"appliance", "vllm-model", "vllm-judge"} <= set(services)
    assert services["appliance"]["depends_on"]["vllm-model"]["condition"] == "service_healthy"
    gpus = [s["deploy"]["resources"]["reservations"]["devices"][0] for s in services.values() if "deploy" in s]
    assert len(gpus) == 2 and all(d["capabilities"] == ["gpu"] for d in gpus)
    assert services["appliance"]["healthcheck"]["test"] == ["CMD", "medhelm-local", "doctor", "--json"]


def test_compose_appliance_config_is_valid():
    from medhelm_local.home.config import DEFAULT_ALLOWLIST, ApplianceConfig

    config = ApplianceConfig.model_validate(
        yaml.safe_load((REPO / "deploy" / "appliance.compose.yaml").read_text(encoding="utf-8"))
    )
    assert config.allowlist[: len(DEFAULT_ALLOWLIST)] == DEFAULT_ALLOWLIST
    assert set(config.allowlist[len(DEFAULT_ALLOWLIST) :]) == {"http://vllm-model", "http://vllm-judge"}
    assert config.judges == ["judge-a"]


@pytest.mark.parametrize(
    "path, value",
    [
        (["services", "appliance", "privilegd"], True),  # a typo the engine would ignore silently
        (["services", "vllm-model", "shm_size"], {"size": "16g"}),
        (["networks", "medhelm-internal", "drivr"], "bridge"),
    ],
)
def test_schema_rejects_a_broken_compose_file(path, value):
    doc = copy.deepcopy(load())
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert schema_errors(doc)


@pytest.mark.parametrize(
    "mutation, expected",
    [
        (lambda d: d["networks"]["medhelm-internal"].update(internal=False), "is not internal"),
        (lambda d: d["services"]["vllm-model"].update(ports=["8000:8000"]), "ports is not allowed"),
        (lambda d: d["services"]["appliance"].update(network_mode="host"), "network_mode is not allowed"),
        (lambda d: d["services"]["appliance"].update(user="0:0"), "numeric non-root user"),
        (lambda d: d["services"]["vllm-judge"].update(read_only=False), "read_only must be true"),
        (lambda d: d["services"]["vllm-judge"]["command"].append("--enable-log-requests"), "request logging"),
        (lambda d: d["services"]["vllm-model"]["environment"].pop("DO_NOT_TRACK"), "DO_NOT_TRACK must be 1"),
        (lambda d: d["services"]["vllm-model"].pop("depends_on"), "wait for its weights check"),
        (lambda d: d["services"]["appliance"].update(image="medhelm-local:latest"), "version tag"),
    ],
)
def test_hardening_check_rejects_a_weakened_compose_file(mutation, expected):
    doc = copy.deepcopy(load())
    mutation(doc)
    assert any(expected in p for p in problems(doc)), problems(doc)


def test_vendored_schema_is_the_compose_spec():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert schema["$id"] == "compose_spec.json" and schema["title"] == "Compose Specification"
    assert (DEPLOY_TESTS / "COMPOSE-SPEC-LICENSE").read_text().lstrip().startswith("Apache License")


def test_appliance_reads_policy_and_pin_from_read_only_files_and_waits_for_the_lock():
    """Team conventions on the single host: the export policy is a read-only mount (MEDHELM_EXPORT_POLICY), the
    audit key pin comes from an env file the appliance does not own, and writers wait for the store's lock."""
    appliance = load()["services"]["appliance"]
    env = appliance["environment"]
    assert env["MEDHELM_EXPORT_POLICY"] == "/etc/medhelm/policy/export-policy.yaml"
    assert "./policy/export-policy.yaml:/etc/medhelm/policy/export-policy.yaml:ro" in appliance["volumes"]
    assert int(env["MEDHELM_LOCK_TIMEOUT_S"]) >= 60
    assert {"path": "./policy/audit.env", "required": False} in appliance["env_file"]
    shipped = REPO / "deploy" / "policy" / "export-policy.yaml"
    assert shipped.read_text() == (REPO / "policies" / "export-policy.yaml").read_text()


def _reads(service: dict[str, Any]) -> dict[str, Any]:
    """What a compose service's appliance process reads from outside its home: the export policy (the host file
    behind MEDHELM_EXPORT_POLICY, and whether the mount is read-only), the env files (the audit key pin), the lock
    wait and the offline/telemetry switches."""
    env = service.get("environment", {})
    policy = env.get("MEDHELM_EXPORT_POLICY")
    mounts = [v.split(":") for v in service.get("volumes", []) if isinstance(v, str)]
    source = [(host, rest) for host, target, *rest in mounts if policy and target == policy]
    return {
        "policy": source[0][0] if source else None,
        "policy read-only": bool(source) and source[0][1] == ["ro"],
        "env files": sorted(f["path"] for f in service.get("env_file", [])),
        "lock wait": env.get("MEDHELM_LOCK_TIMEOUT_S"),
        "switches": {k: env.get(k) for k in ("VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "HF_HUB_OFFLINE",
                                             "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")},
    }


def test_compose_console_reads_the_same_policy_and_pin_as_the_appliance():
    """The console's compliance pages approve exports and verify the audit trail: on the single host they must use
    the site's export policy (without MEDHELM_EXPORT_POLICY the packaged default applies, which lists no approver)
    and the pinned audit key, exactly as the CLI does."""
    console = yaml.safe_load((REPO / "deploy" / "docker-compose.console.yml").read_text(encoding="utf-8"))
    appliance = _reads(load()["services"]["appliance"])
    assert appliance["policy"] == "./policy/export-policy.yaml" and appliance["policy read-only"]
    assert _reads(console["services"]["console"]) == appliance
