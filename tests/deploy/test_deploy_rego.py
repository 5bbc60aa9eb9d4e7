"""Rego policies (policies/rego/*.rego) evaluated with regopy: the rendered chart passes every policy for
every value set, and each rule rejects a manifest that breaks it."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from deploykit import REPO, VALUE_SETS, by_kind, pod_spec

try:
    import regopy
except ImportError as exc:  # pragma: no cover
    raise ImportError("tests/deploy need regopy: pip install -e '.[deploycheck]'") from exc

POLICY_DIR = REPO / "policies" / "rego"
PACKAGES = ["pod_security", "network", "vllm"]


def evaluate(manifests: list[dict[str, Any]]) -> dict[str, list[str]]:
    """deny messages per package. Any compile or evaluation error fails the test (never an empty pass)."""
    rego = regopy.Interpreter()
    modules = sorted(POLICY_DIR.glob("*.rego"))
    assert modules, f"no Rego policies in {POLICY_DIR}"
    for module in modules:
        rego.add_module(module.name, module.read_text(encoding="utf-8"))
    rego.set_input(regopy.Input({"manifests": manifests}))
    result: dict[str, list[str]] = {}
    for package in PACKAGES:
        output = rego.query(f"data.medhelm.kubernetes.{package}.deny")
        assert output.ok(), f"{package}: {output}"
        text = str(output)
        assert text != "undefined", f"data.medhelm.kubernetes.{package}.deny is undefined"
        (value,) = json.loads(text)["expressions"]
        assert isinstance(value, list), f"{package}: deny is not a set: {text}"
        result[package] = sorted(value)
    return result


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_rendered_chart_passes_every_policy(name, rendered):
    assert evaluate(rendered(name)) == {package: [] for package in PACKAGES}


def test_policies_run_on_something(rendered):
    """Guard against a policy that passes because it never matches: the inputs have what the rules inspect."""
    docs = rendered("gpu")
    servers = [
        d
        for d in by_kind(docs, "StatefulSet")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "model-server"
    ]
    assert len(servers) == 4 and by_kind(docs, "CronJob") and by_kind(docs, "NetworkPolicy")
    # The site sets exercise the DNS rules: a node-local cache address (RKE2), port 5353 (OpenShift).
    rke2 = _policy(rendered("rke2"), "-allow-dns")["spec"]["egress"][0]
    assert {"cidr": "169.254.20.10/32"} in [p.get("ipBlock") for p in rke2["to"]]
    openshift = _policy(rendered("openshift"), "-allow-dns")["spec"]["egress"][0]
    assert {p["port"] for p in openshift["ports"]} == {5353}


# --- each rule rejects a manifest that breaks it --------------------------------------------------------

Mutation = Callable[[list[dict[str, Any]]], None]


def _server(docs):
    return next(d for d in by_kind(docs, "StatefulSet") if d["metadata"]["name"].endswith("vllm-llama-3-8b"))


def _vllm(docs):
    return pod_spec(_server(docs))["containers"][0]


def _runner(docs):
    return pod_spec(by_kind(docs, "CronJob")[0])["containers"][0]


def _policy(docs, suffix):
    return next(p for p in by_kind(docs, "NetworkPolicy") if p["metadata"]["name"].endswith(suffix))


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(obj: dict[str, Any]) -> None:
        for key in path[:-1]:
            obj = obj.setdefault(key, {})
        obj[path[-1]] = value

    return apply


def _m_run_as_root(docs):
    _set(["securityContext", "runAsNonRoot"], False)(_runner(docs))


def _m_uid_zero(docs):
    _set(["securityContext", "runAsUser"], 0)(_runner(docs))


def _m_no_seccomp(docs):
    del pod_spec(_server(docs))["securityContext"]["seccompProfile"]
    for c in pod_spec(_server(docs))["containers"]:
        del c["securityContext"]["seccompProfile"]


def _m_unconfined(docs):
    _set(["securityContext", "seccompProfile", "type"], "Unconfined")(_vllm(docs))


def _m_privilege_escalation(docs):
    _set(["securityContext", "allowPrivilegeEscalation"], True)(pod_spec(_server(docs))["initContainers"][0])


def _m_privileged(docs):
    _set(["securityContext", "privileged"], True)(_vllm(docs))


def _m_keep_capabilities(docs):
    _set(["securityContext", "capabilities"], {"drop": ["NET_RAW"]})(_runner(docs))


def _m_add_capability(docs):
    _set(["securityContext", "capabilities", "add"], ["SYS_ADMIN"])(_vllm(docs))


def _m_writable_root(docs):
    _set(["securityContext", "readOnlyRootFilesystem"], False)(_vllm(docs))


def _m_host_path(docs):
    pod_spec(_server(docs))["volumes"].append({"name": "host", "hostPath": {"path": "/"}})


def _m_host_network(docs):
    pod_spec(_server(docs))["hostNetwork"] = True


def _m_host_port(docs):
    _vllm(docs)["ports"][0]["hostPort"] = 8000


def _m_token(docs):
    pod_spec(by_kind(docs, "CronJob")[0])["automountServiceAccountToken"] = True


def _m_latest(docs):
    _runner(docs)["image"] = "registry.local/medhelm-local:latest"


def _m_untagged(docs):
    _vllm(docs)["image"] = "registry.local/medhelm-local"


def _m_no_memory_limit(docs):
    del _vllm(docs)["resources"]["limits"]["memory"]


def _m_tmp_on_root(docs):
    c = _runner(docs)
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m["mountPath"] != "/tmp"]


def _m_no_default_deny(docs):
    docs.remove(_policy(docs, "-default-deny"))


def _m_deny_misses_pods(docs):
    _policy(docs, "-default-deny")["spec"]["podSelector"] = {"matchLabels": {"app": "something-else"}}


def _m_egress_anywhere(docs):
    _policy(docs, "-runner-egress")["spec"]["egress"].append({"ports": [{"protocol": "TCP", "port": 443}]})


def _m_egress_all_ports(docs):
    del _policy(docs, "-runner-egress")["spec"]["egress"][0]["ports"]


def _m_egress_ip_block(docs):
    _policy(docs, "-runner-egress")["spec"]["egress"].append(
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": 443}]}
    )


def _m_dns_ip_range(docs):
    _policy(docs, "-allow-dns")["spec"]["egress"][0]["to"].append({"ipBlock": {"cidr": "10.0.0.0/8"}})


def _m_dns_every_pod(docs):  # port 53 to every pod of every namespace
    _policy(docs, "-allow-dns")["spec"]["egress"][0]["to"] = [{"namespaceSelector": {}}]


def _m_dns_empty_pod_selector(docs):  # port 53 to every pod of kube-system
    _policy(docs, "-allow-dns")["spec"]["egress"][0]["to"][0]["podSelector"] = {"matchLabels": {}}


def _m_dns_any_port(docs):
    _policy(docs, "-allow-dns")["spec"]["egress"][0]["ports"].append({"protocol": "TCP", "port": 443})


def _m_server_egress(docs):
    policy = copy.deepcopy(_policy(docs, "-runner-egress"))
    policy["metadata"]["name"] = "model-server-egress"
    policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] = "model-server"
    docs.append(policy)


def _m_ingress_anyone(docs):
    _policy(docs, "-model-server-ingress")["spec"]["ingress"].append({"ports": [{"protocol": "TCP", "port": 8000}]})


def _m_runner_ingress(docs):
    policy = copy.deepcopy(_policy(docs, "-model-server-ingress"))
    policy["metadata"]["name"] = "runner-ingress"
    policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] = "runner"
    docs.append(policy)


def _m_load_balancer(docs):
    by_kind(docs, "Service")[0]["spec"]["type"] = "LoadBalancer"


def _m_ingress_object(docs):
    docs.append({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web"}, "spec": {}})


def _m_log_requests(docs):
    _vllm(docs)["args"].append("--enable-log-requests")


def _m_api_key_argv(docs):
    _vllm(docs)["args"].append("--api-key=abc")


def _m_log_outputs(docs):
    _vllm(docs)["args"].append("--enable-log-outputs")


def _m_log_requests_underscores(docs):  # vLLM's parser reads underscores as dashes
    _vllm(docs)["args"].append("--enable_log_requests")


def _m_log_requests_abbreviated(docs):  # argparse takes an unambiguous abbreviation of a long flag
    _vllm(docs)["args"].append("--enable-log-req")


def _m_flags_from_a_file(docs):  # any flag, a refused one included, from a YAML file
    _vllm(docs)["args"] += ["--config", "/weights/flags.yaml"]


def _m_usage_stats(docs):
    c = _vllm(docs)
    c["env"] = [e for e in c["env"] if e["name"] != "VLLM_NO_USAGE_STATS"]


def _m_hub_online(docs):
    c = _vllm(docs)
    for e in c["env"]:
        if e["name"] == "HF_HUB_OFFLINE":
            e["value"] = "0"


def _m_literal_api_key(docs):
    c = _vllm(docs)
    for e in c["env"]:
        if e["name"] == "VLLM_API_KEY":
            e.pop("valueFrom")
            e["value"] = "abc"


def _m_no_weights_check(docs):
    pod_spec(_server(docs))["initContainers"] = []


def _m_short_startup(docs):
    _vllm(docs)["startupProbe"] = {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": 10,
        "failureThreshold": 6,
    }


def _m_probe_path(docs):
    _vllm(docs)["livenessProbe"]["httpGet"]["path"] = "/v1/models"


def _m_shm_on_disk(docs):
    for v in pod_spec(_server(docs))["volumes"]:
        if v["name"] == "shm":
            v["emptyDir"] = {}


def _m_weights_writable(docs):
    for v in pod_spec(_server(docs))["volumes"]:
        if v["name"] == "weights":
            v["persistentVolumeClaim"]["readOnly"] = False


MUTATIONS: dict[str, tuple[Mutation, str, str]] = {
    "run-as-root": (_m_run_as_root, "pod_security", "runAsNonRoot must be true"),
    "uid-zero": (_m_uid_zero, "pod_security", "runAsUser must not be 0"),
    "no-seccomp": (_m_no_seccomp, "pod_security", "seccompProfile is not set"),
    "seccomp-unconfined": (_m_unconfined, "pod_security", "seccompProfile.type must be RuntimeDefault"),
    "privilege-escalation": (_m_privilege_escalation, "pod_security", "allowPrivilegeEscalation must be false"),
    "privileged": (_m_privileged, "pod_security", "privileged is not allowed"),
    "capabilities-kept": (_m_keep_capabilities, "pod_security", "capabilities must drop ALL"),
    "capability-added": (_m_add_capability, "pod_security", "no capability may be added"),
    "writable-root": (_m_writable_root, "pod_security", "readOnlyRootFilesystem must be true"),
    "host-path": (_m_host_path, "pod_security", "type hostPath is not allowed"),
    "host-network": (_m_host_network, "pod_security", "hostNetwork is not allowed"),
    "host-port": (_m_host_port, "pod_security", "hostPort is not allowed"),
    "sa-token": (_m_token, "pod_security", "automountServiceAccountToken must be false"),
    "latest-image": (_m_latest, "pod_security", "never latest"),
    "untagged-image": (_m_untagged, "pod_security", "needs a version tag or a digest"),
    "no-memory-limit": (_m_no_memory_limit, "pod_security", "a memory limit is required"),
    "tmp-on-root": (_m_tmp_on_root, "pod_security", "/tmp must be an emptyDir"),
    "no-default-deny": (_m_no_default_deny, "network", "no default-deny NetworkPolicy"),
    "deny-misses-pods": (_m_deny_misses_pods, "network", "not selected by a default-deny NetworkPolicy"),
    "egress-anywhere": (_m_egress_anywhere, "network", "allows every destination"),
    "egress-all-ports": (_m_egress_all_ports, "network", "allows every port"),
    "egress-ip-block": (_m_egress_ip_block, "network", "uses an ipBlock"),
    "dns-ip-range": (_m_dns_ip_range, "network", "must be one address"),
    "dns-every-pod": (_m_dns_every_pod, "network", "a DNS peer must name the DNS pods"),
    "dns-empty-pod-selector": (_m_dns_empty_pod_selector, "network", "a DNS peer must name the DNS pods"),
    "dns-any-port": (_m_dns_any_port, "network", "only the runner may open connections"),
    "server-egress": (_m_server_egress, "network", "only the runner may open connections"),
    "ingress-anyone": (_m_ingress_anyone, "network", "allows every source"),
    "runner-ingress": (_m_runner_ingress, "network", "only model servers may accept connections"),
    "load-balancer": (_m_load_balancer, "network", "exposes the appliance outside the cluster"),
    "ingress-object": (_m_ingress_object, "network", "not exposed through an Ingress"),
    "log-requests": (_m_log_requests, "vllm", "flag --enable-log-requests is not allowed"),
    "api-key-argv": (_m_api_key_argv, "vllm", "flag --api-key is not allowed"),
    "log-outputs": (_m_log_outputs, "vllm", "flag --enable-log-outputs is not allowed"),
    "log-requests-underscores": (_m_log_requests_underscores, "vllm", "flag --enable_log_requests is not allowed"),
    "log-requests-abbreviated": (_m_log_requests_abbreviated, "vllm", "flag --enable-log-req is not allowed"),
    "flags-from-a-file": (_m_flags_from_a_file, "vllm", "flag --config is not allowed"),
    "usage-stats": (_m_usage_stats, "vllm", "env VLLM_NO_USAGE_STATS must be 1"),
    "hub-online": (_m_hub_online, "vllm", "env HF_HUB_OFFLINE must be 1"),
    "literal-api-key": (_m_literal_api_key, "vllm", "VLLM_API_KEY must come from a Secret"),
    "no-weights-check": (_m_no_weights_check, "vllm", "no verify-weights init container"),
    "short-startup-probe": (_m_short_startup, "vllm", "startupProbe allows less than 600 s"),
    "liveness-path": (_m_probe_path, "vllm", "livenessProbe must be an HTTP GET on /health"),
    "shm-on-disk": (_m_shm_on_disk, "vllm", "/dev/shm must be an emptyDir with medium Memory"),
    "weights-writable": (_m_weights_writable, "vllm", "model weights must be mounted read-only"),
}


@pytest.mark.parametrize("case", list(MUTATIONS))
def test_policy_rejects_a_breaking_manifest(case, rendered):
    mutate, package, message = MUTATIONS[case]
    docs = rendered("gpu")
    mutate(docs)
    denied = evaluate(docs)
    assert any(message in m for m in denied[package]), f"{case}: {package} did not reject: {denied}"


def test_policy_rejects_a_bare_pod():
    """A hand-written Pod with nothing set breaks many rules at once; none of them may stay silent."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "naked"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }
    denied = evaluate([pod])
    expected = [
        "runAsNonRoot",
        "seccompProfile",
        "allowPrivilegeEscalation",
        "drop ALL",
        "readOnlyRootFilesystem",
        "automountServiceAccountToken",
        "memory limit",
        "version tag",
        "/tmp must be an emptyDir",
    ]
    for fragment in expected:
        assert any(fragment in m for m in denied["pod_security"]), fragment
    assert any("no default-deny" in m for m in denied["network"])


# The schema refuses at install what the Rego policy denies in the rendered manifests: the DNS peers.
_KUBE_SYSTEM = {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
_KUBE_DNS = {"namespaceSelector": _KUBE_SYSTEM, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}
DNS_PEERS = {
    "every-pod-of-the-cluster": [{"namespaceSelector": {}}],
    "every-pod-of-a-namespace": [{"namespaceSelector": _KUBE_SYSTEM}],
    "empty-pod-selector": [{"namespaceSelector": {}, "podSelector": {}}],
    "empty-match-labels": [{"podSelector": {"matchLabels": {}, "matchExpressions": []}}],
    "ip-range": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
    "internet": [{"ipBlock": {"cidr": "0.0.0.0/0"}}],
    "one-bad-peer-among-good": [_KUBE_DNS, {"namespaceSelector": {}}],
    "kube-dns": [_KUBE_DNS],
    "dns-pods-in-any-namespace": [{"namespaceSelector": {},
                                   "podSelector": {"matchExpressions": [{"key": "k8s-app", "operator": "In",
                                                                         "values": ["kube-dns"]}]}}],
    "node-local-cache": [{"ipBlock": {"cidr": "169.254.20.10/32"}}],
}
DNS_PEERS_ALLOWED = {"kube-dns", "dns-pods-in-any-namespace", "node-local-cache"}


@pytest.mark.parametrize("case", list(DNS_PEERS))
def test_schema_and_policy_agree_on_dns_peers(case, rendered):
    import jsonschema

    schema = json.loads((REPO / "helm-chart" / "values.schema.json").read_text(encoding="utf-8"))
    peers = DNS_PEERS[case]
    in_schema = jsonschema.Draft7Validator(schema).is_valid({"networkPolicy": {"dns": {"peers": peers}}})
    docs = rendered("default")
    _policy(docs, "-allow-dns")["spec"]["egress"][0]["to"] = copy.deepcopy(peers)
    in_policy = evaluate(docs)["network"] == []
    assert (in_schema, in_policy) == ((True, True) if case in DNS_PEERS_ALLOWED else (False, False))


# vLLM's parser reads a flag with underscores as dashes and takes an unambiguous abbreviation (argparse): the schema
# (models[].extraArgs) and the policy refuse exactly what `medhelm-local serve vllm --extra-arg` refuses.
VLLM_ARGS = ["--enable-log-requests", "--enable_log_requests", "--enable-log-req", "--enable_log_req=true",
             "--enable-log-out", "--api-key=abc", "--api-k=abc", "--api_ke", "--config", "--conf=/weights/flags.yaml",
             "--enable-prefix-caching", "--enable-lora", "--max_num_seqs=8", "--config-format=hf",
             "--api-server-count=2", "-tp", "2", "--disable-uvicorn-access-log"]


@pytest.mark.parametrize("arg", VLLM_ARGS)
def test_schema_policy_and_serve_vllm_agree_on_vllm_flags(arg, rendered):
    import jsonschema

    from medhelm_local.inference.vllm import forbidden_arg

    schema = json.loads((REPO / "helm-chart" / "values.schema.json").read_text(encoding="utf-8"))
    model = {"name": "m", "weights": {"claim": "w"}, "extraArgs": [arg]}
    in_schema = jsonschema.Draft7Validator(schema).is_valid({"models": [model]})
    docs = rendered("gpu")
    _vllm(docs)["args"].append(arg)
    in_policy = evaluate(docs)["vllm"] == []
    refused_by_cli = forbidden_arg(arg) is not None
    assert (in_schema, in_policy) == (not refused_by_cli, not refused_by_cli)


# The same agreement for the console's identity-provider rule (HTTPS, console.egress): its peers name the identity
# provider, never every pod, every namespace or every address.
_CONSOLE = {
    "enabled": True,
    "roles": {"it": ["medhelm-it"]},
    "oauth2Proxy": {"oidcIssuerUrl": "https://idp.hospital.example/realms/staff", "clientId": "medhelm-console",
                    "existingSecret": "medhelm-console-oidc"},
    "egress": [{"to": [{"ipBlock": {"cidr": "10.20.0.5/32"}}], "ports": [{"port": 443, "protocol": "TCP"}]}],
}
_KEYCLOAK_NS = {"matchLabels": {"kubernetes.io/metadata.name": "keycloak"}}
_KEYCLOAK_PODS = {"matchLabels": {"app.kubernetes.io/name": "keycloak"}}
IDP_PEERS = {
    "every-pod-of-the-cluster": [{"namespaceSelector": {}}],
    "every-pod-of-the-cluster-both-empty": [{"namespaceSelector": {}, "podSelector": {}}],
    "every-pod-of-the-namespace": [{"podSelector": {}}],
    "empty-match-labels": [{"namespaceSelector": {"matchLabels": {}, "matchExpressions": []}}],
    "named-pods-in-every-namespace": [{"namespaceSelector": {}, "podSelector": _KEYCLOAK_PODS}],
    "empty-pod-selector-in-a-namespace": [{"namespaceSelector": _KEYCLOAK_NS, "podSelector": {}}],
    "internet-with-exceptions": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "192.168.0.0/16"]}}],
    "internet-ipv6": [{"ipBlock": {"cidr": "::/0"}}],
    "internet-in-two-halves": [{"ipBlock": {"cidr": "0.0.0.0/1"}}, {"ipBlock": {"cidr": "128.0.0.0/1"}}],
    "ipv6-range-broader-than-32": [{"ipBlock": {"cidr": "2001::/16"}}],
    "one-bad-peer-among-good": [{"ipBlock": {"cidr": "10.20.0.5/32"}}, {"namespaceSelector": {}}],
    "idp-address": [{"ipBlock": {"cidr": "10.20.0.5/32"}}],
    "idp-subnet-with-exceptions": [{"ipBlock": {"cidr": "10.20.0.0/24", "except": ["10.20.0.128/25"]}}],
    "site-network": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
    "site-ipv6-prefix": [{"ipBlock": {"cidr": "2001:db8::/32"}}],
    "idp-namespace": [{"namespaceSelector": _KEYCLOAK_NS}],
    "idp-pods": [{"namespaceSelector": _KEYCLOAK_NS, "podSelector": _KEYCLOAK_PODS}],
    "idp-pods-by-expression": [{"namespaceSelector": _KEYCLOAK_NS, "podSelector": {"matchExpressions": [
        {"key": "app.kubernetes.io/name", "operator": "In", "values": ["keycloak"]}]}}],
}
IDP_PEERS_ALLOWED = {"idp-address", "idp-subnet-with-exceptions", "site-network", "site-ipv6-prefix",
                     "idp-namespace", "idp-pods", "idp-pods-by-expression"}


@pytest.fixture(scope="module")
def console_docs() -> list[dict[str, Any]]:
    from deploykit import render

    return render({"console": _CONSOLE})


@pytest.mark.parametrize("case", list(IDP_PEERS))
def test_schema_and_policy_agree_on_identity_provider_peers(case, console_docs):
    """A console egress rule on 443 whose peer selects every pod or namespace (an empty selector) or every
    address (/0, whatever it excepts) is HTTPS to the whole cluster or the internet: the schema refuses it in
    console.egress and the Rego policy denies it in the rendered NetworkPolicy."""
    import jsonschema

    schema = json.loads((REPO / "helm-chart" / "values.schema.json").read_text(encoding="utf-8"))
    peers = IDP_PEERS[case]
    rule = {"to": copy.deepcopy(peers), "ports": [{"port": 443, "protocol": "TCP"}]}
    in_schema = jsonschema.Draft7Validator(schema).is_valid({"console": _CONSOLE | {"egress": [rule]}})
    docs = copy.deepcopy(console_docs)
    policy = _policy(docs, "-console")
    (idp_rule,) = [r for r in policy["spec"]["egress"] if r["ports"] == rule["ports"]]
    idp_rule["to"] = copy.deepcopy(peers)
    network = evaluate(docs)["network"]
    in_policy = network == []
    assert (in_schema, in_policy) == ((True, True) if case in IDP_PEERS_ALLOWED else (False, False)), network
    if not in_policy:
        assert all("an identity-provider peer selects every pod or namespace" in m
                   or "is broader than /8 (IPv4) or /32 (IPv6)" in m for m in network), network


# The same agreement for the runner's extra egress (networkPolicy.extraRunnerEgress: an OpenAI-compatible server
# outside the chart): named pods, or one address; never a range, a whole namespace or every pod.
_TGI_NS = {"matchLabels": {"kubernetes.io/metadata.name": "llm"}}
_TGI_PODS = {"matchLabels": {"app": "tgi"}}
RUNNER_PEERS = {
    "server-pods-in-another-namespace": [{"namespaceSelector": _TGI_NS, "podSelector": _TGI_PODS}],
    "server-pods-in-the-release-namespace": [{"podSelector": _TGI_PODS}],
    "server-address": [{"ipBlock": {"cidr": "10.20.0.7/32"}}],
    "server-ipv6-address": [{"ipBlock": {"cidr": "fd00:20::7/128"}}],
    "address-range": [{"ipBlock": {"cidr": "10.20.0.0/24"}}],
    "address-with-exceptions": [{"ipBlock": {"cidr": "10.20.0.7/32", "except": ["10.20.0.7/32"]}}],
    "internet": [{"ipBlock": {"cidr": "0.0.0.0/0"}}],
    "internet-in-two-halves": [{"ipBlock": {"cidr": "0.0.0.0/1"}}, {"ipBlock": {"cidr": "128.0.0.0/1"}}],
    "every-pod-of-a-namespace": [{"namespaceSelector": _TGI_NS}],
    "named-pods-in-every-namespace": [{"namespaceSelector": {}, "podSelector": _TGI_PODS}],
    "empty-pod-selector": [{"podSelector": {}}],
    "one-bad-peer-among-good": [{"podSelector": _TGI_PODS}, {"namespaceSelector": {}}],
}
RUNNER_PEERS_ALLOWED = {"server-pods-in-another-namespace", "server-pods-in-the-release-namespace",
                        "server-address", "server-ipv6-address"}
_RUNNER_RULE_PORTS = [{"protocol": "TCP", "port": 8080}]


@pytest.fixture(scope="module")
def runner_egress_docs() -> list[dict[str, Any]]:
    from deploykit import render

    rule = {"to": RUNNER_PEERS["server-pods-in-another-namespace"], "ports": _RUNNER_RULE_PORTS}
    return render({"networkPolicy": {"extraRunnerEgress": [rule]}})


@pytest.mark.parametrize("case", list(RUNNER_PEERS))
def test_schema_and_policy_agree_on_the_runners_extra_servers(case, runner_egress_docs):
    """RUNBOOK's "an existing OpenAI-compatible server in the cluster" (its pods, by name) and a GPU server on the
    site network (one address) pass both the schema and the Rego policy; a range, a namespace's every pod or the
    internet in two halves passes neither."""
    import jsonschema

    schema = json.loads((REPO / "helm-chart" / "values.schema.json").read_text(encoding="utf-8"))
    peers = RUNNER_PEERS[case]
    rule = {"to": copy.deepcopy(peers), "ports": _RUNNER_RULE_PORTS}
    in_schema = jsonschema.Draft7Validator(schema).is_valid({"networkPolicy": {"extraRunnerEgress": [rule]}})
    docs = copy.deepcopy(runner_egress_docs)
    (extra,) = [r for r in _policy(docs, "-runner-egress")["spec"]["egress"] if r["ports"] == _RUNNER_RULE_PORTS]
    extra["to"] = copy.deepcopy(peers)
    network = evaluate(docs)["network"]
    allowed = case in RUNNER_PEERS_ALLOWED
    assert (in_schema, network == []) == (allowed, allowed), network


# And for the model servers' extra ingress (networkPolicy.extraModelServerIngress, e.g. Prometheus): every peer
# names its pods, namespace or a site range; an empty selector admits every pod of a namespace or the cluster.
_MONITORING = {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
MODEL_INGRESS_PEERS = {
    "monitoring-namespace": [{"namespaceSelector": _MONITORING}],
    "prometheus-pods": [{"namespaceSelector": _MONITORING,
                         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}],
    "site-network": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
    "every-namespace": [{"namespaceSelector": {}}],
    "every-pod-of-the-release-namespace": [{"podSelector": {}}],
    "every-pod-of-a-namespace": [{"namespaceSelector": _MONITORING, "podSelector": {}}],
    "internet-in-two-halves": [{"ipBlock": {"cidr": "0.0.0.0/1"}}, {"ipBlock": {"cidr": "128.0.0.0/1"}}],
}
MODEL_INGRESS_PEERS_ALLOWED = {"monitoring-namespace", "prometheus-pods", "site-network"}
_METRICS_PORTS = [{"protocol": "TCP", "port": 8000}]


@pytest.fixture(scope="module")
def model_ingress_docs() -> list[dict[str, Any]]:
    from deploykit import load_values, render

    rule = {"from": MODEL_INGRESS_PEERS["monitoring-namespace"], "ports": _METRICS_PORTS}
    return render(load_values("gpu") | {"networkPolicy": {"extraModelServerIngress": [rule]}})


@pytest.mark.parametrize("case", list(MODEL_INGRESS_PEERS))
def test_schema_and_policy_agree_on_the_model_servers_extra_sources(case, model_ingress_docs):
    import jsonschema

    schema = json.loads((REPO / "helm-chart" / "values.schema.json").read_text(encoding="utf-8"))
    peers = MODEL_INGRESS_PEERS[case]
    rule = {"from": copy.deepcopy(peers), "ports": _METRICS_PORTS}
    in_schema = jsonschema.Draft7Validator(schema).is_valid({"networkPolicy": {"extraModelServerIngress": [rule]}})
    docs = copy.deepcopy(model_ingress_docs)
    (extra,) = [r for r in _policy(docs, "-model-server-ingress")["spec"]["ingress"]
                if r["from"] == MODEL_INGRESS_PEERS["monitoring-namespace"]]
    extra["from"] = copy.deepcopy(peers)
    network = evaluate(docs)["network"]
    allowed = case in MODEL_INGRESS_PEERS_ALLOWED
    assert (in_schema, network == []) == (allowed, allowed), network
