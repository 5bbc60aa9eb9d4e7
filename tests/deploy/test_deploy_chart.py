"""The Helm chart, rendered with Helm's own engine for every CI value set: lint, Kubernetes schemas,
Pod Security "restricted", network isolation, vLLM servers, sharding, secrets, and rejection of bad values."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml
from deploykit import (
    CHART,
    NAMESPACE,
    REPO,
    VALUE_SETS,
    WORKLOAD_KINDS,
    all_containers,
    by_kind,
    env_map,
    load_values,
    notes,
    pod_spec,
    render,
)

SETS = list(VALUE_SETS)
K8S_VERSIONS = ["1.27", kubernetes_validate.latest_version()]
TELEMETRY_OFF = {"VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"}


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in WORKLOAD_KINDS]


def appliance_yaml(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (cm,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-appliance")]
    return yaml.safe_load(cm["data"]["appliance.yaml"])


def servers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d
        for d in by_kind(docs, "Deployment")
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == "model-server"
    ]


# --- rendering and lint ---------------------------------------------------------------------------------


def test_value_sets_cover_the_required_cases():
    assert {"default", "gpu", "mig", "sharded", "existing-secret"} <= set(SETS)


@pytest.mark.parametrize("name", SETS)
def test_chart_renders(name, rendered):
    docs = rendered(name)
    kinds = {d["kind"] for d in docs}
    expected = {"ConfigMap", "NetworkPolicy", "ServiceAccount"}
    if name != "existing-secret":  # that set brings its own Secrets and PVCs
        expected |= {"Secret", "PersistentVolumeClaim"}
    assert expected <= kinds
    assert "Job" in kinds or "CronJob" in kinds
    for doc in docs:
        assert doc["metadata"].get("namespace") == NAMESPACE, f"{doc['kind']}/{doc['metadata']['name']}"


@pytest.mark.parametrize("name", SETS)
def test_helm_lint_is_clean(name):
    report = helm_python.lint(str(CHART), load_values(name), strict=True, namespace=NAMESPACE)
    assert report["errors"] == []
    # Severity: 1 info, 2 warning, 3 error. The only info allowed is the missing icon (an air-gapped
    # chart has no icon URL to point to).
    findings = [m for m in report["messages"] if not (m["severity"] == 1 and "icon is recommended" in m["error"])]
    assert findings == []


def test_helm_lint_reports_a_broken_chart(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "Chart.yaml").write_text("apiVersion: v2\nname: broken\nversion: not-semver\n")
    (broken / "templates").mkdir()
    (broken / "templates" / "x.yaml").write_text("kind: ConfigMap\nmetadata: {name: {{ .Values.x.y }}}\n")
    report = helm_python.lint(str(broken), strict=True)
    assert any(m["severity"] >= 2 for m in report["messages"]) or report["errors"]


@pytest.mark.parametrize("name", SETS)
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_manifests_valid_against_kubernetes_schemas(name, version, rendered):
    for doc in rendered(name):
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} (k8s {version}): {exc.message} at {exc.path}")


def test_schema_validation_catches_a_bad_manifest():
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSIONS[0], strict=True)
    unknown_field = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "dat": {}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(unknown_field, K8S_VERSIONS[0], strict=True)


# --- Pod Security "restricted" on every pod spec --------------------------------------------------------


@pytest.mark.parametrize("name", SETS)
def test_every_pod_is_restricted(name, rendered):
    pods = workloads(rendered(name))
    assert pods
    for obj in pods:
        where = f"{name}: {obj['kind']}/{obj['metadata']['name']}"
        spec = pod_spec(obj)
        assert spec is not None
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True, where
        assert psc["runAsUser"] > 0 and psc["runAsGroup"] > 0, where
        assert psc["seccompProfile"]["type"] == "RuntimeDefault", where
        assert spec["automountServiceAccountToken"] is False, where
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(field), where
        volume_types = {k for v in spec.get("volumes", []) for k in v if k != "name"}
        assert volume_types <= {"configMap", "emptyDir", "persistentVolumeClaim", "secret", "projected"}, where
        emptydirs = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
        for c in all_containers(spec):
            csc = c["securityContext"]
            cwhere = f"{where} container {c['name']}"
            assert csc["runAsNonRoot"] is True, cwhere
            assert csc["allowPrivilegeEscalation"] is False, cwhere
            assert csc["readOnlyRootFilesystem"] is True, cwhere
            assert csc.get("privileged") is not True, cwhere
            assert csc["capabilities"]["drop"] == ["ALL"], cwhere
            assert not csc["capabilities"].get("add"), cwhere
            assert csc["seccompProfile"]["type"] == "RuntimeDefault", cwhere
            assert c["resources"]["limits"]["memory"] and c["resources"]["requests"]["cpu"], cwhere
            assert not any(p.get("hostPort") for p in c.get("ports", [])), cwhere
            assert "@" in c["image"] or not c["image"].endswith(":latest"), cwhere
        for c in spec["containers"]:
            # Read-only root: scratch space comes from an emptyDir at /tmp.
            tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert tmp and tmp[0]["name"] in emptydirs, f"{where} container {c['name']}: /tmp"


def test_no_secret_value_is_rendered_into_a_pod_spec(rendered):
    secret_name = re.compile(r"(API_KEY|TOKEN|PASSWORD|SECRET)$")
    for name in SETS:
        for obj in workloads(rendered(name)):
            assert "placeholder" not in json.dumps(obj), f"{name}: a secret value leaked into a pod spec"
            for c in all_containers(pod_spec(obj)):
                for e in c.get("env", []):
                    if secret_name.search(e["name"]):
                        assert "value" not in e, f"{name}: {c['name']} env {e['name']} holds a literal secret"


# --- appliance.yaml ---------------------------------------------------------------------------------------


def _allowed(url: str, allowlist: list[str]) -> bool:
    scheme, _, rest = url.partition("://")
    host = rest.split("/")[0].rsplit(":", 1)[0]
    return any(scheme == p.split("://")[0] and fnmatch.fnmatch(host, p.split("://")[1]) for p in allowlist)


@pytest.mark.parametrize("name", SETS)
def test_appliance_config_is_valid_and_in_cluster(name, rendered):
    from medhelm_local.home.config import ApplianceConfig

    docs = rendered(name)
    raw = appliance_yaml(docs)
    config = ApplianceConfig.model_validate(raw)  # extra fields forbidden: the chart matches the appliance
    values = load_values(name)
    served = [m["name"] for m in values.get("models", []) + values.get("judges", [])]
    assert config.judges == [j["name"] for j in values.get("judges", [])]
    services = {s["metadata"]["name"] for s in by_kind(docs, "Service")}
    for model in config.models:
        if model.name not in served:
            continue
        (url,) = model.base_urls
        assert url.startswith("http://") and url.endswith(f".{NAMESPACE}.svc.cluster.local:8000/v1"), url
        assert url.split("//")[1].split(".")[0] in services
        assert _allowed(url, config.allowlist), url
        assert model.api_key_file is not None and model.api_key_env is None
    assert raw["paths"]["audit"].startswith("/var/lib/medhelm-audit/")
    store = values.get("appliance", {}).get("store", {})
    assert config.store.memory_limit_mb == store.get("memoryLimitMb", 128)
    assert config.store.threads == store.get("threads", 2)


def test_runner_model_must_be_configured():
    with pytest.raises(helm_python.HelmError, match=r"runner\.model"):
        render({"runner": {"model": "not-served"}})


# --- the runner Job, the Indexed Job and the CronJob ------------------------------------------------------


def _runner(docs, kind="Job"):
    (job,) = by_kind(docs, kind)
    spec = pod_spec(job)
    (container,) = spec["containers"]
    return job, spec, container


def test_default_job_runs_the_embedded_model(rendered):
    docs = rendered("default")
    job, spec, c = _runner(docs)
    assert c["command"] == ["medhelm-local"]
    assert c["args"][:7] == [
        "--actor",
        "kubernetes-runner",
        "run",
        "--model",
        "smollm2-135m-embedded",
        "--benchmarks",
        "pubmedqa",
    ]
    assert "--shard" not in c["args"]
    assert "completionMode" not in job["spec"]
    assert spec["restartPolicy"] == "Never"
    env = env_map(c)
    assert env["MEDHELM_HOME"] == "/var/lib/medhelm"
    assert env["MEDHELM_CONFIG"] == "/etc/medhelm/appliance.yaml"
    assert "MEDHELM_KEYS_DIR" not in env  # keys mode "home": generated by init on the home PVC
    assert [i["name"] for i in spec["initContainers"]] == ["init-home"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/etc/medhelm/appliance.yaml"]["readOnly"] is True
    assert {"/var/lib/medhelm", "/var/lib/medhelm-audit", "/tmp"} <= set(mounts)
    assert not servers(docs) and not by_kind(docs, "Service")


def test_sharded_run_is_an_indexed_job(rendered):
    docs = rendered("sharded")
    job, _spec, c = _runner(docs)
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == 8
    assert job["spec"]["parallelism"] == 4
    i = c["args"].index("--shard")
    assert c["args"][i + 1] == "$(JOB_COMPLETION_INDEX)/8"
    ref = env_map(c)["JOB_COMPLETION_INDEX"]["fieldRef"]["fieldPath"]
    assert ref == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    (cron,) = by_kind(docs, "CronJob")
    assert cron["spec"]["schedule"] == "30 1 * * 6"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert cron["spec"]["jobTemplate"]["spec"]["completionMode"] == "Indexed"
    (home,) = [p for p in by_kind(docs, "PersistentVolumeClaim") if p["metadata"]["name"].endswith("-home")]
    assert home["spec"]["accessModes"] == ["ReadWriteMany"]


def test_parallel_shards_refuse_a_read_write_once_home():
    with pytest.raises(helm_python.HelmError, match="ReadWriteMany"):
        render({"runner": {"shards": 4, "parallelism": 2}})


# --- keys and Secrets -------------------------------------------------------------------------------------


def test_existing_secrets_and_claims_are_used(rendered):
    docs = rendered("existing-secret")
    assert not by_kind(docs, "PersistentVolumeClaim")
    assert not [s for s in by_kind(docs, "Secret")]  # keys and API key both come from existing Secrets
    _job, spec, c = _runner(docs)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["keys-secret"]["secret"] == {"secretName": "medhelm-appliance-keys", "defaultMode": 0o400}
    assert volumes["keys"]["emptyDir"]["medium"] == "Memory"
    assert volumes["home"]["persistentVolumeClaim"]["claimName"] == "medhelm-home"
    assert volumes["audit"]["persistentVolumeClaim"]["claimName"] == "medhelm-audit"
    assert volumes["vllm-api-key"]["secret"]["secretName"] == "medhelm-vllm-api-key"
    assert volumes["vllm-api-key"]["secret"]["items"] == [{"key": "token", "path": "api-key"}]
    assert env_map(c)["MEDHELM_KEYS_DIR"] == "/run/medhelm/keys"
    copy_keys = spec["initContainers"][0]
    assert copy_keys["name"] == "copy-keys"
    assert "chmod 0400" in copy_keys["args"][0]
    (server,) = servers(docs)
    (vllm,) = pod_spec(server)["containers"]
    assert env_map(vllm)["VLLM_API_KEY"]["secretKeyRef"] == {"name": "medhelm-vllm-api-key", "key": "token"}


def test_chart_managed_key_secret(rendered):
    docs = rendered("chart-secret")
    secrets = {s["metadata"]["name"]: s for s in by_kind(docs, "Secret")}
    (keys,) = [s for n, s in secrets.items() if n.endswith("-keys")]
    assert set(keys["data"]) == {"signing-ed25519.pem", "signing-ed25519.pub.pem", "store-data.key"}


def test_copy_keys_script_makes_owner_only_copies(rendered, tmp_path):
    """Run the init container's script against a fake Secret volume: the copies are mode 0400."""
    _job, spec, _c = _runner(rendered("existing-secret"))
    script = spec["initContainers"][0]["args"][0]
    src, dst = tmp_path / "secret", tmp_path / "keys"
    src.mkdir()
    dst.mkdir()
    for f in ("signing-ed25519.pem", "signing-ed25519.pub.pem", "store-data.key"):
        (src / f).write_text(f"content of {f}\n")
        (src / f).chmod(0o440)
    script = script.replace("/etc/medhelm/keys-secret", str(src)).replace("/run/medhelm/keys", str(dst))
    subprocess.run(["/bin/sh", "-c", script], check=True)
    for f in src.iterdir():
        copy = dst / f.name
        assert copy.read_text() == f.read_text()
        assert copy.stat().st_mode & 0o777 == 0o400
    (src / "store-data.key").unlink()
    proc = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True)
    assert proc.returncode != 0 and "store-data.key missing" in proc.stderr


def test_toolbox_can_rotate_keys_but_is_off_by_default(rendered):
    assert not [d for d in by_kind(rendered("default"), "Deployment")]
    (toolbox,) = [
        d for d in by_kind(rendered("existing-secret"), "Deployment") if d["metadata"]["name"].endswith("-toolbox")
    ]
    assert toolbox["spec"]["strategy"] == {"type": "Recreate"}
    spec = pod_spec(toolbox)
    assert spec["restartPolicy"] == "Always"
    (c,) = spec["containers"]
    assert c["command"] == ["sleep", "infinity"]
    keys = next(m for m in c["volumeMounts"] if m["mountPath"] == "/run/medhelm/keys")
    assert keys["readOnly"] is False  # `keys rotate` writes the new data key here (deploy/RUNBOOK.md)
    assert env_map(c)["MEDHELM_ACTOR"] == "operator"
    runner_keys = next(m for m in _runner(rendered("existing-secret"))[2]["volumeMounts"] if m["name"] == "keys")
    assert runner_keys["readOnly"] is True


@pytest.mark.parametrize(
    "values, message",
    [
        ({"keys": {"mode": "existingSecret"}}, "existingSecret"),
        ({"keys": {"mode": "secret", "signingKey": "x"}}, "signingPublicKey"),
    ],
)
def test_incomplete_key_settings_are_rejected(values, message):
    with pytest.raises(helm_python.HelmError, match=message):
        render(values)


# --- vLLM model servers and judges ------------------------------------------------------------------------


def test_one_vllm_server_per_model_and_judge(rendered):
    docs = rendered("gpu")
    values = load_values("gpu")
    expected = {m["name"]: m for m in values["models"] + values["judges"]}
    deployments = {d["metadata"]["labels"]["medhelm.local/model"]: d for d in servers(docs)}
    assert set(deployments) == set(expected)
    services = {s["metadata"]["labels"]["medhelm.local/model"]: s for s in by_kind(docs, "Service")}
    assert set(services) == set(expected)
    for name, dep in deployments.items():
        spec = pod_spec(dep)
        model = expected[name]
        assert dep["spec"]["replicas"] == model.get("replicas", 1)
        assert dep["metadata"]["labels"]["medhelm.local/role"] == ("judge" if name.startswith("judge") else "model")
        (c,) = spec["containers"]
        assert c["command"] == ["vllm", "serve"]
        args = c["args"]
        assert args[0] == f"/models/{name}"
        flags = dict(zip(args[1::2], args[2::2], strict=False))
        assert flags["--served-model-name"] == model.get("servedModel", name)
        assert flags["--host"] == "0.0.0.0" and flags["--port"] == "8000"
        assert flags["--tensor-parallel-size"] == str(model.get("tensorParallelSize", 1))
        assert flags["--max-model-len"] == str(model.get("maxModelLen", 8192))
        assert "--gpu-memory-utilization" in flags
        assert "--enable-log-requests" not in args and "--api-key" not in args
        gpus = model["gpu"]["count"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == gpus
        assert c["resources"]["requests"]["nvidia.com/gpu"] == gpus
        env = env_map(c)
        assert all(env[k] == "1" for k in TELEMETRY_OFF)
        assert "secretKeyRef" in env["VLLM_API_KEY"]
        for var in ("HOME", "XDG_CACHE_HOME", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "HF_HOME"):
            assert env[var].startswith("/var/cache/medhelm/"), var
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["httpGet"]["path"] == "/health"
        startup = c["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
        assert volumes["weights"]["persistentVolumeClaim"] == {"claimName": "model-weights", "readOnly": True}
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        assert mounts[f"/models/{name}"]["readOnly"] is True
        assert mounts[f"/models/{name}"]["subPath"] == model["weights"]["subPath"]
        assert mounts["/dev/shm"]["name"] == "shm"
        (verify,) = spec["initContainers"]
        assert verify["name"] == "verify-weights"
        assert env_map(verify)["WEIGHTS_MANIFEST"] == f"/models/{name}/SHA256SUMS"
        assert dep["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0


def test_mig_profiles_are_requested_as_resources(rendered):
    docs = rendered("mig")
    by_model = {d["metadata"]["labels"]["medhelm.local/model"]: d for d in servers(docs)}
    phi = pod_spec(by_model["phi-3-mini"])
    (c,) = phi["containers"]
    assert c["resources"]["limits"] == c["resources"]["limits"] | {"nvidia.com/mig-1g.10gb": 1}
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    (judge,) = pod_spec(by_model["judge-small"])["containers"]
    assert judge["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == 1
    # Inline manifest: a ConfigMap mounted where the init container reads it.
    (verify,) = phi["initContainers"]
    assert env_map(verify)["WEIGHTS_MANIFEST"] == "/etc/medhelm/weights/SHA256SUMS"
    manifests = [m for m in by_kind(docs, "ConfigMap") if m["metadata"]["name"].endswith("-weights")]
    assert len(manifests) == 1 and manifests[0]["data"]["SHA256SUMS"].count("\n") >= 3


# --- network isolation ------------------------------------------------------------------------------------


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


@pytest.mark.parametrize("name", SETS)
def test_network_policies_isolate_the_release(name, rendered):
    docs = rendered(name)
    policies = by_kind(docs, "NetworkPolicy")
    deny = [
        p
        for p in policies
        if set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        and not p["spec"].get("ingress")
        and not p["spec"].get("egress")
    ]
    assert deny, "no default-deny policy"
    for obj in workloads(docs):
        labels = (obj["spec"].get("template") or obj["spec"]["jobTemplate"]["spec"]["template"])["metadata"]["labels"]
        assert any(_selects(p["spec"]["podSelector"], labels) for p in deny), obj["metadata"]["name"]
    for p in policies:
        component = p["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/component")
        for rule in p["spec"].get("egress", []):
            assert rule.get("to") and rule.get("ports"), p["metadata"]["name"]
            ports = {port["port"] for port in rule["ports"]}
            if ports == {53}:
                continue
            assert component == "runner"
            for peer in rule["to"]:
                assert "ipBlock" not in peer
                assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "model-server"
        for rule in p["spec"].get("ingress", []):
            assert component == "model-server"
            assert [peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for peer in rule["from"]] == [
                "runner"
            ]
    for svc in by_kind(docs, "Service"):
        assert svc["spec"]["type"] == "ClusterIP"


# --- values.schema.json rejects bad values ----------------------------------------------------------------

_SERVED = {"name": "m", "weights": {"claim": "w"}}
REJECTION_REASONS = {
    "root-uid": r"/securityContext/\w+': minimum",
    "request-logging": r"/models/0/extraArgs/0",
    "api-key-in-argv": r"/models/0/extraArgs/0",
    "latest-tag": r"/image/appliance/tag",
    "bad-digest": r"/image/vllm/digest",
    "weights-path-escape": r"/models/0/weights/subPath",
    "weights-missing": r"missing property 'weights'",
    "zero-gpus": r"/models/0/gpu/count",
    "duplicate-model": r"used twice",
    "zero-shards": r"/runner/shards",
    "bad-label-value": r"/models/0/name",
    "server-name-collision": r"same Deployment/Service name",
    "unknown-key-mode": r"/keys/mode",
    "unknown-value": r"unknownTopLevel",
}


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"securityContext": {"runAsUser": 0, "runAsGroup": 0, "fsGroup": 0}}, id="root-uid"),
        pytest.param(
            {"models": [_SERVED | {"extraArgs": ["--enable-log-requests"]}], "runner": {"model": "m"}},
            id="request-logging",
        ),
        pytest.param(
            {"models": [_SERVED | {"extraArgs": ["--api-key=abc"]}], "runner": {"model": "m"}}, id="api-key-in-argv"
        ),
        pytest.param({"image": {"appliance": {"tag": "latest"}}}, id="latest-tag"),
        pytest.param({"image": {"vllm": {"digest": "sha256:abc"}}}, id="bad-digest"),
        pytest.param(
            {"models": [_SERVED | {"weights": {"claim": "w", "subPath": "../etc"}}], "runner": {"model": "m"}},
            id="weights-path-escape",
        ),
        pytest.param({"models": [{"name": "m"}], "runner": {"model": "m"}}, id="weights-missing"),
        pytest.param({"models": [_SERVED | {"gpu": {"count": 0}}], "runner": {"model": "m"}}, id="zero-gpus"),
        pytest.param({"models": [_SERVED, _SERVED], "runner": {"model": "m"}}, id="duplicate-model"),
        pytest.param({"runner": {"shards": 0}}, id="zero-shards"),
        pytest.param({"models": [_SERVED | {"name": "m-"}], "runner": {"model": "m-"}}, id="bad-label-value"),
        pytest.param(
            {
                "fullnameOverride": "x" * 40,
                "models": [_SERVED | {"name": f"long-model-name-number-{i}"} for i in (1, 2)],
                "runner": {"model": "long-model-name-number-1"},
            },
            id="server-name-collision",
        ),
        pytest.param({"keys": {"mode": "vault"}}, id="unknown-key-mode"),
        pytest.param({"unknownTopLevel": True}, id="unknown-value"),
    ],
)
def test_bad_values_are_rejected(values, request):
    # Each bad value set must be refused for its own reason, not for an unrelated one.
    with pytest.raises(helm_python.HelmError, match=REJECTION_REASONS[request.node.callspec.id]):
        render(values)


# --- weights verification script --------------------------------------------------------------------------

SCRIPT = CHART / "files" / "verify-weights.sh"


def _weights(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    (d / "sub").mkdir(parents=True)
    (d / "model.safetensors").write_bytes(os.urandom(4096))
    (d / "sub" / "config.json").write_text('{"a": 1}')
    sums = subprocess.run(
        ["sha256sum", "model.safetensors", "sub/config.json"], cwd=d, check=True, capture_output=True, text=True
    ).stdout
    (d / "SHA256SUMS").write_text(sums)
    return d


def _verify(d: Path, manifest: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "WEIGHTS_DIR": str(d), "WEIGHTS_MANIFEST": str(manifest or d / "SHA256SUMS")}
    return subprocess.run(["/bin/sh", str(SCRIPT)], env=env, capture_output=True, text=True)


def test_weights_check_accepts_matching_weights(tmp_path):
    proc = _verify(_weights(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout


def test_weights_check_accepts_a_find_generated_manifest(tmp_path):
    """The manifest AIRGAP.md tells operators to generate (paths with a leading ./) is accepted."""
    d = _weights(tmp_path)
    (d / "SHA256SUMS").unlink()
    sums = subprocess.run(
        "find . -type f ! -name SHA256SUMS -print0 | sort -z | xargs -0 sha256sum",
        shell=True,
        cwd=d,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "./sub/config.json" in sums
    (d / "SHA256SUMS").write_text(sums)
    proc = _verify(d)
    assert proc.returncode == 0, proc.stderr
    (d / "extra.bin").write_bytes(b"x")
    assert _verify(d).returncode != 0


@pytest.mark.parametrize(
    "damage",
    ["tampered", "missing-file", "unlisted-file", "no-manifest", "empty-manifest", "malformed-manifest", "dotdot-path"],
)
def test_weights_check_fails_the_pod(tmp_path, damage):
    d = _weights(tmp_path)
    manifest = d / "SHA256SUMS"
    if damage == "tampered":
        (d / "model.safetensors").write_bytes(b"evil")
    elif damage == "missing-file":
        (d / "sub" / "config.json").unlink()
    elif damage == "unlisted-file":
        (d / "payload.pkl").write_bytes(b"pickle")
    elif damage == "no-manifest":
        manifest.unlink()
    elif damage == "empty-manifest":
        manifest.write_text("")
    elif damage == "malformed-manifest":
        manifest.write_text(manifest.read_text() + "not a checksum line\n")
    elif damage == "dotdot-path":
        manifest.write_text(manifest.read_text() + "0" * 64 + "  ../outside\n")
    proc = _verify(d)
    assert proc.returncode != 0, proc.stdout


def test_weights_check_script_is_what_the_chart_ships(rendered):
    (cm,) = [m for m in by_kind(rendered("gpu"), "ConfigMap") if m["metadata"]["name"].endswith("-scripts")]
    assert cm["data"]["verify-weights.sh"].strip() == SCRIPT.read_text().strip()


# --- NOTES, policies files --------------------------------------------------------------------------------


def test_notes_point_to_the_servers_and_the_audit_trail():
    text = notes(load_values("gpu"))
    assert "pod-security.kubernetes.io/enforce=restricted" in text
    assert "medhelm-local audit verify" in text
    assert f"vllm-judge-a.{NAMESPACE}.svc.cluster.local:8000/v1" in text
    assert "WARNING: images are referenced by tag" in notes({})


def test_endpoint_allowlist_matches_appliance_and_chart():
    from medhelm_local.home.config import DEFAULT_ALLOWLIST

    policy = yaml.safe_load((REPO / "policies" / "endpoint-allowlist.yaml").read_text())
    chart_default = yaml.safe_load((CHART / "values.yaml").read_text())["appliance"]["allowlist"]
    assert policy["allowlist"] == DEFAULT_ALLOWLIST == chart_default


def test_audit_retention_defaults_to_six_years():
    policy = yaml.safe_load((REPO / "policies" / "audit-retention.yaml").read_text())
    assert policy["audit_trail"]["retention_years"] == 6
    assert policy["audit_trail"]["append_only"] is True
    chart_default = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart_default["persistence"]["audit"]["keepOnUninstall"] is True
