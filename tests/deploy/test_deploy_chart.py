"""The Helm chart, rendered with Helm's own engine for every CI value set: lint, Kubernetes schemas,
Pod Security "restricted", network isolation, vLLM servers, sharding, secrets, and rejection of bad values."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
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
        for d in by_kind(docs, "StatefulSet")
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == "model-server"
    ]


def replicas(spec: dict[str, Any]) -> int:
    return int(spec.get("replicas", 1))


# --- rendering and lint ---------------------------------------------------------------------------------


def test_value_sets_cover_the_required_cases():
    assert {"default", "gpu", "mig", "sharded", "existing-secret", "rke2", "openshift"} <= set(SETS)


def test_value_sets_render_every_workload_the_chart_has(rendered):
    """checkov, kubernetes-validate and the Rego policies see only what the value sets render: together they
    render every workload of the chart (the console included), and so do the OpenShift ones (other security
    contexts, other checkov exemptions)."""
    def components(docs: list[dict[str, Any]]) -> set[str]:
        return {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in workloads(docs)}

    everything = components(render(load_values("gpu") | {"console": _CONSOLE}))
    assert {"runner", "model-server", "toolbox", "console", "smoke-test"} <= everything
    assert set().union(*(components(rendered(name)) for name in SETS)) == everything
    openshift = [name for name in SETS if load_values(name).get("openshift", {}).get("enabled")]
    assert set().union(*(components(rendered(name)) for name in openshift)) == everything


@pytest.mark.parametrize("name", ["rke2", "openshift"])
def test_site_value_sets_are_realistic(name):
    """The site value sets the issue asks for: 2 models, 3 judges with tensor parallelism, 4 shards."""
    values = load_values(name)
    assert len(values["models"]) == 2 and len(values["judges"]) == 3
    assert all(j["tensorParallelSize"] > 1 and j["gpu"]["count"] == j["tensorParallelSize"] for j in values["judges"])
    assert values["runner"]["shards"] == 4 and values["runner"]["parallelism"] == 4


@pytest.mark.parametrize("name", SETS)
def test_chart_renders(name, rendered):
    docs = rendered(name)
    kinds = {d["kind"] for d in docs}
    expected = {"ConfigMap", "NetworkPolicy", "ServiceAccount"}
    values = load_values(name)
    if not values.get("vllmApiKey", {}).get("existingSecret"):  # sites bring their own Secrets
        expected.add("Secret")
    if not values.get("persistence", {}).get("home", {}).get("existingClaim"):
        expected.add("PersistentVolumeClaim")
    assert expected <= kinds
    # An install or upgrade never starts an evaluation: no Job, ever; runs come from the runner CronJob.
    assert "Job" not in kinds
    assert ("CronJob" in kinds) == bool(values.get("runner", {}).get("model"))
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
        if load_values(name).get("openshift", {}).get("enabled"):
            # restricted-v2 assigns UID, GID and fsGroup itself and rejects pods that fix them.
            assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(psc), where
            assert not any({"runAsUser", "runAsGroup"} & set(c["securityContext"]) for c in all_containers(spec))
        else:
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
    specs = {m["name"]: m for m in values.get("models", []) + values.get("judges", [])}
    for model in config.models:
        if model.name not in served:
            continue
        # One URL per replica: <statefulset>-<i>.<headless service>.<namespace>.svc.cluster.local
        assert len(model.base_urls) == replicas(specs[model.name])
        for i, url in enumerate(model.base_urls):
            assert url.startswith("http://") and url.endswith(f".{NAMESPACE}.svc.cluster.local:8000/v1"), url
            pod, service = url.split("//")[1].split(".")[:2]
            assert service in services and pod == f"{service}-{i}"
            assert _allowed(url, config.allowlist), url
        assert model.api_key_file is not None and model.api_key_env is None
    assert raw["paths"]["audit"].startswith("/var/lib/medhelm-audit/")
    store = values.get("appliance", {}).get("store", {})
    assert config.store.memory_limit_mb == store.get("memoryLimitMb", 128)
    assert config.store.threads == store.get("threads", 2)
    assert config.store.lock_timeout_s == store.get("lockTimeoutS", 600)


def test_the_sites_staff_number_form_reaches_appliance_yaml():
    """A hospital whose people sign in with staff numbers (e1234567) names their form once in the values; every pod
    reads it from the mounted appliance.yaml (the insider cannot widen it there). Unset, appliance.yaml has none."""
    from medhelm_local.home.config import ApplianceConfig

    assert "identity" not in appliance_yaml(render())
    raw = appliance_yaml(render({"appliance": {"identity": {"staffIdPattern": r"[eu]\d{7}"}}}))
    staff_ids = ApplianceConfig.model_validate(raw).identity.staff_ids()
    assert staff_ids is not None and staff_ids.fullmatch("e1234567") and not staff_ids.fullmatch("7730019942")
    with pytest.raises(helm_python.HelmError, match="staffIdPattern"):
        render({"appliance": {"identity": {"staffIdPattern": "x" * 101}}})


def test_extra_models_take_exactly_the_keys_appliance_yaml_takes():
    """appliance.extraModels entries go into appliance.yaml as they are, and the appliance refuses an unknown key at
    start. The schema checked `name` and `kind` only: `replyModel` (the camelCase every other value uses), a
    `base_url` typo or a missing `base_urls` rendered, and the runner, toolbox and console then all failed to start
    ("field models[0].replyModel: Extra inputs are not permitted"). The schema now lists appliance.yaml's keys."""
    from medhelm_local.home.config import ApplianceConfig, ModelEndpoint, Pricing

    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    entry = schema["properties"]["appliance"]["properties"]["extraModels"]["items"]
    assert set(entry["properties"]) == set(ModelEndpoint.model_fields)
    assert set(entry["properties"]["pricing"]["properties"]) == set(Pricing.model_fields)

    full = {"name": "site-llm", "kind": "openai-compatible", "base_urls": ["https://llm.ai.svc.cluster.local/v1"],
            "served_model": "gpt-4o", "reply_model": "gpt-4o-2024-08-06", "api_key_file": "/etc/site-llm/api-key",
            "timeout_s": 300, "context_length": 32768,
            "pricing": {"input_per_million": 2.5, "output_per_million": 10, "gpu_hour_rate": 0, "gpus": 1}}
    config = ApplianceConfig.model_validate(appliance_yaml(render({"appliance": {"extraModels": [full]}})))
    assert config.model("site-llm").replied_model == "gpt-4o-2024-08-06"

    bad = {
        "camelCase": ({"replyModel": "gpt-4o"}, r"additional properties 'replyModel' not allowed"),
        "typo": ({"base_url": "https://x.svc.cluster.local/v1"}, r"additional properties 'base_url' not allowed"),
        "no URL": ({"base_urls": None}, r"missing property 'base_urls'"),
        "not http": ({"base_urls": ["llm.ai.svc.cluster.local/v1"]}, r"/appliance/extraModels/0/base_urls/0"),
        "pricing key": ({"pricing": {"gpuHourRate": 2.5}}, r"additional properties 'gpuHourRate' not allowed"),
    }
    for what, (change, message) in bad.items():
        model = {k: v for k, v in ({"name": "site-llm", "kind": "vllm",
                                    "base_urls": ["http://vllm.ai.svc.cluster.local:8000/v1"]} | change).items()
                 if v is not None}
        with pytest.raises(helm_python.HelmError, match=message):
            render({"appliance": {"extraModels": [model]}})
            pytest.fail(f"{what}: rendered")


def test_a_cluster_domain_off_the_allowlist_is_refused_at_render():
    """clusterDomain is a value, and the replica URLs follow it, but the default allowlist names cluster.local: a
    site with another domain installed cleanly and then every run failed in wait-for-models ("endpoint ... is not on
    the allowlist in appliance.yaml; refused before connecting"). The chart now refuses it, naming the entry."""
    from medhelm_local.inference.egress import is_allowed

    values = load_values("gpu") | {"clusterDomain": "hospital.local"}
    with pytest.raises(helm_python.HelmError, match=r'model "llama-3-8b".*not on appliance.allowlist.*'
                                                    r'"http://\*\.svc\.hospital\.local"'):
        render(values)
    allowlist = ["http://127.0.0.1", "http://*.svc.hospital.local"]
    config = appliance_yaml(render(values | {"appliance": {"allowlist": allowlist}}))
    urls = [url for model in config["models"] for url in model.get("base_urls", [])]
    assert urls and all(".svc.hospital.local:8000/v1" in url and is_allowed(url, allowlist) for url in urls)


@pytest.mark.parametrize(("url", "allowlist"), [
    ("http://llm.ai.svc.cluster.local:8080/v1", ["http://*.svc.cluster.local"]),
    ("http://llm.ai.svc.cluster.local:8080/v1", ["https://*.svc.cluster.local"]),
    ("http://llm.ai.svc.cluster.local:8080/v1", ["http://*.svc.cluster.local:8080"]),
    ("http://llm.ai.svc.cluster.local:8080/v1", ["http://*.svc.cluster.local:8000"]),
    ("http://llm.ai.svc.cluster.local/v1", ["http://*.svc.cluster.local:80"]),
    ("http://LLM.AI.svc.cluster.local:8080/v1", ["http://llm.ai.svc.cluster.local"]),
    ("http://llm.ai.svcXcluster.local:8080/v1", ["http://*.svc.cluster.local"]),
    ("http://10.0.0.5:8080/v1", ["http://10.0.0.5"]),
    ("http://10.0.0.5:8080/v1", ["http://10.0.0.*:8080"]),
    ("http://10.0.0.15:8080/v1", ["http://10.0.0.?:8080"]),
    ("https://[fd00::5]:8443/v1", ["https://[FD00::5]:8443"]),
    ("https://[fd00::5]:8443/v1", ["https://[fd00::6]"]),
    ("https://user@gw.ai.svc.cluster.local/v1", ["https://gw.ai.svc.cluster.local"]),
])
def test_the_chart_allows_an_extra_model_url_exactly_where_the_appliance_does(url, allowlist):
    """appliance.extraModels URLs are checked against appliance.allowlist as the appliance checks them before
    connecting (scheme, the entry's port if any, the host as a shell pattern): the chart refuses a URL at render
    exactly where every request to it would be refused at run time."""
    from medhelm_local.inference.egress import is_allowed

    values = {"appliance": {"allowlist": allowlist, "extraModels": [
        {"name": "site-llm", "kind": "openai-compatible", "base_urls": [url]}]}}
    if is_allowed(url, allowlist):
        render(values)
    else:
        with pytest.raises(helm_python.HelmError, match=r'appliance.extraModels "site-llm": base URL .* is not on '
                                                        r"appliance.allowlist"):
            render(values)


def test_runner_model_must_be_configured():
    with pytest.raises(helm_python.HelmError, match=r"runner\.model"):
        render({"runner": {"model": "not-served"}})


# --- the runner: a CronJob template, never a Job on install or upgrade ------------------------------------


def _runner(docs, kind="CronJob"):
    (job,) = by_kind(docs, kind)
    spec = pod_spec(job)
    (container,) = spec["containers"]
    return job, spec, container


def _job_spec(cron: dict[str, Any]) -> dict[str, Any]:
    return cron["spec"]["jobTemplate"]["spec"]


def test_default_install_starts_nothing(rendered):
    """Issue 15 item 1: the default install has no Job that could fail (or run): only `helm test` hooks."""
    docs = rendered("default")
    assert not by_kind(docs, "Job") and not by_kind(docs, "CronJob")
    assert not servers(docs) and not by_kind(docs, "Service")
    pods = by_kind(docs, "Pod")
    assert pods and all(p["metadata"]["annotations"]["helm.sh/hook"] == "test" for p in pods)
    text = notes({})
    assert "Nothing was started" in text and "helm test medhelm" in text


def test_gpu_free_smoke_test_is_a_helm_test_on_a_throwaway_home(rendered):
    """The smoke test evaluates the bundled sample on the embedded model without touching the release's
    volumes, keys or store: no PVC, no Secret, no MEDHELM_* variable pointing at the real home."""
    (smoke,) = [p for p in by_kind(rendered("default"), "Pod") if p["metadata"]["name"].endswith("-test-smoke")]
    assert smoke["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec = smoke["spec"]
    (c,) = spec["containers"]
    assert c["command"][:5] == ["medhelm-local", "--actor", "helm-test", "demo", "--instances"]
    assert c["command"][c["command"].index("--demo-home") + 1].startswith("/tmp/")
    assert not [k for k in env_map(c) if k.startswith("MEDHELM_")]
    assert {k for v in spec["volumes"] for k in v if k != "name"} == {"emptyDir"}
    assert spec["restartPolicy"] == "Never"


def test_the_smoke_command_succeeds_on_a_fresh_home(tmp_path):
    """Run the smoke pod's own command line (the demo on the embedded model, in a throwaway home)."""
    (smoke,) = [p for p in render({}) if p["metadata"]["name"].endswith("-test-smoke")]
    argv = smoke["spec"]["containers"][0]["command"]
    assert argv[0] == "medhelm-local"
    i = argv.index("--demo-home")
    argv = [*argv[1:i + 1], str(tmp_path / "smoke"), *argv[i + 2:]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDHELM_")} | {"TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "medhelm_local.cli", *argv], capture_output=True, text=True,
                          env=env, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads(proc.stdout)
    assert payload["run_id"] and payload["leaderboard"]


def test_runner_is_a_suspended_cronjob_started_by_hand(rendered):
    """Issue 15 item 9: the runner is a CronJob template; without a schedule it is suspended, so neither an
    install nor an upgrade starts a run; an operator starts one with `kubectl create job --from=cronjob/...`."""
    docs = rendered("gpu")
    cron, spec, c = _runner(docs)
    assert cron["spec"]["suspend"] is True
    assert cron["metadata"]["name"] == "medhelm-medhelm-local-runner"
    # The name does not change between revisions (a Job per revision would restart runs on every upgrade).
    assert "Revision" not in json.dumps(cron) and not re.search(r"-run-\d+$", cron["metadata"]["name"])
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert c["command"] == ["medhelm-local"]
    assert c["args"][:7] == ["--actor", "kubernetes-runner", "run", "--model", "llama-3-8b", "--benchmarks",
                             "pubmedqa,hospice_referral"]
    assert c["args"][c["args"].index("--max-instances") + 1] == "500"
    assert "--shard" not in c["args"]
    assert spec["restartPolicy"] == "Never"
    env = env_map(c)
    assert env["MEDHELM_HOME"] == "/var/lib/medhelm"
    assert env["MEDHELM_CONFIG"] == "/etc/medhelm/appliance.yaml"
    assert "MEDHELM_KEYS_DIR" not in env  # keys mode "home": generated by init on the home PVC
    assert [i["name"] for i in spec["initContainers"]] == ["init-home", "wait-for-models"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/etc/medhelm/appliance.yaml"]["readOnly"] is True
    assert {"/var/lib/medhelm", "/var/lib/medhelm-audit", "/tmp"} <= set(mounts)
    text = notes(load_values("gpu"))
    assert "kubectl -n medhelm-eval create job --from=cronjob/medhelm-medhelm-local-runner" in text


def test_a_schedule_unsuspends_the_cronjob(rendered):
    (cron,) = by_kind(rendered("sharded"), "CronJob")
    assert cron["spec"]["suspend"] is False
    assert cron["spec"]["schedule"] == "30 1 * * 6" and cron["spec"]["timeZone"] == "Etc/UTC"


def test_upgrade_renders_the_same_runner(rendered):
    """An upgrade (revision 2, 3 ...) renders the identical runner object: nothing is deleted or started."""
    values = load_values("gpu")
    with helm_python.Chart.load(str(CHART)) as chart:
        first = chart.render(values, name="medhelm", namespace=NAMESPACE, is_install=True)
        again = chart.render(values, name="medhelm", namespace=NAMESPACE, is_upgrade=True, revision=7)
    key = next(k for k in first if k.endswith("cronjob-runner.yaml"))
    assert first[key] == again[key]
    assert not any(k.endswith("/job-runner.yaml") for k in again)


def test_runner_command_is_configurable():
    """Issue 15 item 1: runner.command replaces the whole command, not only extra args."""
    values = load_values("gpu") | {"runner": {"model": "llama-3-8b", "benchmarks": ["pubmedqa"],
                                              "command": ["medhelm-local", "jury", "run", "RUN-1", "--json"]}}
    _cron, _spec, c = _runner(render(values))
    assert c["command"] == ["medhelm-local"] and c["args"] == ["jury", "run", "RUN-1", "--json"]
    only_command = {"runner": {"command": ["/bin/sh", "-c", "medhelm-local doctor --json"]}}
    _cron, _spec, c = _runner(render(only_command))
    assert c["command"] == ["/bin/sh"] and c["args"] == ["-c", "medhelm-local doctor --json"]


def test_runner_without_benchmarks_is_refused():
    with pytest.raises(helm_python.HelmError, match=r"runner\.benchmarks is empty"):
        render({"runner": {"model": "smollm2-135m-embedded"}})


def test_sharded_run_is_an_indexed_job_sharing_one_run(rendered):
    docs = rendered("sharded")
    cron, _spec, c = _runner(docs)
    job = _job_spec(cron)
    assert job["completionMode"] == "Indexed"
    assert job["completions"] == 8
    assert job["parallelism"] == 4
    i = c["args"].index("--shard")
    assert c["args"][i + 1] == "$(JOB_COMPLETION_INDEX)/8"
    # Every shard of one Job names the same run: the Job's own name.
    assert c["args"][c["args"].index("--run-id") + 1] == "$(MEDHELM_JOB_NAME)"
    env = env_map(c)
    ref = env["JOB_COMPLETION_INDEX"]["fieldRef"]["fieldPath"]
    assert ref == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env["MEDHELM_JOB_NAME"]["fieldRef"]["fieldPath"] == "metadata.labels['batch.kubernetes.io/job-name']"
    names = [e["name"] for e in c["env"]]
    assert names.index("MEDHELM_JOB_NAME") < len(names)  # defined in the same container: $(VAR) expands
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    for pvc in by_kind(docs, "PersistentVolumeClaim"):
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"], pvc["metadata"]["name"]


@pytest.mark.parametrize("volume", ["home", "audit"])
def test_parallel_shards_refuse_any_read_write_once_volume(volume):
    """Issue 15 item 3: every volume the shards share must be ReadWriteMany (the audit one too)."""
    values = load_values("sharded")
    values["persistence"][volume]["accessModes"] = ["ReadWriteOnce"]
    with pytest.raises(helm_python.HelmError, match=rf"persistence\.{volume}\.accessModes \[ReadWriteMany\]"):
        render(values)
    values["runner"]["parallelism"] = 1  # one shard at a time: one node at a time, RWO is fine
    assert by_kind(render(values), "CronJob")


def _affinity_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return spec.get("affinity", {}).get("podAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", [])


def test_pods_sharing_a_read_write_once_home_share_a_node(rendered):
    """Issue 15 item 4: the runner's pods and the toolbox mount the same RWO volumes: a required pod affinity
    to each other's label puts them on one node (else: Multi-Attach). With RWX volumes there is none."""
    docs = rendered("gpu")
    _cron, runner, _c = _runner(docs)
    (toolbox,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-toolbox")]
    toolbox_spec = pod_spec(toolbox)
    (term,) = _affinity_terms(runner)
    assert term == _affinity_terms(toolbox_spec)[0]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    for labels in (_cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"],
                   toolbox["spec"]["template"]["metadata"]["labels"]):
        assert _selects(term["labelSelector"], labels)
    assert not _affinity_terms(_runner(rendered("sharded"))[1])  # RWX: shards spread over nodes
    # A site's own affinity is kept, ours appended.
    site = {"key": "zone", "operator": "In", "values": ["a"]}
    values = load_values("gpu")
    values["runner"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [site]}]}}}
    _cron, spec, _c = _runner(render(values))
    assert spec["affinity"]["nodeAffinity"] == values["runner"]["affinity"]["nodeAffinity"]
    assert len(_affinity_terms(spec)) == 1


def test_writers_wait_for_the_store_lock_and_read_policy_and_pin_from_outside_the_home(rendered):
    """Issue 15 item 4 and the team conventions: every writer waits MEDHELM_LOCK_TIMEOUT_S for the store's lock;
    the export policy and the audit key pin come from ConfigMaps mounted read-only, never from the home."""
    for name in ("gpu", "rke2", "openshift"):
        docs = rendered(name)
        values = load_values(name)
        _cron, spec, runner = _runner(docs)
        toolboxes = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-toolbox")]
        for c in [runner, *[pod_spec(d)["containers"][0] for d in toolboxes]]:
            env = env_map(c)
            lock = values.get("appliance", {}).get("store", {}).get("lockTimeoutS", 600)
            assert env["MEDHELM_LOCK_TIMEOUT_S"] == str(lock)
            assert env["MEDHELM_EXPORT_POLICY"] == "/etc/medhelm/policy/export-policy.yaml"
            mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/etc/medhelm/policy")
            assert mount["readOnly"] is True
        volumes = {v["name"]: v for v in spec["volumes"]}
        policy_cm = volumes["export-policy"]["configMap"]["name"]
        if name == "openshift":
            assert policy_cm == "medhelm-export-policy"  # the site's own, owned by compliance
            ref = env_map(runner)["MEDHELM_AUDIT_KEY_FINGERPRINT"]["configMapKeyRef"]
            assert ref == {"name": "medhelm-audit-key", "key": "fingerprint"}
        else:
            (cm,) = [m for m in by_kind(docs, "ConfigMap") if m["metadata"]["name"] == policy_cm]
            assert cm["data"]["export-policy.yaml"] == (REPO / "policies" / "export-policy.yaml").read_text()
        if name == "rke2":
            ref = env_map(runner)["MEDHELM_AUDIT_KEY_FINGERPRINT"]["configMapKeyRef"]
            (pin,) = [m for m in by_kind(docs, "ConfigMap") if m["metadata"]["name"] == ref["name"]]
            assert pin["data"][ref["key"]] == values["auditKey"]["fingerprint"]
        if name == "gpu":
            assert "MEDHELM_AUDIT_KEY_FINGERPRINT" not in env_map(runner)
            assert "audit signing key is not pinned" in notes(values)


def test_site_adaptations_reach_the_pods(rendered):
    """Issue 15 item 7: RuntimeClass for RKE2/k3s GPUs, priority classes, extra env/volumes/mounts, labels,
    topology spread; per model over the vllm defaults."""
    docs = rendered("rke2")
    for sts in servers(docs):
        spec = pod_spec(sts)
        assert spec["runtimeClassName"] == "nvidia" and spec["priorityClassName"] == "medhelm-gpu"
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    _cron, spec, _c = _runner(docs)
    assert spec["priorityClassName"] == "medhelm-batch" and "runtimeClassName" not in spec
    values = load_values("gpu")
    values["runner"] |= {"extraEnv": [{"name": "SSL_CERT_FILE", "value": "/etc/site-ca/ca.pem"}],
                         "extraVolumes": [{"name": "site-ca", "configMap": {"name": "site-ca"}}],
                         "extraVolumeMounts": [{"name": "site-ca", "mountPath": "/etc/site-ca", "readOnly": True}],
                         "podLabels": {"team": "informatics"}, "runtimeClassName": "gvisor"}
    values["judges"][0] |= {"runtimeClassName": "nvidia", "podLabels": {"gpu-pool": "a100"},
                            "extraEnv": [{"name": "NCCL_DEBUG", "value": "WARN"}],
                            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                                           "whenUnsatisfiable": "DoNotSchedule"}]}
    docs = render(values)
    cron, spec, c = _runner(docs)
    assert env_map(c)["SSL_CERT_FILE"] == "/etc/site-ca/ca.pem"
    assert {"name": "site-ca", "configMap": {"name": "site-ca"}} in spec["volumes"]
    assert any(m["mountPath"] == "/etc/site-ca" for m in c["volumeMounts"])
    assert cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]["team"] == "informatics"
    assert spec["runtimeClassName"] == "gvisor"
    judge = next(s for s in servers(docs) if s["metadata"]["labels"]["medhelm.local/model"] == "judge-a")
    jspec = pod_spec(judge)
    assert jspec["runtimeClassName"] == "nvidia" and jspec["topologySpreadConstraints"][0]["topologyKey"] == "zone"
    assert judge["spec"]["template"]["metadata"]["labels"]["gpu-pool"] == "a100"
    assert env_map(jspec["containers"][0])["NCCL_DEBUG"] == "WARN"
    other = next(s for s in servers(docs) if s["metadata"]["labels"]["medhelm.local/model"] == "judge-b")
    assert "runtimeClassName" not in pod_spec(other)


def test_console_mounts_the_site_volumes_the_runner_mounts():
    """The console runs the appliance on the runner's environment (runner.extraEnv) and appliance.yaml (extraModels
    included), and its IT page probes every model with the model's API key. runner.extraVolumes and
    extraVolumeMounts reached the runner and the toolbox only: a key file for an extraModels server, mounted from
    the site's Secret, worked from the CLI and read "cannot read api_key_file" on the console, and a CA bundle named
    in runner.extraEnv pointed at nothing there. Every file the console's config and environment name is mounted."""
    from tests.deploy.test_deploy_rego import evaluate

    values = load_values("gpu") | {"console": _CONSOLE}
    values["appliance"] = {"extraModels": [{"name": "site-llm", "kind": "openai-compatible",
                                            "base_urls": ["https://llm.site-llm.svc.cluster.local/v1"],
                                            "api_key_file": "/etc/site-llm/api-key"}]}
    values["runner"] |= {
        "extraEnv": [{"name": "SSL_CERT_FILE", "value": "/etc/site-ca/ca.pem"}],
        "extraVolumes": [{"name": "site-ca", "configMap": {"name": "site-ca"}},
                         {"name": "site-llm-key", "secret": {"secretName": "site-llm-key", "defaultMode": 0o440}}],
        "extraVolumeMounts": [{"name": "site-ca", "mountPath": "/etc/site-ca", "readOnly": True},
                              {"name": "site-llm-key", "mountPath": "/etc/site-llm", "readOnly": True}],
    }
    docs = render(values)
    (deployment,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-console")]
    spec = pod_spec(deployment)
    (console,) = [c for c in spec["containers"] if c["name"] == "console"]
    _cron, runner_spec, runner = _runner(docs)
    for volume in values["runner"]["extraVolumes"]:
        assert volume in spec["volumes"] and volume in runner_spec["volumes"], volume["name"]
    for mount in values["runner"]["extraVolumeMounts"]:
        assert mount in console["volumeMounts"] and mount in runner["volumeMounts"], mount["mountPath"]
    (cm,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-console")]
    config = yaml.safe_load(cm["data"]["appliance.yaml"])
    named = [m["api_key_file"] for m in config["models"] if m.get("api_key_file")] + [env_map(console)["SSL_CERT_FILE"]]
    mounted = [m["mountPath"].rstrip("/") + "/" for m in console["volumeMounts"]]
    assert "/etc/site-llm/api-key" in named
    assert [f for f in named if not any(f.startswith(p) for p in mounted)] == []
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)
    assert {package: denied for package, denied in evaluate(docs).items() if denied} == {}


def test_one_models_node_selector_and_affinity_stay_with_that_model():
    """A model pinned to its own GPU pool (nodeSelector, affinity) pins only itself: the models and judges
    rendered after it keep vllm.*'s placement. Merging into vllm.*'s own maps sent every later server to the
    first model's pool (and a later model's nodeSelector added to it)."""
    zone = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}]}}}
    values = load_values("gpu")
    values["vllm"] = {"nodeSelector": {"nvidia.com/gpu.present": "true"}}
    values["models"][0] |= {"nodeSelector": {"gpu-pool": "l40s"}, "affinity": zone}
    values["judges"][0] |= {"nodeSelector": {"gpu-pool": "h100"}}
    placement = {s["metadata"]["labels"]["medhelm.local/model"]: pod_spec(s) for s in servers(render(values))}
    assert placement["llama-3-8b"]["nodeSelector"] == {"nvidia.com/gpu.present": "true", "gpu-pool": "l40s"}
    assert placement["llama-3-8b"]["affinity"] == zone
    assert placement["judge-a"]["nodeSelector"] == {"nvidia.com/gpu.present": "true", "gpu-pool": "h100"}
    assert "affinity" not in placement["judge-a"]
    for name in ("judge-b", "judge-c"):
        assert placement[name]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}, name
        assert "affinity" not in placement[name], name


@pytest.mark.parametrize("where", ["runner", "vllm", "models", "judges"])
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HF_HUB_OFFLINE", "0"),  # weights, tokenizers and configs fetched from the Hub at run time
        ("TRANSFORMERS_OFFLINE", "0"),
        ("VLLM_NO_USAGE_STATS", "0"),
        ("DO_NOT_TRACK", "0"),
        ("VLLM_LOGGING_LEVEL", "DEBUG"),  # vLLM logs request details (prompts: PHI) at DEBUG
        ("VLLM_API_KEY", "a-literal-key"),  # the key in the pod spec instead of its Secret
        ("MEDHELM_EXPORT_POLICY", "/var/lib/medhelm/policy.yaml"),  # a policy the appliance itself can write
        ("MEDHELM_AUDIT_KEY_FINGERPRINT", "SHA256:x"),  # re-pins over compliance's ConfigMap
        ("MEDHELM_KEYS_DIR", "/var/lib/medhelm/keys"),
        ("MEDHELM_ACTOR", "someone-else"),  # the identity written into the audit trail
        ("TMPDIR", "/var/lib/medhelm"),  # scratch files onto the backed-up home volume instead of an emptyDir
        ("HOME", "/var/lib/medhelm-audit"),
        ("HTTPS_PROXY", "http://proxy.hospital.example:3128"),  # every request through a third party
        ("HTTP_PROXY", "http://proxy.hospital.example:3128"),
        ("ALL_PROXY", "socks5://proxy.hospital.example:1080"),
        ("https_proxy", "http://proxy.hospital.example:3128"),
        ("NO_PROXY", ""),
        ("PYTHONPATH", "/var/lib/medhelm/site"),  # other code, run in the pods that hold the keys
        ("LD_PRELOAD", "/var/lib/medhelm/hook.so"),
    ],
)
def test_extra_env_cannot_override_what_the_chart_pins(where, name, value):
    """Kubernetes applies the last of two env entries with one name, and extraEnv comes after the chart's own:
    an accepted entry would silently undo the offline switches, the log level, the Secret-only API key or the
    compliance-owned pins. The schema refuses such names wherever extraEnv is accepted."""
    values = load_values("gpu") | {"auditKey": {"existingConfigMap": "medhelm-audit-key"}}
    entry = [{"name": name, "value": value}]
    if where in ("models", "judges"):
        values[where][0]["extraEnv"] = entry
        path = rf"/{where}/0/extraEnv/0/name"
    else:
        values.setdefault(where, {})["extraEnv"] = entry
        path = rf"/{where}/extraEnv/0/name"
    with pytest.raises(helm_python.HelmError, match=path):
        render(values)


@pytest.mark.parametrize("path", ["/var/lib/medhelm/pub.pem", "/var/lib/medhelm-audit/k.pub", "/tmp/k.pub",
                                  "/run/medhelm/keys/signing-ed25519.pub.pem", "/etc/medhelm/../../var/lib/medhelm/p",
                                  "pub.pem", None])
def test_an_audit_public_key_pin_on_a_volume_the_appliance_writes_is_refused(path):
    """MEDHELM_AUDIT_PUBKEY_FILE (RUNBOOK: the public key mounted read-only) anchors the trail only off the
    appliance's writable volumes: pointed at the home, it was a key whoever holds the home could replace."""
    entry: dict[str, Any] = {"name": "MEDHELM_AUDIT_PUBKEY_FILE"}
    if path is None:
        entry["valueFrom"] = {"configMapKeyRef": {"name": "x", "key": "path"}}
    else:
        entry["value"] = path
    values = load_values("gpu")
    values["runner"]["extraEnv"] = [entry]
    with pytest.raises(helm_python.HelmError, match=r"MEDHELM_AUDIT_PUBKEY_FILE must be a literal absolute path"):
        render(values)
    values["runner"]["extraEnv"] = [{"name": "MEDHELM_AUDIT_PUBKEY_FILE", "value": "/etc/medhelm/audit-key/key.pub"}]
    assert render(values)


@pytest.mark.parametrize("name", ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "MEDHELM_LOCK_TIMEOUT_S", "NCCL_DEBUG"])
def test_extra_env_still_takes_a_site_ca_and_harmless_settings(name):
    values = load_values("gpu")
    values["runner"]["extraEnv"] = [{"name": name, "value": "/etc/site-ca/ca.pem"}]
    (cron,) = by_kind(render(values), "CronJob")
    assert env_map(pod_spec(cron)["containers"][0])[name] == "/etc/site-ca/ca.pem"


@pytest.mark.parametrize("network_policy", [True, False])
def test_appliance_pods_say_how_runs_are_sent_here(network_policy):
    """`runs list`, `runs show` and the console told a user in the toolbox to type `medhelm-local run --resume`, and
    `run` there sent every request into a failure (the toolbox reaches DNS only). Every appliance pod names the
    runner CronJob (its hints name a Job from it); the toolbox, while its NetworkPolicies hold, says it reaches no
    model server, so `run` there is refused (exit 2) before anything is sent."""
    values = load_values("gpu") | {"console": _CONSOLE, "networkPolicy": {"enabled": network_policy}}
    docs = render(values)
    (cron,) = by_kind(docs, "CronJob")
    containers = {d["metadata"]["name"]: env_map(c) for d in workloads(docs) for c in pod_spec(d)["containers"]
                  if c["name"] in {"runner", "toolbox", "console"}}
    assert len(containers) == 3
    for name, env in containers.items():
        assert env["MEDHELM_RUNNER_CRONJOB"] == cron["metadata"]["name"], name
        no_egress = name.endswith("-toolbox") and network_policy
        assert env.get("MEDHELM_NO_MODEL_EGRESS") == ("1" if no_egress else None), name
    for pinned in ("MEDHELM_RUNNER_CRONJOB", "MEDHELM_NO_MODEL_EGRESS"):
        values["runner"]["extraEnv"] = [{"name": pinned, "value": "x"}]
        with pytest.raises(helm_python.HelmError, match="/runner/extraEnv/0/name"):
            render(values)


def test_every_pinned_env_var_keeps_the_charts_value(rendered):
    """Whatever a value set adds, the effective (last) value of each pinned variable is the chart's."""
    pinned = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    values = load_values("gpu")
    values["runner"]["extraEnv"] = [{"name": "SSL_CERT_FILE", "value": "/etc/site-ca/ca.pem"}]
    values["vllm"] = {"extraEnv": [{"name": "NCCL_DEBUG", "value": "WARN"}]}
    for obj in [*workloads(render(values)), *(o for n in SETS for o in workloads(rendered(n)))]:
        for c in pod_spec(obj)["containers"]:
            env = env_map(c)
            if c["name"] in {"runner", "toolbox", "vllm", "console", "smoke"}:
                assert {k: env.get(k) for k in pinned} == pinned, (obj["metadata"]["name"], c["name"])
            if c["name"] == "vllm":
                assert env["VLLM_LOGGING_LEVEL"] == "INFO"
                assert "secretKeyRef" in env["VLLM_API_KEY"]


def test_ephemeral_storage_limits_hold_the_scratch_volumes(rendered):
    """Issue 15 item 10: no pod can be evicted for filling the scratch space it was given."""
    for name in SETS:
        for obj in workloads(rendered(name)):
            spec = pod_spec(obj)
            disk = sum(_mib(v["emptyDir"]["sizeLimit"]) for v in spec["volumes"]
                       if "emptyDir" in v and v["emptyDir"].get("medium") != "Memory")
            limit = sum(_mib(c["resources"]["limits"].get("ephemeral-storage", "0Mi")) for c in spec["containers"])
            assert limit >= disk + 256, f"{name}: {obj['kind']}/{obj['metadata']['name']}: {limit} < {disk}"


def test_toolbox_stages_raw_extracts_off_the_home_volume(rendered):
    """Issue 15 item 15: extracts copied in for registration land on the toolbox's own emptyDir (never on the
    home volume, so never in its snapshots or backups) and vanish with the pod."""
    (toolbox,) = [d for d in by_kind(rendered("rke2"), "Deployment") if d["metadata"]["name"].endswith("-toolbox")]
    spec = pod_spec(toolbox)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["incoming"] == {"name": "incoming", "emptyDir": {"sizeLimit": "20Gi"}}
    (c,) = spec["containers"]
    mount = next(m for m in c["volumeMounts"] if m["name"] == "incoming")
    assert mount["mountPath"] == "/var/lib/medhelm-incoming"
    assert not mount["mountPath"].startswith("/var/lib/medhelm/")


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


@pytest.mark.parametrize(
    "keys, message",
    [
        # keys.mode left at its default (home): the Secret was never mounted and `init` made new keys on the home PVC.
        ({"existingSecret": "medhelm-appliance-keys-v1"}, r'keys\.existingSecret "medhelm-appliance-keys-v1" is set '
                                                          r'but keys\.mode is "home".*set keys\.mode: existingSecret'),
        ({"mode": "secret", "existingSecret": "medhelm-appliance-keys-v1", "signingKey": "s", "signingPublicKey": "p",
          "storeDataKey": "d"}, r'keys\.mode is "secret", which does not read it'),
        # RUNBOOK's migration to existingSecret with the old private keys left in the values (and Helm's history).
        ({"mode": "existingSecret", "existingSecret": "medhelm-appliance-keys-v2", "signingKey": "s"},
         r'read only in keys\.mode: secret, not "existingSecret": remove them'),
        ({"storeDataKey": "d"}, r'read only in keys\.mode: secret, not "home"'),
    ],
)
def test_key_values_another_mode_would_ignore_are_refused(keys, message):
    with pytest.raises(helm_python.HelmError, match=message):
        render({"keys": keys})


def test_a_vllm_api_key_value_beside_its_existing_secret_is_refused():
    """A site moving the vLLM API key to a Secret of its own (existingSecret, the GitOps setting) and leaving
    vllmApiKey.value in the values rendered: the pods read the Secret, and Helm went on keeping the old key in
    every release-history Secret."""
    secret_only = render({"vllmApiKey": {"existingSecret": "medhelm-vllm-api-key"}})
    assert not [d for d in by_kind(secret_only, "Secret") if d["metadata"]["name"].endswith("-vllm-api-key")]
    with pytest.raises(helm_python.HelmError, match=r'vllmApiKey\.value is set but vllmApiKey\.existingSecret '
                                                    r'"medhelm-vllm-api-key" is what the pods read: remove'):
        render({"vllmApiKey": {"existingSecret": "medhelm-vllm-api-key", "value": "old-key-in-the-values"}})


def test_a_console_ingress_without_the_console_is_refused():
    """console.ingress.enabled with console.enabled false rendered no Ingress and said nothing: the site believed
    it had published the console. The chart now refuses it at render; with the console on, the Ingress renders."""
    ingress = {"enabled": True, "host": "medhelm.hospital.example"}
    with pytest.raises(helm_python.HelmError, match=r"console\.ingress\.enabled is true but console\.enabled is "
                                                    r"false: the chart renders no console"):
        render({"console": {"enabled": False, "ingress": ingress}})
    assert by_kind(render({"console": _CONSOLE | {"ingress": ingress}}), "Ingress")


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
        # Ephemeral storage holds the scratch volumes (compile caches, /tmp) plus logs: no eviction mid-load.
        volumes = {v["name"]: v for v in spec["volumes"]}
        scratch = _mib(volumes["cache"]["emptyDir"]["sizeLimit"]) + _mib(volumes["tmp"]["emptyDir"]["sizeLimit"])
        assert _mib(c["resources"]["limits"]["ephemeral-storage"]) >= scratch + 512
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
        assert env_map(verify)["WEIGHTS_DIR_MANIFEST"] == "SHA256SUMS"
        # One pod replaced at a time, each only after the previous one is Ready again (no extra GPU).
        assert dep["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
        assert dep["spec"]["podManagementPolicy"] == "Parallel"


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


@pytest.mark.parametrize("arg", ["-tp", "-t", "-tp=2", "--tensor_par", "--pipeline-parallel-size=2", "-pp",
                                 "--data_parallel", "-dp", "-dpl", "--data-parallel-rank", "--data-parallel-size-local",
                                 "-O3", "--enable-prefix-caching"])
def test_chart_and_serve_vllm_refuse_the_same_parallel_size_flags(arg):
    """A parallel size is the chart's value or `serve vllm`'s option, never an extra flag: both read a flag as
    vLLM's parser does (abbreviations, underscores, -tp/-pp/-dp) and refuse the same ones."""
    from medhelm_local.inference.vllm import parallel_flag

    model = {"name": "m", "weights": {"claim": "w"}, "extraArgs": [arg]}
    try:
        render({"models": [model]})
        refused_by_chart = False
    except helm_python.HelmError as error:
        assert "extraArgs" in str(error) and "sets the" in str(error), error
        refused_by_chart = True
    assert refused_by_chart == (parallel_flag(arg) is not None)


@pytest.mark.parametrize("where", ["model", "vllm"])
def test_site_extra_args_keep_the_access_log_off(where):
    """vllm.extraArgs used to default to ["--disable-uvicorn-access-log"]: a site setting its own list (say
    ["--enable-prefix-caching"]) replaced it and every server logged an access line per request again. The chart
    now passes the flag itself, whatever extraArgs says, and refuses the --no- form that would undo it."""
    model = {"name": "m", "weights": {"claim": "w"}}
    values: dict[str, Any] = {"models": [model], "vllm": {"extraArgs": ["--enable-prefix-caching"]}}
    if where == "model":
        model["extraArgs"] = ["--max-num-seqs", "64"]
    (sts,) = servers(render(values))
    args = pod_spec(sts)["containers"][0]["args"]
    assert "--disable-uvicorn-access-log" in args and "--enable-prefix-caching" in args
    assert args.index("--disable-uvicorn-access-log") < args.index("--enable-prefix-caching")
    for undo in ("--no-disable-uvicorn-access-log", "--no_disable_uvicorn_access_log=true", "--no-disable-uvi"):
        if where == "model":
            model["extraArgs"] = [undo]
        else:
            values["vllm"] = {"extraArgs": [undo]}
        with pytest.raises(helm_python.HelmError, match=r"turns uvicorn's access log back on"):
            render(values)


@pytest.mark.parametrize(("arg", "refused"), [
    ("--served-model-name", True), ("--served_model_name=other", True), ("--served-model", True), ("--ser", True),
    ("--seed", False), ("--served-model-names", False), ("-O3", False)])
@pytest.mark.parametrize("where", ["model", "vllm"])
def test_the_served_name_is_the_charts_so_replies_carry_the_name_asked_for(arg, refused, where):
    """No reply_model for the chart's own servers: each serves one name (servedModel, default its name), appliance.yaml
    asks for that name, and vLLM names the model asked for in its replies. A --served-model-name in extraArgs came
    after the chart's and won in vLLM: the server then answered every request for servedModel with 404 (or, with
    the name among several, under another name: model_mismatch). The chart refuses it, however vLLM would read it."""
    model = {"name": "m", "servedModel": "llama-3-8b", "weights": {"claim": "w"}}
    values: dict[str, Any] = {"models": [model]}
    if where == "model":
        model["extraArgs"] = [arg, "other"]
    else:
        values["vllm"] = {"extraArgs": [arg, "other"]}
    if not refused:
        docs = render(values)
        (sts,) = servers(docs)
        args = pod_spec(sts)["containers"][0]["args"]
        assert args[args.index("--served-model-name") + 1] == "llama-3-8b"
        assert appliance_yaml(docs)["models"][-1]["served_model"] == "llama-3-8b"
        assert "reply_model" not in appliance_yaml(docs)["models"][-1]
        return
    with pytest.raises(helm_python.HelmError, match=r"sets the name .* serve.* under.*set servedModel"):
        render(values)


def test_pipeline_and_data_parallelism_use_every_gpu_of_the_replica():
    """Beyond tensor parallelism, vLLM splits a model into pipeline stages or serves copies of it in one pod: each
    worker on one GPU, tensorParallelSize x pipelineParallelSize x dataParallelSize of them. The chart passes
    those sizes from the values (the GPU check sees them) and requests exactly that many GPUs, and the pricing's
    GPU count is the pod's. A release that sets neither keeps its servers' arguments (no restart on upgrade)."""
    from tests.deploy.test_deploy_rego import evaluate

    values = load_values("gpu")
    values["models"][0] |= {"gpu": {"count": 4}, "tensorParallelSize": 2, "pipelineParallelSize": 2}
    values["judges"][0] |= {"gpu": {"count": 4}, "tensorParallelSize": 2, "dataParallelSize": 2}
    docs = render(values)
    by_model = {s["metadata"]["labels"]["medhelm.local/model"]: pod_spec(s)["containers"][0] for s in servers(docs)}
    model, judge = by_model["llama-3-8b"], by_model["judge-a"]
    flags = dict(zip(model["args"][1::2], model["args"][2::2], strict=False))
    assert (flags["--tensor-parallel-size"], flags["--pipeline-parallel-size"]) == ("2", "2")
    assert "--data-parallel-size" not in model["args"]
    assert model["resources"]["limits"]["nvidia.com/gpu"] == model["resources"]["requests"]["nvidia.com/gpu"] == 4
    flags = dict(zip(judge["args"][1::2], judge["args"][2::2], strict=False))
    assert (flags["--tensor-parallel-size"], flags["--data-parallel-size"]) == ("2", "2")
    assert "--pipeline-parallel-size" not in judge["args"]
    assert judge["resources"]["limits"]["nvidia.com/gpu"] == 4
    pricing = {m["name"]: m.get("pricing") for m in appliance_yaml(docs)["models"]}
    assert pricing["llama-3-8b"]["gpus"] == 4 * 2  # per replica, 2 replicas
    for name in ("judge-b", "judge-c"):
        args = by_model[name]["args"]
        assert "--pipeline-parallel-size" not in args and "--data-parallel-size" not in args, name
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)
    assert {package: denied for package, denied in evaluate(docs).items() if denied} == {}


def _mib(size: str) -> int:
    number = int(re.fullmatch(r"(\d+)(Mi|Gi)", size).group(1))  # type: ignore[union-attr]
    return number * 1024 if size.endswith("Gi") else number


def test_per_replica_services_and_startup_from_expected_load_time(rendered):
    """Issue 15 items 8 and 14: each replica has its own DNS name (headless Service + StatefulSet), and the
    startup probe and the documented rollout timeout follow the expected start-up time, per model."""
    docs = rendered("rke2")
    values = load_values("rke2")
    by_model = {d["metadata"]["labels"]["medhelm.local/model"]: d for d in servers(docs)}
    services = {s["metadata"]["name"]: s for s in by_kind(docs, "Service")}
    config = appliance_yaml(docs)
    urls = {m["name"]: m.get("base_urls", []) for m in config["models"]}
    for spec in values["models"] + values["judges"]:
        sts = by_model[spec["name"]]
        name = sts["metadata"]["name"]
        assert len(name) <= 52
        svc = services[name]
        assert svc["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == name
        n = spec.get("replicas", 1)
        domain = f"{NAMESPACE}.svc.cluster.local:8000"
        assert urls[spec["name"]] == [f"http://{name}-{i}.{name}.{domain}/v1" for i in range(n)]
        (c,) = pod_spec(sts)["containers"]
        expected = spec.get("startupSeconds", values["vllm"]["startupSeconds"])
        probe = c["startupProbe"]
        assert probe["periodSeconds"] * probe["failureThreshold"] >= expected
        assert probe["periodSeconds"] * (probe["failureThreshold"] - 1) < expected
        assert sts["metadata"]["annotations"]["medhelm.local/expected-startup-seconds"] == str(expected)
    text = notes(values)
    timeout = int(re.search(r"rollout status statefulset .* --timeout=(\d+)s", text).group(1))  # type: ignore[union-attr]
    assert timeout >= 3600 + 300  # the slowest judge, plus the weights check


def test_upgrade_of_a_single_replica_server_is_waited_for(rendered):
    """Issue 15 item 5: the runner waits for every replica's /health before it sends anything."""
    _cron, spec, _c = _runner(rendered("rke2"))
    (wait,) = [i for i in spec["initContainers"] if i["name"] == "wait-for-models"]
    assert wait["command"][:3] == ["medhelm-local", "models", "wait"]
    assert int(wait["command"][wait["command"].index("--timeout") + 1]) >= 600
    assert env_map(wait)["MEDHELM_CONFIG"] == "/etc/medhelm/appliance.yaml"


def test_helm_test_probes_models_from_a_runner_labelled_pod(rendered):
    """Issue 15 item 5: `helm test` calls every model from a pod the NetworkPolicies treat as the runner, so a
    blocked policy or wrong DNS peers show at install time."""
    docs = rendered("rke2")
    (pod,) = [p for p in by_kind(docs, "Pod") if p["metadata"]["name"].endswith("-test-models")]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    labels = pod["metadata"]["labels"]
    (egress,) = [p for p in by_kind(docs, "NetworkPolicy") if p["metadata"]["name"].endswith("-runner-egress")]
    assert _selects(egress["spec"]["podSelector"], labels)
    (ingress,) = [p for p in by_kind(docs, "NetworkPolicy") if p["metadata"]["name"].endswith("-model-server-ingress")]
    assert _selects(ingress["spec"]["ingress"][0]["from"][0]["podSelector"], labels)
    (c,) = pod["spec"]["containers"]
    assert c["command"][3:5] == ["models", "wait"]
    # It mounts no PVC: it can run beside a run and on any node.
    assert not [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]


def test_helm_test_probes_site_servers_with_the_runners_key_and_ca(tmp_path):
    """`models wait` probes an appliance.extraModels server with its API key (api_key_file on runner.extraVolumes,
    or api_key_env from runner.extraEnv), over TLS with the site's CA bundle. The `helm test` pod had none of
    runner.extraEnv, extraVolumes and extraVolumeMounts: the runner's own wait passed, and `helm test` failed
    with "cannot read api_key_file" (exit 2). It now runs the same probe the runner does, and the probe gets as far
    as the connection (nothing listens here: not ready, exit 1), never stopping at the key."""
    values = load_values("gpu")
    values["appliance"] = {"extraModels": [
        {"name": "site-llm", "kind": "openai-compatible", "base_urls": ["http://127.0.0.1:9/v1"],
         "api_key_file": "/etc/site-llm/api-key"},
        {"name": "site-gw", "kind": "openai-compatible", "base_urls": ["http://127.0.0.1:9/v1"],
         "api_key_env": "SITE_GW_KEY"}]}
    values["runner"] |= {
        "extraEnv": [{"name": "SSL_CERT_FILE", "value": "/etc/site-ca/ca.pem"},
                     {"name": "SITE_GW_KEY", "valueFrom": {"secretKeyRef": {"name": "site-gw", "key": "api-key"}}}],
        "extraVolumes": [{"name": "site-ca", "configMap": {"name": "site-ca"}},
                         {"name": "site-llm-key", "secret": {"secretName": "site-llm-key", "defaultMode": 0o440}}],
        "extraVolumeMounts": [{"name": "site-ca", "mountPath": "/etc/site-ca", "readOnly": True},
                              {"name": "site-llm-key", "mountPath": "/etc/site-llm", "readOnly": True}],
    }
    docs = render(values)
    (pod,) = [p for p in by_kind(docs, "Pod") if p["metadata"]["name"].endswith("-test-models")]
    (c,) = pod["spec"]["containers"]
    for volume in values["runner"]["extraVolumes"]:
        assert volume in pod["spec"]["volumes"], volume["name"]
    for mount in values["runner"]["extraVolumeMounts"]:
        assert mount in c["volumeMounts"], mount["mountPath"]
    env = env_map(c)
    assert env["SSL_CERT_FILE"] == "/etc/site-ca/ca.pem" and "secretKeyRef" in env["SITE_GW_KEY"]
    kubernetes_validate.validate(pod, K8S_VERSIONS[-1], strict=True)

    # The pod's command on its appliance.yaml, with its mounts and environment laid out in a temporary root.
    config = appliance_yaml(docs)
    config["models"] = [m for m in config["models"] if m["name"].startswith("site-")]
    config["judges"] = []
    mounted = {m["mountPath"] for m in c["volumeMounts"]}
    key_dir = tmp_path / "etc-site-llm"
    key_dir.mkdir()
    (key_dir / "api-key").write_text("site-key\n")
    for model in config["models"]:
        if "api_key_file" in model:
            assert str(Path(model["api_key_file"]).parent) in mounted
            model["api_key_file"] = str(key_dir / "api-key")
    config_file = tmp_path / "appliance.yaml"
    config_file.write_text(yaml.safe_dump(config))
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("MEDHELM_")}
    run_env |= {"MEDHELM_HOME": str(tmp_path / "home"), "MEDHELM_CONFIG": str(config_file),
                "SITE_GW_KEY": "gw-key", "PYTHONPATH": str(REPO)}
    command = [*c["command"][:-2], "--timeout", "2", "--interval", "0.5", "--json"]
    done = subprocess.run([sys.executable, "-m", "medhelm_local.cli", *command[1:]], env=run_env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr  # not ready (nothing listens), not a configuration error (2)
    replicas = json.loads(done.stdout)["replicas"]
    assert {r["model"] for r in replicas} == {"site-llm", "site-gw"}
    assert all(not r["ok"] and r["attempts"] >= 1 for r in replicas)  # probed, not stopped at a missing key


# --- network isolation ------------------------------------------------------------------------------------


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


@pytest.mark.parametrize("name", SETS)
def test_network_policies_isolate_the_release(name, rendered):
    docs = rendered(name)
    console = load_values(name).get("console", {})
    site_servers = load_values(name).get("networkPolicy", {}).get("extraRunnerEgress", [])
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
        if obj["kind"] == "Pod":
            labels = obj["metadata"]["labels"]
        else:
            template = obj["spec"].get("template") or obj["spec"]["jobTemplate"]["spec"]["template"]
            labels = template["metadata"]["labels"]
        assert any(_selects(p["spec"]["podSelector"], labels) for p in deny), obj["metadata"]["name"]
    for p in policies:
        component = p["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/component")
        for rule in p["spec"].get("egress", []):
            assert rule.get("to") and rule.get("ports"), p["metadata"]["name"]
            ports = {port["port"] for port in rule["ports"]}
            if ports <= {53, 5353}:
                # DNS: the configured peers; an ipBlock only for one address (a node-local DNS cache).
                for peer in rule["to"]:
                    if "ipBlock" in peer:
                        assert peer["ipBlock"]["cidr"].endswith(("/32", "/128")), peer
                continue
            if component == "console" and rule in console.get("egress", []):
                continue  # oauth2-proxy's identity provider, as console.egress names it
            if component in {"runner", "console"} and rule in site_servers:
                continue  # the appliance.extraModels servers, which the runner calls and the console probes
            assert component in {"runner", "console"}
            for peer in rule["to"]:
                assert "ipBlock" not in peer
                assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "model-server"
        for rule in p["spec"].get("ingress", []):
            if component == "console":  # oauth2-proxy's port, from the ingress controller's pods only
                # The value set's selectors alone (null drops a default label Helm would merge in).
                ns, pods = ({k: v for k, v in console["ingressController"][s].items() if v is not None}
                            for s in ("namespaceSelector", "podSelector"))
                controller = {"namespaceSelector": {"matchLabels": ns}, "podSelector": {"matchLabels": pods}}
                assert rule["from"] == [controller]
                assert [port["port"] for port in rule["ports"]] == [4180]
                continue
            assert component == "model-server"
            sources = [peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for peer in rule["from"]]
            assert sources in (["runner"], ["console"])  # the runner's requests; the console IT page's probes
    # The console reaches the model servers the runner reaches (its IT page probes each one) and, besides them,
    # only the identity provider.
    egress = {p["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/component"): p["spec"].get("egress", [])
              for p in policies if "Egress" in p["spec"]["policyTypes"]}
    if "console" in egress:
        assert egress["console"] == egress.get("runner", []) + console["egress"]
    for svc in by_kind(docs, "Service"):
        assert svc["spec"]["type"] == "ClusterIP"


_CONSOLE: dict[str, Any] = {
    "enabled": True,
    "roles": {"it": ["medhelm-it"]},
    "oauth2Proxy": {"oidcIssuerUrl": "https://idp.hospital.example/realms/staff", "clientId": "medhelm-console",
                    "existingSecret": "medhelm-console-oidc"},
    "egress": [{"to": [{"ipBlock": {"cidr": "10.20.0.5/32"}}], "ports": [{"port": 443, "protocol": "TCP"}]}],
}
_IDP_HTTPS = {"ports": [{"port": 443, "protocol": "TCP"}]}


@pytest.mark.parametrize(
    ("values", "path"),
    [
        # "HTTPS to the identity provider", written without `to`: HTTPS to every address, the internet included.
        pytest.param({"networkPolicy": {"extraRunnerEgress": [_IDP_HTTPS]}}, "/networkPolicy/extraRunnerEgress/0",
                     id="runner-egress-without-peers"),
        pytest.param({"networkPolicy": {"extraRunnerEgress": [{"to": [], **_IDP_HTTPS}]}},
                     "/networkPolicy/extraRunnerEgress/0/to", id="runner-egress-empty-peers"),
        pytest.param({"networkPolicy": {"extraRunnerEgress": [{"to": [{"podSelector": {}}]}]}},
                     "/networkPolicy/extraRunnerEgress/0", id="runner-egress-every-port"),
        pytest.param({"networkPolicy": {"extraRunnerEgress": [{}]}}, "/networkPolicy/extraRunnerEgress/0",
                     id="runner-egress-allow-all"),
        pytest.param({"networkPolicy": {"extraRunnerEgress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}],
                                                               **_IDP_HTTPS}]}},
                     "/networkPolicy/extraRunnerEgress/0/to/0/ipBlock/cidr", id="runner-egress-internet"),
        pytest.param({"networkPolicy": {"extraModelServerIngress": [{"ports": [{"port": 8000}]}]}},
                     "/networkPolicy/extraModelServerIngress/0", id="model-ingress-from-anywhere"),
        pytest.param({"networkPolicy": {"extraModelServerIngress": [
            {"from": [{"ipBlock": {"cidr": "0.0.0.0/1"}}, {"ipBlock": {"cidr": "128.0.0.0/1"}}],
             "ports": [{"port": 8000}]}]}},
                     "/networkPolicy/extraModelServerIngress/0/from/0/ipBlock/cidr",
                     id="model-ingress-from-the-internet-in-two-halves"),
        pytest.param({"console": _CONSOLE | {"egress": [_IDP_HTTPS]}}, "/console/egress/0",
                     id="console-egress-without-peers"),
        pytest.param({"console": _CONSOLE | {"egress": [{"to": [{"ipBlock": {"cidr": "::/0"}}], **_IDP_HTTPS}]}},
                     "/console/egress/0/to/0/ipBlock/cidr", id="console-egress-internet"),
        pytest.param({"console": _CONSOLE | {"egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0",
                                                                            "except": ["10.0.0.0/8"]}}],
                                                         **_IDP_HTTPS}]}},
                     "/console/egress/0/to/0/ipBlock/cidr", id="console-egress-internet-with-exceptions"),
        pytest.param({"console": _CONSOLE | {"egress": [{"to": [{"namespaceSelector": {}}], **_IDP_HTTPS}]}},
                     "/console/egress/0/to/0/namespaceSelector", id="console-egress-every-namespace"),
        pytest.param({"console": _CONSOLE | {"egress": [{"to": [{"podSelector": {}}], **_IDP_HTTPS}]}},
                     "/console/egress/0/to/0/podSelector", id="console-egress-every-pod"),
        # (values.yaml sets both; `null` removes a default)
        pytest.param({"console": _CONSOLE | {"ingressController": {"namespaceSelector": None, "podSelector": None}}},
                     "/console/ingressController", id="console-ingress-from-every-pod"),
    ],
)
def test_extra_network_rules_cannot_open_the_release_to_everything(values, path):
    """A NetworkPolicy rule without peers admits every address, one without ports every port, and an empty
    selector every namespace or pod: the release's own policies (policies/rego/network.rego) deny all of these.
    The schema refuses such values instead of rendering them."""
    with pytest.raises(helm_python.HelmError, match=re.escape(path)):
        render(values)


def test_narrow_extra_network_rules_reach_the_policies():
    """The rules the values document (an in-cluster endpoint for the runner, Prometheus to the model servers,
    HTTPS to the identity provider for the console) render into the policies unchanged."""
    endpoint = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "llm"}},
                        "podSelector": {"matchLabels": {"app": "tgi"}}}],
                "ports": [{"protocol": "TCP", "port": 8080}]}
    metrics = {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
               "ports": [{"protocol": "TCP", "port": 8000}]}
    values = load_values("gpu") | {"networkPolicy": {"extraRunnerEgress": [endpoint],
                                                     "extraModelServerIngress": [metrics]},
                                   "console": _CONSOLE}
    policies = {p["metadata"]["name"].removeprefix("medhelm-medhelm-local-"): p
                for p in by_kind(render(values), "NetworkPolicy")}
    assert endpoint in policies["runner-egress"]["spec"]["egress"]
    assert metrics in policies["model-server-ingress"]["spec"]["ingress"]
    assert _CONSOLE["egress"][0] in policies["console"]["spec"]["egress"]


def test_documented_extra_network_rules_pass_the_releases_own_policies():
    """What RUNBOOK documents for a server outside the chart (its pods in another namespace, or one address on
    the site network) passes policies/rego/network.rego; the policy used to deny every runner peer but the
    release's model servers, so a site following the runbook failed its own admission check."""
    from tests.deploy.test_deploy_rego import evaluate

    in_cluster = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "llm"}},
                          "podSelector": {"matchLabels": {"app": "tgi"}}}],
                  "ports": [{"protocol": "TCP", "port": 8080}]}
    on_site = {"to": [{"ipBlock": {"cidr": "10.20.0.7/32"}}], "ports": [{"protocol": "TCP", "port": 8000}]}
    metrics = {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
               "ports": [{"protocol": "TCP", "port": 8000}]}
    docs = render(load_values("gpu") | {"networkPolicy": {"extraRunnerEgress": [in_cluster, on_site],
                                                          "extraModelServerIngress": [metrics]},
                                        "console": _CONSOLE})
    assert {name: denied for name, denied in evaluate(docs).items() if denied} == {}


# --- values.schema.json rejects bad values ----------------------------------------------------------------

_SERVED = {"name": "m", "weights": {"claim": "w"}}
REJECTION_REASONS = {
    "root-uid": r"/securityContext/\w+': minimum",
    "request-logging": r"/models/0/extraArgs/0",
    "api-key-in-argv": r"/models/0/extraArgs/0",
    "output-logging": r"/models/0/extraArgs/0",
    "request-logging-underscores": r"/models/0/extraArgs/0",
    "request-logging-abbreviated": r"/vllm/extraArgs/1",
    "flags-from-a-file": r"/models/0/extraArgs/0",
    "latest-tag": r"/image/appliance/tag",
    "bad-digest": r"/image/vllm/digest",
    "weights-path-escape": r"/models/0/weights/subPath",
    "weights-missing": r"missing property 'weights'",
    "zero-gpus": r"/models/0/gpu/count",
    "gpu-limit-beside-gpu-count": r'model "m": resources.limits.nvidia.com/gpu is 2 \(its own, .*\) but gpu.count is 1',
    "global-gpu-limit-beside-gpu-count": r'model "m": resources.limits.nvidia.com/gpu is 4 .* but gpu.count is 1',
    "two-audit-key-pins": r"auditKey.fingerprint and auditKey.existingConfigMap are all set",
    "extra-args-beside-command": r"with runner.command it would be ignored",
    "tensor-parallel-beyond-gpus": r'model "m": tensorParallelSize 2 x pipelineParallelSize 1 x dataParallelSize 1 '
    r"needs 2 GPUs per replica, but gpu\.count is 1: vLLM would fail at start",
    "judge-tensor-parallel-beyond-gpus": r'model "j": tensorParallelSize 4 x .* needs 4 GPUs.*gpu\.count is 2',
    "pipeline-parallel-beyond-gpus": r'model "j": tensorParallelSize 2 x pipelineParallelSize 2 x dataParallelSize 1 '
    r"needs 4 GPUs per replica, but gpu\.count is 2",
    "gpus-beyond-parallelism": r'model "m": gpu\.count is 4, but tensorParallelSize 2 x pipelineParallelSize 1 x '
    r"dataParallelSize 1 uses 2 GPUs per replica: the pod would hold 2 GPUs vLLM never uses; set gpu\.count: 2",
    "gpus-beyond-data-parallelism": r'model "j": gpu\.count is 8, but .* x dataParallelSize 2 uses 4 GPUs',
    "parallel-size-in-extra-args": r'model "m": extraArgs "--tensor-parallel-size=4" sets the tensorParallelSize '
    r"vLLM runs with, .* set tensorParallelSize on the model",
    "pipeline-parallel-short-flag": r'model "m": extraArgs "-pp" sets the pipelineParallelSize',
    "data-parallel-abbreviated": r'model "m": extraArgs "--data_parallel" sets the dataParallelSize',
    "parallel-size-in-global-extra-args": r'vllm\.extraArgs "-tp" sets the tensorParallelSize of every model',
    "duplicate-model": r"used twice",
    "zero-shards": r"/runner/shards",
    "bad-label-value": r"/models/0/name",
    "server-name-collision": r"same Deployment/Service name",
    "unknown-key-mode": r"/keys/mode",
    "unknown-value": r"unknownTopLevel",
    "dns-ip-range": r"/networkPolicy/dns/peers/0/ipBlock/cidr",
    "dns-port": r"/networkPolicy/dns/ports/0/port",
    "dns-every-namespace": r"/networkPolicy/dns/peers/0': missing property 'podSelector'",
    "dns-every-pod-of-a-namespace": r"/networkPolicy/dns/peers/0': missing property 'podSelector'",
    "dns-empty-pod-selector": r"/networkPolicy/dns/peers/0/podSelector': 'anyOf' failed",
    "reserved-pod-label": r"invalid propertyName 'app\.kubernetes\.io/component'",
    "per-revision-job": r"additional properties 'job' not allowed",
    "fixed-concurrency": r"additional properties 'concurrencyPolicy' not allowed",
    "bad-size": r"/vllm/cacheSize",
    "short-startup": r"/vllm/startupSeconds",
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
        pytest.param(
            {"models": [_SERVED | {"extraArgs": ["--enable-log-outputs"]}], "runner": {"model": "m"}},
            id="output-logging",
        ),
        pytest.param(  # vLLM's parser reads underscores as dashes
            {"models": [_SERVED | {"extraArgs": ["--enable_log_requests"]}], "runner": {"model": "m"}},
            id="request-logging-underscores",
        ),
        pytest.param(  # argparse takes an unambiguous abbreviation: this is --enable-log-requests
            {"vllm": {"extraArgs": ["--disable-uvicorn-access-log", "--enable-log-req"]}},
            id="request-logging-abbreviated",
        ),
        pytest.param(  # any flag, a refused one included, from a YAML file
            {"models": [_SERVED | {"extraArgs": ["--config=/weights/flags.yaml"]}], "runner": {"model": "m"}},
            id="flags-from-a-file",
        ),
        pytest.param({"image": {"appliance": {"tag": "latest"}}}, id="latest-tag"),
        pytest.param({"image": {"vllm": {"digest": "sha256:abc"}}}, id="bad-digest"),
        pytest.param(
            {"models": [_SERVED | {"weights": {"claim": "w", "subPath": "../etc"}}], "runner": {"model": "m"}},
            id="weights-path-escape",
        ),
        pytest.param({"models": [{"name": "m"}], "runner": {"model": "m"}}, id="weights-missing"),
        pytest.param({"models": [_SERVED | {"gpu": {"count": 0}}], "runner": {"model": "m"}}, id="zero-gpus"),
        pytest.param(  # the default gpu.count is 1: vLLM cannot start 2 tensor-parallel workers on it
            {"models": [_SERVED | {"tensorParallelSize": 2}]},
            id="tensor-parallel-beyond-gpus",
        ),
        pytest.param(
            {"judges": [{"name": "j", "weights": {"claim": "w"}, "gpu": {"count": 2}, "tensorParallelSize": 4}]},
            id="judge-tensor-parallel-beyond-gpus",
        ),
        pytest.param(  # 2 tensor-parallel workers on each of 2 pipeline stages: 4 GPUs
            {"judges": [{"name": "j", "weights": {"claim": "w"}, "gpu": {"count": 2}, "tensorParallelSize": 2,
                         "pipelineParallelSize": 2}]},
            id="pipeline-parallel-beyond-gpus",
        ),
        pytest.param(  # 2 of the 4 GPUs held by the pod and never used
            {"models": [_SERVED | {"gpu": {"count": 4}, "tensorParallelSize": 2}]},
            id="gpus-beyond-parallelism",
        ),
        pytest.param(
            {"judges": [{"name": "j", "weights": {"claim": "w"}, "gpu": {"count": 8}, "tensorParallelSize": 2,
                         "dataParallelSize": 2}]},
            id="gpus-beyond-data-parallelism",
        ),
        pytest.param(  # after the chart's own flag, vLLM takes this one: 4 workers on the pod's 1 GPU
            {"models": [_SERVED | {"extraArgs": ["--tensor-parallel-size=4"]}]},
            id="parallel-size-in-extra-args",
        ),
        pytest.param(
            {"models": [_SERVED | {"gpu": {"count": 4}, "tensorParallelSize": 2, "extraArgs": ["-pp", "2"]}]},
            id="pipeline-parallel-short-flag",
        ),
        pytest.param(  # vLLM reads underscores as dashes and takes an unambiguous abbreviation
            {"models": [_SERVED | {"gpu": {"count": 2}, "extraArgs": ["--data_parallel", "2"]}]},
            id="data-parallel-abbreviated",
        ),
        pytest.param(
            {"vllm": {"extraArgs": ["--disable-uvicorn-access-log", "-tp", "2"]}, "models": [_SERVED]},
            id="parallel-size-in-global-extra-args",
        ),
        pytest.param(  # the pod's GPU limit is gpu.count's: this one would be replaced, unseen
            {"models": [_SERVED | {"resources": {"limits": {"nvidia.com/gpu": 2}}}]},
            id="gpu-limit-beside-gpu-count",
        ),
        pytest.param({"vllm": {"resources": {"limits": {"nvidia.com/gpu": 4}}}, "models": [_SERVED]},
                     id="global-gpu-limit-beside-gpu-count"),
        pytest.param({"auditKey": {"fingerprint": "SHA256:" + "A" * 43, "existingConfigMap": "site-audit-key"}},
                     id="two-audit-key-pins"),
        pytest.param({"runner": {"command": ["medhelm-local", "runs", "list"], "extraArgs": ["--max-instances", "5"]}},
                     id="extra-args-beside-command"),
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
        pytest.param({"networkPolicy": {"dns": {"peers": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}}}, id="dns-ip-range"),
        pytest.param({"networkPolicy": {"dns": {"ports": [{"protocol": "TCP", "port": 443}]}}}, id="dns-port"),
        # Port 53 to every pod of the cluster, or of kube-system: the peer must name the DNS pods.
        pytest.param({"networkPolicy": {"dns": {"peers": [{"namespaceSelector": {}}]}}}, id="dns-every-namespace"),
        pytest.param({"networkPolicy": {"dns": {"peers": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}]}}},
            id="dns-every-pod-of-a-namespace"),
        pytest.param({"networkPolicy": {"dns": {"peers": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
             "podSelector": {"matchLabels": {}}}]}}}, id="dns-empty-pod-selector"),
        pytest.param({"runner": {"podLabels": {"app.kubernetes.io/component": "model-server"}}},
                     id="reserved-pod-label"),
        pytest.param({"runner": {"job": {"enabled": True}}}, id="per-revision-job"),
        pytest.param({"runner": {"concurrencyPolicy": "Allow"}}, id="fixed-concurrency"),
        pytest.param({"vllm": {"cacheSize": "20G"}}, id="bad-size"),
        pytest.param({"vllm": {"startupSeconds": 60}}, id="short-startup"),
    ],
)
def test_bad_values_are_rejected(values, request):
    # Each bad value set must be refused for its own reason, not for an unrelated one.
    with pytest.raises(helm_python.HelmError, match=REJECTION_REASONS[request.node.callspec.id]):
        render(values)


# --- the vLLM API key under GitOps (helm template, Argo CD) -------------------------------------------------

_RUN_M = {"model": "m", "benchmarks": ["pubmedqa"]}


def _gitops_values() -> dict[str, Any]:
    """The vllmApiKey block helm-chart/README.md gives for GitOps."""
    text = (CHART / "README.md").read_text(encoding="utf-8")
    section = text.split("## GitOps", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert block, "helm-chart/README.md: no values block in the GitOps section"
    values = yaml.safe_load(block.group(1))
    assert set(values) == {"vllmApiKey"}
    return values


def _api_key_refs(docs: list[dict[str, Any]]) -> set[str]:
    """Every Secret name a pod takes the vLLM API key from (env VLLM_API_KEY or the api-key volume)."""
    names: set[str] = set()
    for doc in docs:
        spec = pod_spec(doc)
        if spec is None:
            continue
        for container in all_containers(spec):
            for env in container.get("env", []):
                if env["name"] == "VLLM_API_KEY":
                    names.add(env["valueFrom"]["secretKeyRef"]["name"])
        names |= {v["secret"]["secretName"] for v in spec.get("volumes", []) if v["name"] == "vllm-api-key"}
    return names


def test_without_a_cluster_a_generated_api_key_changes_on_every_render():
    """Why GitOps needs existingSecret: rendered without the cluster (helm template, Argo CD), the generated key's
    lookup finds nothing and each render makes a new key."""
    def key() -> str:
        docs = render({"models": [_SERVED], "runner": _RUN_M})
        (secret,) = [s for s in by_kind(docs, "Secret") if s["metadata"]["name"].endswith("-vllm-api-key")]
        return str(secret["data"]["api-key"])

    assert key() != key()


def test_gitops_values_render_the_same_manifests_every_time():
    """The README's GitOps setting: no key in the manifests, every pod reads the site's Secret, and two renders
    without a cluster are identical (Argo CD sees no drift; the model servers are not restarted by a sync)."""
    values = _gitops_values() | {"models": [_SERVED], "runner": _RUN_M}
    first, second = render(values), render(values)
    assert yaml.safe_dump_all(first) == yaml.safe_dump_all(second)
    assert not [s for s in by_kind(first, "Secret") if s["metadata"]["name"].endswith("-vllm-api-key")]
    assert _api_key_refs(first) == {values["vllmApiKey"]["existingSecret"]}
    assert {"StatefulSet", "CronJob"} <= {d["kind"] for d in first if pod_spec(d) is not None}


@pytest.mark.parametrize("api_key", [{"generate": False}, {"generate": False, "existingSecret": ""}],
                         ids=["no-secret", "secret-dropped"])
def test_generate_false_refuses_to_invent_a_key(api_key):
    """generate: false makes a GitOps value set whose existingSecret was dropped fail to render, instead of
    silently generating a key that changes on every sync."""
    with pytest.raises(helm_python.HelmError, match=r"vllmApiKey: generate is false.*existingSecret"):
        render({"vllmApiKey": api_key, "models": [_SERVED], "runner": _RUN_M})
    docs = render({"vllmApiKey": {"generate": False, "value": "k" * 48}})  # an explicit key is still a key
    assert [s for s in by_kind(docs, "Secret") if s["metadata"]["name"].endswith("-vllm-api-key")]


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


AIRGAP = REPO / "deploy" / "AIRGAP.md"


def _airgap_line(pattern: str) -> str:
    """The one shell line of deploy/AIRGAP.md matching ``pattern`` (the procedure is tested as written)."""
    lines = [ln.strip() for ln in AIRGAP.read_text(encoding="utf-8").splitlines() if re.search(pattern, ln)]
    assert len(lines) == 1, (pattern, lines)
    return lines[0]


def _weights_as_airgap_says(tmp_path: Path) -> tuple[Path, str]:
    """Step 1 on the build host (manifest, tar) and step 4 at the site (unpack onto the weights volume),
    with the commands copied from AIRGAP.md; returns the model directory on the "volume" and the manifest."""
    build, transfer, volume = tmp_path / "build", tmp_path / "transfer", tmp_path / "pvc"
    model = build / "llama-3-8b"
    (model / "original").mkdir(parents=True)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        (model / name).write_text('{"x": 1}\n')
    for i in (1, 2):
        (model / f"model-0000{i}-of-00002.safetensors").write_bytes(os.urandom(8192))
    (model / "original" / "params.json").write_text("{}")
    transfer.mkdir()
    volume.mkdir()

    def sh(line: str, cwd: Path) -> None:
        line = line.replace("/data/weights", str(build)).replace("transfer/", f"{transfer}/")
        line = line.replace("/mnt/model-weights", str(volume))
        subprocess.run(["/bin/sh", "-c", line], cwd=cwd, check=True)

    sh(_airgap_line(r"^\s*find \. -type f .*> SHA256SUMS$"), model)
    sh(_airgap_line(r"^\s*tar -C /data/weights -cf "), tmp_path)
    sh(_airgap_line(r"^\s*tar -C /mnt/model-weights -xf "), transfer)
    on_volume = volume / "llama-3-8b"
    assert (on_volume / "SHA256SUMS").is_file()  # the manifest travels with the weights, as AIRGAP says
    return on_volume, (on_volume / "SHA256SUMS").read_text()


def _run_init_container(values: dict[str, Any], weights: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run the rendered verify-weights init container's script with its rendered environment, paths mapped
    onto the test's directories (the inline manifest from the rendered ConfigMap, as the pod mounts it)."""
    docs = render(values)
    (sts,) = servers(docs)
    (init,) = pod_spec(sts)["initContainers"]
    env = env_map(init)
    model_dir = env["WEIGHTS_DIR"]
    manifest = env["WEIGHTS_MANIFEST"]
    if manifest.startswith("/etc/medhelm/weights/"):
        (cm,) = [m for m in by_kind(docs, "ConfigMap") if m["metadata"]["name"].endswith("-weights")]
        mounted = tmp_path / "etc-weights"
        mounted.mkdir(exist_ok=True)
        (mounted / "SHA256SUMS").write_text(cm["data"]["SHA256SUMS"])
        manifest = str(mounted / "SHA256SUMS")
    else:
        manifest = manifest.replace(model_dir, str(weights))
    (script_cm,) = [m for m in by_kind(docs, "ConfigMap") if m["metadata"]["name"].endswith("-scripts")]
    script = tmp_path / "verify-weights.sh"
    script.write_text(script_cm["data"]["verify-weights.sh"])
    run_env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path), "WEIGHTS_DIR": str(weights),
               "WEIGHTS_MANIFEST": manifest, "WEIGHTS_DIR_MANIFEST": env["WEIGHTS_DIR_MANIFEST"]}
    return subprocess.run(["/bin/sh", str(script)], env=run_env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("inline", [False, True], ids=["manifest-on-volume", "manifest-in-values"])
def test_weights_laid_out_as_airgap_says_pass_the_init_container(tmp_path, inline):
    """Issue 15 item 2: following AIRGAP.md exactly (SHA256SUMS written beside the weights in step 1, the
    manifest optionally given in the values in step 4) the pod starts; a tampered or added file still stops it."""
    weights, manifest = _weights_as_airgap_says(tmp_path)
    entry: dict[str, Any] = {"name": "llama-3-8b", "weights": {"claim": "model-weights", "subPath": "llama-3-8b"}}
    if inline:
        entry["weights"]["sha256sums"] = manifest
    values = {"models": [entry], "runner": {"model": "llama-3-8b", "benchmarks": ["pubmedqa"]}}
    proc = _run_init_container(values, weights, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "verify-weights: OK" in proc.stdout
    (weights / "extra.pkl").write_bytes(b"pickle")
    proc = _run_init_container(values, weights, tmp_path)
    assert proc.returncode != 0 and "extra.pkl" in proc.stderr
    (weights / "extra.pkl").unlink()
    (weights / "model-00002-of-00002.safetensors").write_bytes(b"evil")
    assert _run_init_container(values, weights, tmp_path).returncode != 0


def test_a_tampered_manifest_on_the_volume_cannot_pass_an_inline_manifest(tmp_path):
    """With the trusted manifest in the values, rewriting SHA256SUMS on the volume changes nothing."""
    weights, manifest = _weights_as_airgap_says(tmp_path)
    (weights / "model-00001-of-00002.safetensors").write_bytes(b"swapped weights")
    sums = subprocess.run("find . -type f ! -name SHA256SUMS -print0 | sort -z | xargs -0 sha256sum", shell=True,
                          cwd=weights, check=True, capture_output=True, text=True).stdout
    (weights / "SHA256SUMS").write_text(sums)  # an attacker with write access to the volume
    entry = {"name": "m", "weights": {"claim": "w", "subPath": "llama-3-8b", "sha256sums": manifest}}
    proc = _run_init_container({"models": [entry], "runner": {"model": "m", "benchmarks": ["pubmedqa"]}},
                               weights, tmp_path)
    assert proc.returncode != 0


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


def test_notes_name_every_path_the_network_policies_open():
    """The NOTES said "DNS, and runner -> model servers ... only" also where the policies open the console to the
    ingress controller and the identity provider, and the runner and console to the site's servers: an IT engineer
    checking the install against the NOTES was told less than the cluster allows."""
    values = load_values("rke2")
    (line,) = [line for line in notes(values).splitlines() if line.startswith("NetworkPolicies:")]
    assert "extraRunnerEgress" in line and "console.egress" in line and "ingress controller -> console" in line
    (line,) = [line for line in notes(load_values("gpu")).splitlines() if line.startswith("NetworkPolicies:")]
    assert "console" not in line and "extraRunnerEgress" not in line and line.endswith("nothing else.")


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
