"""Helpers for the deployment tests: the chart rendered with the real Helm engine, manifest accessors, tools.

Nothing here needs a cluster, a Docker engine or the network. A missing tool fails the test that needs it
with the command that installs it; nothing is skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm-chart"
DEPLOY_TESTS = Path(__file__).resolve().parent
INSTALL_HINT = "pip install -e '.[deploycheck]'  (see README, Deployment)"

try:
    import helm_python
except ImportError as exc:  # pragma: no cover - exercised only when the extra is missing
    raise ImportError(f"tests/deploy need helm-python-sdk: {INSTALL_HINT}") from exc

RELEASE = "medhelm"
NAMESPACE = "medhelm-eval"

# The value sets CI renders: the defaults, every helm-chart/ci/*-values.yaml, and the realistic site value sets
# in tests/deploy/site-values/ (RKE2, OpenShift: 2 models, 3 judges with tensor parallelism, 4 shards).
SITE_VALUES = DEPLOY_TESTS / "site-values"
VALUE_SETS: dict[str, Path | None] = (
    {"default": None}
    | {p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*-values.yaml"))}
    | {p.name.removesuffix("-values.yaml"): p for p in sorted(SITE_VALUES.glob("*-values.yaml"))}
)

WORKLOAD_KINDS = {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}


def load_values(name: str) -> dict[str, Any]:
    path = VALUE_SETS[name]
    return {} if path is None else yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def render(values: dict[str, Any] | None = None, *, release: str = RELEASE) -> list[dict[str, Any]]:
    """Render the chart with Helm's own engine (schema validation included); return the manifests."""
    with helm_python.Chart.load(str(CHART)) as chart:
        out = chart.render(values or {}, name=release, namespace=NAMESPACE, is_install=True)
    docs: list[dict[str, Any]] = []
    for template in sorted(out):
        if not template.endswith((".yaml", ".yml")):
            continue
        docs.extend(d for d in yaml.safe_load_all(out[template]) if d)
    return docs


def notes(values: dict[str, Any] | None = None) -> str:
    with helm_python.Chart.load(str(CHART)) as chart:
        out = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(v for k, v in out.items() if k.endswith("NOTES.txt"))


def pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    kind = obj.get("kind")
    if kind == "Pod":
        return obj["spec"]
    if kind in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}:
        return obj["spec"]["template"]["spec"]
    if kind == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return None


def all_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def env_map(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _venv_bin(name: str) -> Path:
    return Path(sys.executable).parent / name


def find_tool(name: str, env_var: str | None, install: str) -> str:
    """The tool's executable: $env_var, then this interpreter's bin dir, then PATH; fail loudly if absent."""
    candidates: list[str] = []
    if env_var and os.environ.get(env_var):
        candidates.append(os.environ[env_var])
    candidates.append(str(_venv_bin(name)))
    found = shutil.which(name)
    if found:
        candidates.append(found)
    for candidate in candidates:
        if Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    hint = f" or set {env_var} to its path" if env_var else ""
    pytest.fail(f"{name} is not installed: {install}{hint}. The deployment checks never skip.", pytrace=False)


# What `docker compose` needs from the environment besides the overridable defaults (the `:?` variables).
REQUIRED_ENV = {"MEDHELM_MODEL_WEIGHTS": "/srv/weights/model", "MEDHELM_JUDGE_WEIGHTS": "/srv/weights/judge",
                "MEDHELM_OIDC_ISSUER": "https://idp.hospital.example/realms/staff",
                "MEDHELM_OIDC_CLIENT_ID": "medhelm-console"}
_VARIABLE = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
                       r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """A compose file's values with its variables replaced as `docker compose` does: ${VAR}, $VAR, ${VAR:-default},
    ${VAR-default}, ${VAR:?error}, ${VAR?error} and $$ (nested defaults are not used here)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        if m["escaped"]:
            return "$"
        name = m["name"] or m["bare"]
        op, arg = m["op"], m["arg"] or ""
        unset = name not in env
        missing = unset or (env[name] == "" and op is not None and op.startswith(":"))
        if op in (":-", "-") and missing:
            return arg
        if op in (":?", "?") and missing:
            raise ValueError(f"{name}: {arg}")
        return env.get(name, "")

    return _VARIABLE.sub(one, value)
