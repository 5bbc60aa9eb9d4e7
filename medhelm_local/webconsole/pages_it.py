"""IT: the model servers' health and identity (probed live, allowlist enforced), store size and disk, the audit
trail's checkpoint age, and the last runs' outcome."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from medhelm_local.audit.trail import CHECKPOINT_ACTION, AuditTrail
from medhelm_local.errors import MedhelmError
from medhelm_local.home.config import ApplianceConfig, BackendKind, ConsoleRole
from medhelm_local.inference.backends import configured_model_names, resolve_api_key, served_models
from medhelm_local.inference.egress import EgressPolicy
from medhelm_local.inference.lane import ResponseTooLarge
from medhelm_local.inference.server_text import recorded_models, recorded_status, recorded_version
from medhelm_local.inference.small_reply import get_small
from medhelm_local.webconsole import data
from medhelm_local.webconsole.app import console_of, requires

IT = ConsoleRole.IT
PROBE_TIMEOUT_S = 2.0
NOT_A_MODELS_REPLY = "not an OpenAI-compatible /models reply"


@dataclass
class Probe:
    model: str
    url: str
    healthy: bool | None  # None: started on demand (the embedded model), nothing to probe
    detail: str
    served: list[str]
    version: str | None


def probe_servers(config: ApplianceConfig, egress: EgressPolicy) -> list[Probe]:
    """GET /v1/models (and /version, which vLLM serves) of every configured endpoint: up, and which model."""
    out = []
    for endpoint in config.models:
        if endpoint.kind == BackendKind.EMBEDDED:
            out.append(Probe(endpoint.name, "(embedded)", None, "started on loopback by each run; nothing to probe "
                             "between runs", [], None))
            continue
        for base in endpoint.base_urls:
            out.append(_probe(egress, endpoint.name, base, endpoint, configured_model_names(config)))
    return out


def _probe(egress: EgressPolicy, name: str, base: str, endpoint: Any,
           configured: frozenset[str] | set[str] = frozenset()) -> Probe:
    try:
        egress.check(base)
        key = resolve_api_key(endpoint)
    except MedhelmError as exc:
        return Probe(name, base, False, str(exc), [], None)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        status, listing = _get_json(f"{base}/models", headers)
        if status != 200:
            return Probe(name, base, False, f"HTTP {recorded_status(status)} from /models", [], None)
        served = served_models(listing)
        if served is None:  # JSON, but no list of models
            return Probe(name, base, False, NOT_A_MODELS_REPLY, [], None)
        version = None
        root = base.removesuffix("/v1")
        try:
            status, body = _get_json(f"{root}/version")
            if status == 200 and isinstance(body, dict):
                version = recorded_version(body.get("version"))
        except (httpx.HTTPError, ValueError, RecursionError):
            version = None
    except httpx.HTTPError as exc:
        return Probe(name, base, False, f"unreachable ({type(exc).__name__})", [], None)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's recursion limit
        return Probe(name, base, False, NOT_A_MODELS_REPLY, [], None)
    expected = endpoint.model_id
    ok = expected in served
    served = recorded_models(served, configured)  # the server's own text: shown as server_text allows
    detail = "serving " + ", ".join(served) if ok else f"up, but does not serve {expected!r} ({', '.join(served)})"
    return Probe(name, base, ok, detail, served, version)


def _get_json(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """A GET's status and, for a 200, its JSON. The reply is read up to ``MAX_RESPONSE_BYTES`` and for
    ``PROBE_TIMEOUT_S`` in all (``small_reply``; httpx bounds each read only): a server streaming without end was
    read whole into the console's memory. ValueError for a body that is not JSON, or longer, or slower."""
    try:
        status, body = get_small(url, timeout_s=PROBE_TIMEOUT_S, headers=headers)
    except (TimeoutError, ResponseTooLarge):
        raise ValueError("not a probe's reply: too long, or too slow") from None
    return (200, json.loads(body)) if status == 200 else (status, None)


def _age(when: datetime | None) -> str:
    if when is None:
        return "never"
    seconds = (datetime.now(UTC) - when).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit} ago"
    return f"{seconds:.0f} s ago"


@requires(IT)
def system(request: Request) -> Response:
    console = console_of(request)
    view = data.system(console.home)
    records = AuditTrail(console.home.audit_path).records()
    checkpoint = data.last_record_time(records, CHECKPOINT_ACTION)
    exported = data.last_record_time(records, "audit.checkpoint_export")
    return console.render(request, "system.html", view=view, probes=probe_servers(console.home.config, console.egress),
                          checkpoint=checkpoint, checkpoint_age=_age(checkpoint), exported=exported,
                          exported_age=_age(exported), records=len(records),
                          events=sum(1 for r in records if r.get("action") != CHECKPOINT_ACTION))


def routes() -> list[Route]:
    return [Route("/system", system)]
