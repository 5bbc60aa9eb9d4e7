"""deploy/docker-compose.yml: valid against the Compose Specification schema (vendored, offline) and
hardened: internal network only, read-only non-root containers, verified weights, no telemetry."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import jsonschema
import pytest
import yaml
from deploykit import DEPLOY_TESTS, REPO, REQUIRED_ENV, interpolate

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
    gpus = [s["deploy"]["resources"]["reservations"]["devices"][0] for s in services.values()
            if "reservations" in s.get("deploy", {}).get("resources", {})]
    assert len(gpus) == 2 and all(d["capabilities"] == ["gpu"] for d in gpus)
    assert services["appliance"]["healthcheck"]["test"] == ["CMD", "medhelm-local", "doctor", "--json"]


def test_compose_servers_serve_the_names_the_appliance_asks_for():
    """Each vLLM service's --served-model-name is one appliance.compose.yaml's models ask for, written out: it was
    ${MEDHELM_MODEL_NAME:-llama-3-8b}, a variable documented nowhere that broke the match when set."""
    services = load()["services"]
    config = yaml.safe_load((REPO / "deploy" / "appliance.compose.yaml").read_text(encoding="utf-8"))
    asked = {m["served_model"] for m in config["models"] if m.get("kind") == "vllm"}
    served = {name: _arg(services[name]["command"], "--served-model-name") for name in ("vllm-model", "vllm-judge")}
    assert set(served.values()) == asked, served
    assert not any("$" in str(name) for name in served.values())


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


CONSOLE_OVERLAY = REPO / "deploy" / "docker-compose.console.yml"
APPLIANCE_CONFIG = REPO / "deploy" / "appliance.compose.yaml"


def load_console() -> tuple[dict[str, Any], dict[str, Any]]:
    """The base file merged with the console overlay (as `docker compose -f base -f overlay` does for services and
    networks that only one of them declares), and the appliance.yaml the console reads."""
    base = load()
    overlay = yaml.safe_load(CONSOLE_OVERLAY.read_text(encoding="utf-8"))
    assert not set(base["services"]) & set(overlay["services"]) and not set(base["networks"]) & set(overlay["networks"])
    merged = {**base, "services": {**base["services"], **overlay["services"]},
              "networks": {**base["networks"], **overlay["networks"]}}
    return merged, yaml.safe_load(APPLIANCE_CONFIG.read_text(encoding="utf-8"))


def resolved_console(env: dict[str, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """load_console() as `docker compose` runs it with this environment (the defaults where it sets nothing)."""
    doc, config = load_console()
    return interpolate(doc, REQUIRED_ENV | (env or {})), config


def _networks_of(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    nets = service.get("networks", {})
    return {n: {} for n in nets} if isinstance(nets, list) else {n: (v or {}) for n, v in nets.items()}


def _arg(command: list[str], flag: str) -> str | None:
    for i, arg in enumerate(command):
        if arg == flag and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


BRIDGE_NAME_OPTION = "com.docker.network.bridge.name"


def console_layout_problems(doc: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The single-host console's isolation, as a list of violations (empty: compliant). The console process holds
    the store and the keys: it may be on internal networks only, listen only where oauth2-proxy alone can reach it,
    and believe identity headers from oauth2-proxy alone; oauth2-proxy, the only service that faces users and the
    identity provider, is the only one on a non-internal network and shares nothing else with the console."""
    import ipaddress

    found: list[str] = []
    services, networks = doc["services"], doc.get("networks", {})
    console, proxy = services.get("console"), services.get("console-proxy")
    if console is None or proxy is None:
        return ["the console and console-proxy services must both exist"]
    members: dict[str, set[str]] = {}
    for name, svc in services.items():
        for net in _networks_of(svc):
            members.setdefault(net, set()).add(name)
    for net, who in members.items():
        if net not in networks:
            found.append(f"network {net} is not declared")
        elif (networks[net] or {}).get("internal") is not True:
            if who != {"console-proxy"}:
                others = sorted(who - {"console-proxy"}) or sorted(who)
                found.append(f"non-internal network {net} is joined by {others}")
            bridge = ((networks[net] or {}).get("driver_opts") or {}).get(BRIDGE_NAME_OPTION)
            if not bridge or len(str(bridge)) > 15:  # Linux interface names: 15 characters
                found.append(f"non-internal network {net} must name its bridge ({BRIDGE_NAME_OPTION}): the host "
                             "firewall's rules hold its egress by that name")
    for name, svc in services.items():
        if name != "console-proxy" and "ports" in svc:
            found.append(f"service {name}: only console-proxy may publish ports")
        for key in ("network_mode", "ipc", "pid", "volumes_from"):
            if key in svc:
                found.append(f"service {name}: {key} is not allowed (it shares the console's namespaces or files)")
    for port in proxy.get("ports", []):
        if str(port).count(":") < 2:
            found.append(f"console-proxy: port {port} must name the address it is published on")
    console_mounts = {str(v).split(":")[0] for v in console.get("volumes", [])}
    shared = console_mounts & {str(v).split(":")[0] for v in proxy.get("volumes", [])}
    if shared:
        found.append(f"console-proxy: shares volumes {sorted(shared)} with the console")
    if not any(str(t).startswith("/tmp") for t in proxy.get("tmpfs", [])):
        found.append("console-proxy: /tmp must be its own tmpfs")

    command = [str(a) for a in console.get("command", [])]
    host, port = _arg(command, "--host"), _arg(command, "--port") or "8080"
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return [*found, f"console: --host {host!r} must be an IP address"]
    if address.is_unspecified:
        return [*found, "console: --host must not be a wildcard address"]
    bound_on = [n for n, v in _networks_of(console).items() if v.get("ipv4_address") == host]
    if not bound_on:
        found.append(f"console: --host {host} is not its fixed address on one of its networks")
    for net in bound_on:
        if members.get(net) != {"console", "console-proxy"}:
            found.append(f"console: listens on network {net}, shared with {sorted(members.get(net, set()))}")
        subnets = [c.get("subnet") for c in (networks.get(net) or {}).get("ipam", {}).get("config", [])]
        if not any(s and address in ipaddress.ip_network(s) for s in subnets):
            found.append(f"console: {host} is outside network {net}'s fixed subnet")
    proxy_address = next((v.get("ipv4_address") for n, v in _networks_of(proxy).items() if n in bound_on), None)
    trusted = (config.get("console") or {}).get("trusted_proxies", [])
    if proxy_address is None:
        found.append("console-proxy: needs a fixed address on the network the console listens on")
    elif not trusted or any(ipaddress.ip_network(t, strict=False).num_addresses != 1
                            or ipaddress.ip_address(proxy_address) not in ipaddress.ip_network(t, strict=False)
                            for t in trusted):
        found.append(f"console.trusted_proxies {trusted} must be oauth2-proxy's address ({proxy_address}) alone")
    upstream = _arg([str(a) for a in proxy.get("command", [])], "--upstream")
    if upstream != f"http://{host}:{port}/":
        found.append(f"console-proxy: --upstream {upstream} is not the console's address http://{host}:{port}/")
    probe = " ".join(str(t) for t in console.get("healthcheck", {}).get("test", []))
    if f"http://{host}:{port}/healthz" not in probe:
        found.append("console: the healthcheck must probe the address the console listens on")
    return found


def test_console_overlay_keeps_the_console_off_non_internal_networks():
    """The single-host console matches the chart's isolation: the console (store and keys) has no route off the
    host; only oauth2-proxy is on a non-internal network; the console listens only where oauth2-proxy alone can
    reach it and trusts identity headers from oauth2-proxy's address alone."""
    doc, config = resolved_console()
    assert schema_errors(doc) == []
    assert console_layout_problems(doc, config) == []
    nets = doc["networks"]
    assert all(nets[n].get("internal") is True for n in _networks_of(doc["services"]["console"]))
    assert [n for n in _networks_of(doc["services"]["console-proxy"]) if not nets[n].get("internal")] == [
        "medhelm-console-frontend"]


def _break_console(doc: dict[str, Any], config: dict[str, Any], change: str) -> None:
    services, networks = doc["services"], doc["networks"]
    console, proxy = services["console"], services["console-proxy"]
    if change == "console on the frontend":
        console["networks"]["medhelm-console-frontend"] = {}
    elif change == "console network not internal":
        networks["medhelm-console"].pop("internal")
    elif change == "shared network namespace":  # the old layout: a sidecar in the console's namespace
        proxy.pop("networks")
        proxy["network_mode"] = "service:console"
    elif change == "console publishes a port":
        console["ports"] = ["127.0.0.1:8080:8080"]
    elif change == "console listens everywhere":
        console["command"][console["command"].index("--host") + 1] = "0.0.0.0"
    elif change == "appliance joins the console network":
        services["appliance"]["networks"] = ["medhelm-internal", "medhelm-console"]
    elif change == "trusts the whole subnet":
        config["console"]["trusted_proxies"] = ["172.31.255.0/29"]
    elif change == "trusts loopback":
        config["console"]["trusted_proxies"] = ["127.0.0.1/32"]
    elif change == "shared /tmp":
        proxy["tmpfs"] = []
        proxy["volumes_from"] = ["console"]
    elif change == "frontend bridge unnamed":  # Docker's br-<id>, new on every `up`: no firewall rule can name it
        networks["medhelm-console-frontend"].pop("driver_opts")
    elif change == "unbound healthcheck":
        console["healthcheck"]["test"] = ["CMD", "python3", "-c", "import urllib.request; "
                                          "urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=3)"]


@pytest.mark.parametrize("change, expected", [
    ("console on the frontend", "non-internal network medhelm-console-frontend"),
    ("console network not internal", "non-internal network medhelm-console"),
    ("shared network namespace", "network_mode is not allowed"),
    ("console publishes a port", "only console-proxy may publish ports"),
    ("console listens everywhere", "wildcard"),
    ("appliance joins the console network", "listens on network medhelm-console, shared with"),
    ("trusts the whole subnet", "oauth2-proxy's address (172.31.255.3) alone"),
    ("trusts loopback", "oauth2-proxy's address (172.31.255.3) alone"),
    ("shared /tmp", "volumes_from is not allowed"),
    ("unbound healthcheck", "healthcheck must probe"),
    ("frontend bridge unnamed", "non-internal network medhelm-console-frontend must name its bridge"),
])
def test_console_layout_check_rejects_a_weakened_overlay(change, expected):
    doc, config = resolved_console()
    _break_console(doc, config, change)
    assert any(expected in p for p in console_layout_problems(doc, config)), console_layout_problems(doc, config)


def test_airgap_firewall_holds_oauth2_proxy_to_the_identity_provider():
    """oauth2-proxy relays every console page and is the only container Docker lets connect anywhere: its egress is
    held by the host firewall alone. AIRGAP.md said only "restrict it on the DOCKER-USER chain", on a bridge whose
    name (br-<id>) changed on every `docker compose up`. Its rules now name the overlay's fixed bridge, let new
    connections go to HTTPS (the identity provider) and DNS only, and drop the rest."""
    doc, _ = resolved_console()
    bridge = doc["networks"]["medhelm-console-frontend"]["driver_opts"][BRIDGE_NAME_OPTION]
    airgap = (REPO / "deploy" / "AIRGAP.md").read_text(encoding="utf-8")
    section = airgap[airgap.index("### Host firewall"):]
    rules = [line.split("#")[0].split() for line in section.splitlines() if line.startswith("iptables ")]
    (jump,) = [r for r in rules if r[1:3] == ["-I", "DOCKER-USER"] and "-i" in r]
    assert jump[jump.index("-i") + 1] == bridge
    chain = jump[jump.index("-j") + 1]
    own = [r for r in rules if r[1:3] == ["-A", chain]]
    assert own and own[-1][3:] == ["-j", "DROP"], own
    for rule in own[:-1]:
        assert rule[-2:] == ["-j", "RETURN"], rule
        words = " ".join(rule)
        assert ("--ctstate ESTABLISHED,RELATED" in words or re.search(r"-p tcp -d \S+ --dport 443\b", words)
                or re.search(r"-p (udp|tcp) -d \S+ --dport 53\b", words)), rule
    assert "medhelm-console-frontend" in section and f"`{bridge}`" in section


def test_airgap_firewall_check_tells_dns_from_the_firewall_and_closes_the_host():
    """The check was one `urlopen('https://example.org')` that must fail: it failed on DNS as readily as on the
    firewall, so it proved neither rule. The DOCKER-USER rules see forwarded traffic only, so oauth2-proxy could
    still reach the host's own services (INPUT); and where the host resolves through 127.0.0.53, Docker hands the
    containers public resolvers the DNS rule drops, and sign-in fails. The section now checks resolution first,
    then IP literals (the identity provider; another server; the host), says what each outcome means, sends the
    bridge's traffic to the host through the same chain, and says how to give the containers the site's DNS."""
    doc, _ = resolved_console()
    bridge = doc["networks"]["medhelm-console-frontend"]["driver_opts"][BRIDGE_NAME_OPTION]
    (published,) = doc["services"]["console-proxy"]["ports"]
    airgap = (REPO / "deploy" / "AIRGAP.md").read_text(encoding="utf-8")
    section = airgap[airgap.index("### Host firewall"):]
    section = section[:section.index("\n## ")] if "\n## " in section else section
    rules = [line.split("#")[0].split() for line in section.splitlines() if line.startswith("iptables ")]
    (jump,) = [r for r in rules if r[1:3] == ["-I", "DOCKER-USER"] and "-i" in r]
    chain = jump[jump.index("-j") + 1]
    (host_rule,) = [r for r in rules if r[1:3] == ["-I", "INPUT"]]
    assert host_rule[host_rule.index("-i") + 1] == bridge and host_rule[host_rule.index("-j") + 1] == chain
    checks = [line for line in section.splitlines() if line.startswith("check \"")]
    assert checks and "getaddrinfo" in checks[0] and "create_connection" not in checks[0], checks
    assert all(re.search(r"create_connection\(\('[0-9.]+'", line) for line in checks[1:]), checks
    assert len(checks) >= 4 and "urlopen" not in section
    for outcome in ("timed out", "refused", "Name or service not known"):
        assert outcome in section, outcome
    assert "docker network inspect" in section and "Gateway" in section
    assert "127.0.0.53" in section and '"dns"' in section and "/etc/docker/daemon.json" in section
    assert "ExtServers" in section
    port = str(published["target"] if isinstance(published, dict) else published.rsplit(":", 1)[1])
    assert f"--dport {port}" in section


SITE_CONSOLE_NETWORK = {"MEDHELM_CONSOLE_SUBNET": "10.250.7.0/29", "MEDHELM_CONSOLE_ADDRESS": "10.250.7.2",
                        "MEDHELM_CONSOLE_PROXY_ADDRESS": "10.250.7.3"}


def test_console_network_follows_the_sites_address_plan():
    """medhelm-console's subnet was written into the overlay: where 172.31.255.0/29 was taken (another Docker
    network: "Pool overlaps", nothing starts; a site network: its hosts vanish from this host), moving it meant
    editing six places in the overlay by hand. The
    subnet and both addresses now come from the environment (deploy/.env) with the old values as defaults; the
    console's --host, its healthcheck and oauth2-proxy's --upstream follow, and the layout stays as isolated once
    console.trusted_proxies names the new proxy address. Left unchanged there, the check says so (and the console,
    believing no header, signs nobody in)."""
    default, config = resolved_console()
    assert default["networks"]["medhelm-console"]["ipam"]["config"] == [{"subnet": "172.31.255.0/29"}]
    assert config["console"]["trusted_proxies"] == ["172.31.255.3/32"]
    assert console_layout_problems(default, config) == []

    doc, _ = resolved_console(SITE_CONSOLE_NETWORK)
    assert "172.31.255" not in json.dumps(doc) and "${" not in json.dumps(doc)
    assert doc["networks"]["medhelm-console"]["ipam"]["config"] == [{"subnet": "10.250.7.0/29"}]
    assert _networks_of(doc["services"]["console-proxy"])["medhelm-console"]["ipv4_address"] == "10.250.7.3"
    assert schema_errors(doc) == []
    stale = console_layout_problems(doc, config)
    assert stale == ["console.trusted_proxies ['172.31.255.3/32'] must be oauth2-proxy's address (10.250.7.3) alone"]
    site_config = copy.deepcopy(config)
    site_config["console"]["trusted_proxies"] = ["10.250.7.3/32"]
    assert console_layout_problems(doc, site_config) == []


def test_airgap_documents_the_console_network_variables():
    """The console network's variables are named in deploy/AIRGAP.md with the defaults the overlay gives them."""
    airgap = (REPO / "deploy" / "AIRGAP.md").read_text(encoding="utf-8")
    text = CONSOLE_OVERLAY.read_text(encoding="utf-8")
    for name in SITE_CONSOLE_NETWORK:
        (default,) = set(re.findall(rf"\$\{{{name}:-([^}}]+)\}}", text))
        assert f"`{name}` (`{default}`)" in airgap, name


# --- resource limits: a runaway model server or a fork bomb in a compromised container must not take the host --

# service -> the environment-variable prefix that overrides its limits, and the chart's matching resources
# (helm-chart/values.yaml), whose limits are the compose defaults.
LIMITS = {
    "verify-model-weights": ("MEDHELM_VERIFY", ["vllm", "weightsCheck", "resources"]),
    "verify-judge-weights": ("MEDHELM_VERIFY", ["vllm", "weightsCheck", "resources"]),
    "vllm-model": ("MEDHELM_MODEL", ["vllm", "resources"]),
    "vllm-judge": ("MEDHELM_JUDGE", ["vllm", "resources"]),
    "appliance": ("MEDHELM_APPLIANCE", ["runner", "resources"]),
    "console": ("MEDHELM_CONSOLE", ["console", "resources"]),
    "console-proxy": ("MEDHELM_CONSOLE_PROXY", ["console", "oauth2Proxy", "resources"]),
}
_OVERRIDABLE = re.compile(r"^\$\{(?P<var>[A-Z0-9_]+):-(?P<default>[^}]+)\}$")
_UNITS = {"k": 2**10, "m": 2**20, "g": 2**30, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def _bytes(size: str) -> int:
    number = re.match(r"^[0-9]+", size)
    assert number and size[number.end():] in _UNITS, size
    return int(number.group()) * _UNITS[size[number.end():]]


def _cpus(value: str) -> float:
    return int(value[:-1]) / 1000 if value.endswith("m") else float(value)


def _default(value: Any) -> str:
    """The default of a `${VAR:-default}` limit."""
    m = _OVERRIDABLE.match(str(value))
    assert m is not None, value
    return m["default"]


def limit_problems(doc: dict[str, Any]) -> list[str]:
    """Every service's memory, CPU and PID limits (deploy.resources.limits), each `${VAR:-default}` (a site
    overrides it from the environment) with a finite default; as a list of violations (empty: compliant)."""
    found: list[str] = []
    for name, svc in doc["services"].items():
        limits = svc.get("deploy", {}).get("resources", {}).get("limits", {})
        prefix = LIMITS.get(name, ("MEDHELM_" + name.upper().replace("-", "_"), []))[0]
        for key, var, check in (("memory", "MEMORY", _bytes), ("cpus", "CPUS", _cpus), ("pids", "PIDS", int)):
            if key not in limits:
                found.append(f"service {name}: no {key} limit")
                continue
            m = _OVERRIDABLE.match(str(limits[key]))
            if m is None or m["var"] != f"{prefix}_{var}":
                found.append(f"service {name}: {key} limit must be ${{{prefix}_{var}:-<default>}}, not {limits[key]}")
                continue
            try:
                value = check(m["default"])
            except (AssertionError, ValueError):
                value = 0
            if not value > 0:
                found.append(f"service {name}: {key} limit default {m['default']} is not a finite positive limit")
        if "memory" in limits and svc.get("memswap_limit") != limits["memory"]:
            found.append(f"service {name}: memswap_limit must be its memory limit ({limits['memory']}: no swap), "
                         f"not {svc.get('memswap_limit')}")
    return found


def _merged_with_console() -> dict[str, Any]:
    return load_console()[0]


def test_every_compose_service_has_memory_cpu_and_pid_limits():
    base, merged = load(), _merged_with_console()
    assert set(merged["services"]) == set(LIMITS)
    assert limit_problems(base) == []
    assert limit_problems(merged) == []
    overlay = yaml.safe_load(CONSOLE_OVERLAY.read_text(encoding="utf-8"))
    assert schema_errors(base) == [] and schema_errors(overlay) == []


def test_compose_limits_default_to_the_charts():
    """The defaults are the chart's limits for the same process (helm-chart/values.yaml)."""
    values = yaml.safe_load((REPO / "helm-chart" / "values.yaml").read_text(encoding="utf-8"))
    for name, svc in _merged_with_console()["services"].items():
        chart = values
        for key in LIMITS[name][1]:
            chart = chart[key]
        limits = {k: _default(v) for k, v in svc["deploy"]["resources"]["limits"].items()}
        assert _bytes(limits["memory"]) == _bytes(chart["limits"]["memory"]), name
        assert _cpus(limits["cpus"]) == _cpus(str(chart["limits"]["cpu"])), name


def test_compose_limits_leave_room_for_the_tmpfs_mounts():
    """tmpfs pages count against the container's memory limit: every service's limit exceeds its tmpfs sizes and
    /dev/shm together, so a full /tmp alone does not get the process killed."""
    for name, svc in _merged_with_console()["services"].items():
        memory = _bytes(_default(svc["deploy"]["resources"]["limits"]["memory"]))
        sizes = [s for t in svc.get("tmpfs", []) for s in re.findall(r"size=([0-9]+[kmg])", t)]
        assert len(sizes) == len(svc.get("tmpfs", [])), (name, svc.get("tmpfs"))
        tmpfs = sum(_bytes(s) for s in sizes) + (_bytes(svc["shm_size"].removesuffix("b")) if "shm_size" in svc else 0)
        assert memory > tmpfs, (name, memory, tmpfs)


@pytest.mark.parametrize(
    "mutation, expected",
    [
        (lambda d: d["services"]["vllm-model"]["deploy"]["resources"].pop("limits"), "vllm-model: no memory limit"),
        (lambda d: d["services"]["appliance"].pop("deploy"), "appliance: no pids limit"),
        (lambda d: d["services"]["vllm-judge"]["deploy"]["resources"]["limits"].update(pids="-1"),
         "vllm-judge: pids limit must be"),
        (lambda d: d["services"]["vllm-judge"]["deploy"]["resources"]["limits"].update(
            pids="${MEDHELM_JUDGE_PIDS:--1}"),
         "vllm-judge: pids limit default -1"),
        (lambda d: d["services"]["console"]["deploy"]["resources"]["limits"].update(memory="2g"),
         "console: memory limit must be ${MEDHELM_CONSOLE_MEMORY:-<default>}"),
        (lambda d: d["services"]["console-proxy"]["deploy"]["resources"]["limits"].pop("cpus"),
         "console-proxy: no cpus limit"),
        (lambda d: d["services"]["verify-model-weights"]["deploy"]["resources"]["limits"].update(
            memory="${MEDHELM_VERIFY_MEMORY:-0m}"), "verify-model-weights: memory limit default 0m"),
        # Swap would write what a model server or the runner holds in memory (prompts, outputs) to the host's disk.
        (lambda d: d["services"]["appliance"].pop("memswap_limit"), "appliance: memswap_limit must be"),
        (lambda d: d["services"]["vllm-model"].update(memswap_limit="128g"), "vllm-model: memswap_limit must be"),
    ],
)
def test_limit_check_rejects_a_service_without_limits(mutation, expected):
    doc = _merged_with_console()
    mutation(doc)
    assert any(expected in p for p in limit_problems(doc)), limit_problems(doc)
