"""The console in the Helm chart, rendered by the real Helm engine: oauth2-proxy in front, the console on
loopback trusting only it, Pod Security "restricted", ingress only from the ingress controller, manifests valid
against the Kubernetes schemas and the repository's Rego policies; the compose file's console service."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from medhelm_local.home.config import ApplianceConfig, ConsoleRole
from tests.deploy.deploykit import REPO, REQUIRED_ENV, all_containers, by_kind, interpolate, pod_spec, render

CONSOLE: dict[str, Any] = {
    "enabled": True,
    "roles": {"informatics": ["medhelm-informatics"], "compliance": ["medhelm-compliance"],
              "clinician": ["medhelm-clinicians"], "it": ["medhelm-it"]},
    "oauth2Proxy": {"oidcIssuerUrl": "https://idp.hospital.example/realms/staff", "clientId": "medhelm-console",
                    "existingSecret": "medhelm-console-oidc"},
    "egress": [{"to": [{"ipBlock": {"cidr": "10.20.0.5/32"}}], "ports": [{"port": 443, "protocol": "TCP"}]}],
    "ingress": {"enabled": True, "host": "medhelm.hospital.example", "className": "nginx", "tlsSecret": "tls"},
}
JUDGE = {"name": "judge-a", "weights": {"claim": "weights"}}


def _component(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in by_kind(docs, kind)
            if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "console"]


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render({"console": CONSOLE, "judges": [JUDGE], "keys": {"mode": "existingSecret",
                                                                   "existingSecret": "medhelm-keys"}})


def test_console_is_off_by_default() -> None:
    assert not [d for d in render({}) if "console" in d["metadata"]["name"]]


def test_console_config_trusts_only_the_sidecar_and_maps_groups(docs: list[dict[str, Any]]) -> None:
    (config_map,) = _component(docs, "ConfigMap")
    config = ApplianceConfig.model_validate(yaml.safe_load(config_map["data"]["appliance.yaml"]))
    assert config.console.trusted_proxies == ["127.0.0.1/32"]
    assert config.console.roles[ConsoleRole.CLINICIAN] == ["medhelm-clinicians"]
    assert config.judges == ["judge-a"]  # the appliance's own configuration, plus the console section


def test_console_pod_is_restricted_and_only_oauth2_proxy_listens(docs: list[dict[str, Any]]) -> None:
    (deployment,) = _component(docs, "Deployment")
    spec = pod_spec(deployment)
    assert spec is not None
    assert spec["automountServiceAccountToken"] is False and spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for container in all_containers(spec):
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"] and sc["runAsNonRoot"] is True
        assert container["resources"]["limits"]["memory"]
    containers = {c["name"]: c for c in spec["containers"]}
    console, proxy = containers["console"], containers["oauth2-proxy"]
    assert console["args"][console["args"].index("--host") + 1] == "127.0.0.1"
    assert "ports" not in console
    assert "--pass-user-headers=true" in proxy["args"] and "--upstream=http://127.0.0.1:8080/" in proxy["args"]
    assert {a for a in proxy["args"] if a.startswith("--allowed-group=")} == {
        f"--allowed-group={g}" for g in ("medhelm-informatics", "medhelm-compliance", "medhelm-clinicians",
                                         "medhelm-it")}
    assert [a for a in proxy["args"] if "secret" in a.lower()] == [
        "--client-secret-file=/etc/oauth2-proxy/oidc/client-secret"]  # a path, never a secret
    env = {e["name"]: e.get("value") for e in console["env"]}
    assert env["MEDHELM_KEYS_DIR"] == "/run/medhelm/keys"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["config"]["configMap"]["name"].endswith("-console")
    for container in all_containers(spec):  # every mount names a volume of the pod
        assert {m["name"] for m in container.get("volumeMounts", [])} <= set(volumes), container["name"]
    (service,) = _component(docs, "Service")
    assert service["spec"]["type"] == "ClusterIP" and service["spec"]["ports"][0]["port"] == 4180


def test_oauth2_proxy_reads_its_secrets_from_files_never_from_its_environment(docs: list[dict[str, Any]],
                                                                              tmp_path: Path) -> None:
    """The client secret is read from the mounted Secret (--client-secret-file); the cookie secret, which
    oauth2-proxy v7.7 takes from no file of its own, from a config file an init container writes to memory. No
    container has a secret in its environment (checkov CKV_K8S_35), where child processes and crash reports
    would inherit it."""
    (deployment,) = _component(docs, "Deployment")
    spec = pod_spec(deployment)
    assert spec is not None
    for container in all_containers(spec):
        assert not [e for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})], container["name"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["oidc-secret"]["secret"]["secretName"] == "medhelm-console-oidc"
    assert volumes["oauth2-proxy-config"]["emptyDir"]["medium"] == "Memory"
    proxy = next(c for c in spec["containers"] if c["name"] == "oauth2-proxy")
    assert {"--config=/run/oauth2-proxy/oauth2-proxy.cfg",
            "--client-secret-file=/etc/oauth2-proxy/oidc/client-secret"} <= set(proxy["args"])
    mounts = {m["mountPath"]: m for m in proxy["volumeMounts"]}
    assert mounts["/etc/oauth2-proxy/oidc"]["name"] == "oidc-secret" and mounts["/etc/oauth2-proxy/oidc"]["readOnly"]
    assert mounts["/run/oauth2-proxy"]["name"] == "oauth2-proxy-config" and mounts["/run/oauth2-proxy"]["readOnly"]

    # The init container's script, against a fake Secret volume.
    init = next(c for c in spec["initContainers"] if c["name"] == "oauth2-proxy-config")
    assert init["command"] == ["python3", "-c"]
    secret_dir, run_dir = tmp_path / "oidc", tmp_path / "run"
    secret_dir.mkdir()
    run_dir.mkdir()
    script = init["args"][0].replace("/etc/oauth2-proxy/oidc", str(secret_dir)).replace("/run/oauth2-proxy",
                                                                                         str(run_dir))

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)

    cookie = "q0zV9hJ4m1bX2cY3dZ4eA5fB6gC7hD8i-_=="
    (secret_dir / "client-secret").write_text("client-secret-value")
    # Again, as after a pod restart that kept the emptyDir; and a raw secret that TOML must escape.
    for value in (cookie, cookie, 'raw "secret" \\ of 32 characters!'):
        (secret_dir / "cookie-secret").write_text(value)
        assert run().returncode == 0
        config = run_dir / "oauth2-proxy.cfg"
        assert tomllib.loads(config.read_text(encoding="ascii")) == {"cookie_secret": value}
        assert config.stat().st_mode & 0o777 == 0o400
    for bad in (f"{cookie}\n", "", f"\x1b{cookie}", f"{cookie}\u00e9"):
        (secret_dir / "cookie-secret").write_text(bad)
        proc = run()
        assert proc.returncode != 0 and "medhelm-console-oidc: cookie-secret" in proc.stderr
        assert cookie not in proc.stderr
    (secret_dir / "client-secret").unlink()
    proc = run()
    assert proc.returncode != 0 and "medhelm-console-oidc has no key client-secret" in proc.stderr


def test_console_ingress_only_from_the_ingress_controller(docs: list[dict[str, Any]]) -> None:
    policies = {p["metadata"]["name"]: p for p in _component(docs, "NetworkPolicy")}
    console = next(p for n, p in policies.items() if n.endswith("-console"))
    (rule,) = console["spec"]["ingress"]
    (peer,) = rule["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "ingress-nginx"}
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "ingress-nginx"}
    assert rule["ports"] == [{"protocol": "TCP", "port": 4180}]
    egress_targets = [peer for r in console["spec"]["egress"] for peer in r["to"]]
    assert {"ipBlock": {"cidr": "10.20.0.5/32"}} in egress_targets  # the identity provider, as configured
    probes = next(p for n, p in policies.items() if n.endswith("-console-probes"))
    assert probes["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "model-server"
    assert [r["ports"] for r in probes["spec"]["ingress"]] == [[{"protocol": "TCP", "port": 8000}]]
    (ingress,) = _component(docs, "Ingress")
    assert ingress["spec"]["rules"][0]["host"] == "medhelm.hospital.example"


@pytest.mark.parametrize("version", ["1.27", kubernetes_validate.latest_version()])
def test_console_manifests_match_the_kubernetes_schemas(docs: list[dict[str, Any]], version: str) -> None:
    for doc in [d for d in docs if "console" in d["metadata"]["name"]]:
        kubernetes_validate.validate(doc, version, strict=True)


def test_console_manifests_pass_the_rego_policies(docs: list[dict[str, Any]]) -> None:
    import regopy

    rego = regopy.Interpreter()
    for module in sorted((REPO / "policies" / "rego").glob("*.rego")):
        rego.add_module(module.name, module.read_text(encoding="utf-8"))
    rego.set_input(regopy.Input({"manifests": docs}))
    for package in ("pod_security", "network"):
        output = rego.query(f"data.medhelm.kubernetes.{package}.deny")
        assert output.ok(), str(output)
        (value,) = json.loads(str(output))["expressions"]
        assert value == [], f"{package}: {value}"


@pytest.mark.parametrize(("values", "message"), [
    ({"enabled": True, "roles": CONSOLE["roles"]}, "oidcIssuerUrl"),
    ({**CONSOLE, "roles": {}}, "at least one group"),
    ({**CONSOLE, "oauth2Proxy": {**CONSOLE["oauth2Proxy"], "extraArgs": ["--client-secret=abc"]}}, "extraArgs"),
    # The chart's --config holds the cookie secret: another would leave oauth2-proxy without it.
    ({**CONSOLE, "oauth2Proxy": {**CONSOLE["oauth2Proxy"], "extraArgs": ["--config=/tmp/x.cfg"]}}, "extraArgs"),
    ({**CONSOLE, "oauth2Proxy": {**CONSOLE["oauth2Proxy"], "oidcIssuerUrl": "http://idp"}}, "oidcIssuerUrl"),
    # Default-deny egress and no rule to the identity provider: oauth2-proxy could never reach it.
    ({**CONSOLE, "egress": []}, "needs console.egress"),
])
def test_incomplete_console_values_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(Exception, match=message):
        render({"console": values})


def test_without_network_policies_the_console_needs_no_egress_rule() -> None:
    docs = render({"console": {**CONSOLE, "egress": []}, "networkPolicy": {"enabled": False}})
    assert _component(docs, "Deployment") and not by_kind(docs, "NetworkPolicy")


@pytest.mark.parametrize("tls_secret", ["tls", ""], ids=["own-certificate", "controller-default-certificate"])
def test_console_ingress_is_always_tls(tls_secret: str) -> None:
    """oauth2-proxy sets Secure cookies and the pages carry PHI-derived results: the Ingress always terminates
    TLS for the console's host, with the site's certificate or else the controller's default one."""
    console = {**CONSOLE, "ingress": {**CONSOLE["ingress"], "tlsSecret": tls_secret}}
    (ingress,) = _component(render({"console": console}), "Ingress")
    (tls,) = ingress["spec"]["tls"]
    assert tls["hosts"] == [ingress["spec"]["rules"][0]["host"]] == ["medhelm.hospital.example"]
    assert tls.get("secretName") == (tls_secret or None)
    for version in ("1.27", kubernetes_validate.latest_version()):
        kubernetes_validate.validate(ingress, version, strict=True)


def _network_denials(docs: list[dict[str, Any]]) -> list[str]:
    import regopy

    rego = regopy.Interpreter()
    for module in sorted((REPO / "policies" / "rego").glob("*.rego")):
        rego.add_module(module.name, module.read_text(encoding="utf-8"))
    rego.set_input(regopy.Input({"manifests": docs}))
    output = rego.query("data.medhelm.kubernetes.network.deny")
    assert output.ok(), str(output)
    (value,) = json.loads(str(output))["expressions"]
    return list(value)


def test_the_network_policy_rules_keep_the_console_narrow(docs: list[dict[str, Any]]) -> None:
    import copy

    def console_policy(d: list[dict[str, Any]]) -> dict[str, Any]:
        return next(p for p in _component(d, "NetworkPolicy") if p["metadata"]["name"].endswith("-console"))

    wide = copy.deepcopy(docs)  # the whole ingress namespace instead of the controller's pods
    del console_policy(wide)["spec"]["ingress"][0]["from"][0]["podSelector"]
    assert any("admits only the ingress controller" in m for m in _network_denials(wide))
    plain = copy.deepcopy(docs)  # an identity provider over plain HTTP
    console_policy(plain)["spec"]["egress"][1]["ports"] = [{"port": 80, "protocol": "TCP"}]
    assert any("ipBlock" in m for m in _network_denials(plain))
    other = copy.deepcopy(docs)  # an Ingress to something other than the console
    _component(other, "Ingress")[0]["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] = "vllm"
    assert any("not exposed through an Ingress" in m for m in _network_denials(other))


_SITE_SERVER = {"to": [{"ipBlock": {"cidr": "10.20.0.7/32"}}], "ports": [{"protocol": "TCP", "port": 8000}]}
_SITE_PODS = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "llm"}},
                      "podSelector": {"matchLabels": {"app": "tgi"}}}],
              "ports": [{"protocol": "TCP", "port": 8080}]}


def test_console_reaches_the_extra_model_servers_the_runner_reaches() -> None:
    """The IT page probes every model endpoint, appliance.extraModels included: the console's NetworkPolicy has the
    runner's egress to them (networkPolicy.extraRunnerEgress), and beyond the model servers only console.egress
    (the identity provider, for the oauth2-proxy sidecar). The Rego policy admits such a rule for the console only
    while the runner's policy has it too."""
    import copy

    extra = [{"name": "site-llm", "kind": "openai-compatible", "base_urls": ["http://tgi.llm.svc.cluster.local:8080/v1"]}]
    docs = render({"console": CONSOLE, "judges": [JUDGE], "appliance": {"extraModels": extra},
                   "networkPolicy": {"extraRunnerEgress": [_SITE_SERVER, _SITE_PODS]}})
    policies = {p["metadata"]["name"].removeprefix("medhelm-medhelm-local-"): p for p in by_kind(docs, "NetworkPolicy")}
    runner, console = policies["runner-egress"]["spec"]["egress"], policies["console"]["spec"]["egress"]
    assert _SITE_SERVER in runner and _SITE_PODS in runner
    assert console == runner + CONSOLE["egress"]
    assert _network_denials(docs) == []

    # Another address for the console alone, or a site server the runner no longer has: denied.
    wide = copy.deepcopy(docs)
    next(p for p in by_kind(wide, "NetworkPolicy") if p["metadata"]["name"].endswith("-console"))["spec"][
        "egress"].append({"to": [{"ipBlock": {"cidr": "10.20.0.8/32"}}], "ports": [{"protocol": "TCP", "port": 8000}]})
    assert any("-console: egress rule 4 uses an ipBlock" in m for m in _network_denials(wide))
    orphan = copy.deepcopy(docs)
    next(p for p in by_kind(orphan, "NetworkPolicy") if p["metadata"]["name"].endswith("-runner-egress"))["spec"][
        "egress"].remove(_SITE_PODS)
    denied = _network_denials(orphan)
    assert any("-console: egress rule 2: a non-DNS peer must be the model servers" in m for m in denied), denied


def test_compose_console_overlay_is_valid_and_trusts_only_its_sidecar() -> None:
    import jsonschema

    schema = json.loads((REPO / "tests" / "deploy" / "compose-spec.schema.json").read_text(encoding="utf-8"))
    base = yaml.safe_load((REPO / "deploy" / "docker-compose.yml").read_text(encoding="utf-8"))
    overlay = yaml.safe_load((REPO / "deploy" / "docker-compose.console.yml").read_text(encoding="utf-8"))
    for doc in (overlay, {**base, "services": {**base["services"], **overlay["services"]},
                          "networks": {**base["networks"], **overlay["networks"]}}):
        errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(doc)]
        assert errors == []
    # As `docker compose` runs it, the site's address plan left at its defaults (MEDHELM_CONSOLE_*).
    overlay = interpolate(overlay, REQUIRED_ENV)
    console, proxy = overlay["services"]["console"], overlay["services"]["console-proxy"]
    # The console listens on its fixed address on the internal network it shares with oauth2-proxy alone, and
    # believes identity headers from oauth2-proxy's address there only (the layout: tests/deploy, compose).
    host = console["command"][console["command"].index("--host") + 1]
    assert host == console["networks"]["medhelm-console"]["ipv4_address"]
    assert "network_mode" not in proxy and "--pass-user-headers=true" in proxy["command"]
    assert f"--upstream=http://{host}:8080/" in proxy["command"]
    for service in (console, proxy):
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"] and service["user"] == "10001:10001"
    assert set(console["networks"]) <= set(base["networks"]) | set(overlay["networks"])
    config = ApplianceConfig.model_validate(
        yaml.safe_load((REPO / "deploy" / "appliance.compose.yaml").read_text(encoding="utf-8")))
    assert config.console.trusted_proxies == [f"{proxy['networks']['medhelm-console']['ipv4_address']}/32"]
    assert config.console.roles[ConsoleRole.COMPLIANCE] == ["medhelm-compliance"]


def test_console_shares_the_node_of_a_read_write_once_home(docs: list[dict[str, Any]]) -> None:
    """The console mounts the home and audit volumes: while they are ReadWriteOnce it carries the home-volume
    label and a required pod affinity to it, like the runner and toolbox (else: Multi-Attach on another node)."""
    (deployment,) = _component(docs, "Deployment")
    spec = pod_spec(deployment)
    assert spec is not None
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert all(labels.get(k) == v for k, v in term["labelSelector"]["matchLabels"].items())
    assert "medhelm.local/home-volume" in term["labelSelector"]["matchLabels"]


def _mib(size: str) -> int:
    return int(size[:-2]) * (1024 if size.endswith("Gi") else 1) if size.endswith(("Gi", "Mi")) else -1


@pytest.mark.parametrize(("tmp_size", "extra"), [
    (None, {}),  # the default, 1Gi
    ("4Gi", {}),
    ("768Mi", {}),
    # An ephemeral-storage limit set by hand is replaced by the computed one, as for the runner and toolbox.
    ("8Gi", {"resources": {"limits": {"cpu": "2", "memory": "2Gi", "ephemeral-storage": "1Gi"}}}),
])
def test_console_scratch_size_sets_tmp_and_its_ephemeral_storage_limit(tmp_size: str | None,
                                                                         extra: dict[str, Any]) -> None:
    """/tmp is console.tmpSize and the console's ephemeral-storage limit holds it plus 512Mi for logs and the
    writable layer: the pod is never evicted for filling the scratch space it was given."""
    values = {**CONSOLE, **extra} | ({"tmpSize": tmp_size} if tmp_size else {})
    docs = render({"console": values})
    (deployment,) = _component(docs, "Deployment")
    spec = pod_spec(deployment)
    assert spec is not None
    volumes = {v["name"]: v for v in spec["volumes"]}
    expected = tmp_size or "1Gi"
    assert volumes["tmp"]["emptyDir"] == {"sizeLimit": expected}
    containers = {c["name"]: c for c in spec["containers"]}
    console = containers["console"]
    assert console["resources"]["limits"]["ephemeral-storage"] == f"{_mib(expected) + 512}Mi"
    assert {"cpu": "2", "memory": "2Gi"}.items() <= console["resources"]["limits"].items()
    disk = sum(_mib(v["emptyDir"]["sizeLimit"]) for v in spec["volumes"]
               if "emptyDir" in v and v["emptyDir"].get("medium") != "Memory")
    limit = sum(_mib(c["resources"]["limits"].get("ephemeral-storage", "0Mi")) for c in spec["containers"])
    assert limit >= disk + 512
    for doc in _component(docs, "Deployment"):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("tmp_size", ["4G", "0Gi", "1.5Gi", 4, ""])
def test_console_scratch_size_is_validated(tmp_size: Any) -> None:
    import helm_python

    with pytest.raises(helm_python.HelmError, match="/console/tmpSize"):
        render({"console": {**CONSOLE, "tmpSize": tmp_size}})
