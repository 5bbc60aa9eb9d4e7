"""Export requests and signed bundles.

``<home>/exports/<request id>/request.json`` holds the request (runs, requester, policy hash, every check and
its result, each candidate file's sha256, the decision); ``bundle/`` holds the candidate files. Approval adds
``bundle/manifest.json`` (each file's sha256, the policy hash, the run manifests' hashes, the audit
checkpoint, who requested and who approved) and ``bundle/manifest.sig`` (Ed25519 over the manifest's bytes).
Only an approved, verified bundle is ever copied out of the home.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, ValidationError

from medhelm_local import __version__
from medhelm_local.audit.trail import key_id
from medhelm_local.benchmarks.registry import get_spec
from medhelm_local.errors import BadInputError, MedhelmError, NotFoundError
from medhelm_local.export import aggregates as agg
from medhelm_local.export.policy import LoadedPolicy
from medhelm_local.export.render import fixed_text, render_files, suppressed_text
from medhelm_local.export.scan import Finding, extract_terms, scan_strings, strings_of, vocabulary_tokens
from medhelm_local.home.layout import atomic_write
from medhelm_local.prompts.styles import PROMPT_STYLES
from medhelm_local.store.store import Store

MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
MANIFEST_SCHEMA = "medhelm-local/export-manifest/v1"
BUNDLE_FILES = ("aggregates.json", "leaderboard.csv", "categories.csv", "cells.csv", "report.html")
_REQUEST_ID = re.compile(r"^exp-\d{8}T\d{6}Z-[0-9a-f]{6}$")
Status = Literal["ready", "blocked", "approved", "denied"]


class Check(BaseModel):
    id: str
    description: str
    result: Literal["pass", "fail"]
    detail: str
    findings: list[dict[str, str]] = []


class ExportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str
    runs: list[str]
    requested_by: str
    requested_at: str
    policy_sha256: str
    policy_source: str
    status: Status
    checks: list[Check]
    files: dict[str, str]
    run_manifests: dict[str, str]
    decided_by: str | None = None
    approver: str | None = None
    decided_at: str | None = None
    manifest_sha256: str | None = None
    released_to: list[str] = []


class BundleVerification(BaseModel):
    ok: bool
    bundle: str
    request_id: str | None
    key_id: str | None
    problems: list[str]
    files: dict[str, str]


class ExportRefused(MedhelmError):
    """A decision or release that the request's state or the policy does not allow."""

    exit_code = 2


def now_utc() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def new_request_id() -> str:
    return datetime.now(UTC).strftime("exp-%Y%m%dT%H%M%SZ-") + secrets.token_hex(3)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def request_dir(exports_dir: Path, request_id: str) -> Path:
    if not _REQUEST_ID.match(request_id):
        raise BadInputError(f"REQUEST: {request_id!r} is not an export request id (exp-YYYYMMDDTHHMMSSZ-xxxxxx)")
    return exports_dir / request_id


def load_request(exports_dir: Path, request_id: str) -> ExportRequest:
    path = request_dir(exports_dir, request_id) / "request.json"
    try:
        return ExportRequest.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise NotFoundError(f"export request {request_id} not found under {exports_dir}") from None
    except ValidationError:
        raise MedhelmError(f"{path}: damaged export request") from None


@contextmanager
def request_lock(exports_dir: Path, request_id: str) -> Iterator[None]:
    """Serialise decisions on one request (two approvers acting at once)."""
    folder = request_dir(exports_dir, request_id)
    if not folder.is_dir():
        raise NotFoundError(f"export request {request_id} not found under {exports_dir}")
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def save_request(exports_dir: Path, request: ExportRequest) -> None:
    atomic_write(request_dir(exports_dir, request.request_id) / "request.json",
                 (request.model_dump_json(indent=2) + "\n").encode(), mode=0o600)


def list_requests(exports_dir: Path) -> list[ExportRequest]:
    if not exports_dir.is_dir():
        return []
    out = []
    for child in sorted(exports_dir.iterdir()):
        if _REQUEST_ID.match(child.name) and (child / "request.json").exists():
            out.append(load_request(exports_dir, child.name))
    return out


# -- building a candidate ------------------------------------------------------------------------------------


def _vocabulary(data: agg.ExportAggregates) -> tuple[set[str], set[str]]:
    """(allowed strings, system-generated values) for the string scan."""
    allowed = set(fixed_text())
    for model_cls in (agg.ExportAggregates, agg.PublishedRun, agg.PublishedCell, agg.PublishedModel):
        allowed.update(model_cls.model_fields)
    allowed.update(data.notes)
    allowed.update({data.schema_id, data.appliance_version})
    allowed.update(PROMPT_STYLES)  # run.prompt_style: the fixed style names only; anything else is flagged
    for cell in data.cells:
        allowed.update({cell.model, cell.benchmark, cell.category, cell.metric, suppressed_text(cell),
                        *cell.suppressed})
    for run in data.runs:
        allowed.update({run.model, run.status, *run.benchmarks, *run.dataset_fingerprints})
    for model in data.models:
        allowed.update({model.model, *model.category_scores})
    system = {data.request_id, data.generated_at, data.policy_sha256}
    for run in data.runs:
        system.update({run.run_id, run.manifest_sha256, *run.dataset_fingerprints.values()})
    return allowed, system


def _check(check_id: str, description: str, findings: list[Finding], ok_detail: str) -> Check:
    if not findings:
        return Check(id=check_id, description=description, result="pass", detail=ok_detail)
    return Check(id=check_id, description=description, result="fail",
                 detail=f"{len(findings)} finding(s); the values are not shown (they may be PHI)",
                 findings=[{"file": f.file, "location": f.location, "rule": f.rule} for f in findings[:200]])


def _structural_checks(data: agg.ExportAggregates, loaded: LoadedPolicy) -> list[Check]:
    policy = loaded.policy
    small: list[Finding] = []
    lonely: list[Finding] = []
    rounding: list[Finding] = []
    for index, cell in enumerate(data.cells):
        where = f"$.cells[{index}]"
        for name in ("n_scored", "n_failed", "n_total", "n_gold_empty"):
            value = getattr(cell, name)
            if value is not None and 0 < value < policy.min_cell_size:
                small.append(Finding("aggregates.json", f"{where}.{name}", "count below the minimum cell size"))
        scored_enough = (cell.n_scored is not None and cell.n_scored >= policy.min_cell_size) or (
            "n_scored:complementary" in cell.suppressed)
        if cell.score is not None and not scored_enough:
            small.append(Finding("aggregates.json", f"{where}.score", "score on fewer instances than the minimum"))
        if (policy.complementary_suppression and cell.n_total is not None
                and (cell.n_scored is None) != (cell.n_failed is None)):
            lonely.append(Finding("aggregates.json", where, "one suppressed count recoverable by subtraction"))
        if cell.score is not None and round(cell.score, policy.rounding.score_decimals) != cell.score:
            rounding.append(Finding("aggregates.json", f"{where}.score", "not rounded"))
    for index, model in enumerate(data.models):
        for name in ("win_rate", "macro_avg"):
            value = getattr(model, name)
            if value is not None and round(value, policy.rounding.score_decimals) != value:
                rounding.append(Finding("aggregates.json", f"$.models[{index}].{name}", "not rounded"))
    suppressed = sum(1 for c in data.cells if c.suppressed)
    return [
        Check(id="schema", description="only fields of the closed aggregate schema are present", result="pass",
              detail=f"{len(data.cells)} cell(s), {len(data.models)} model row(s), {len(data.runs)} run(s)"),
        _check("min_cell_size", f"no score on fewer than {policy.min_cell_size} instances and no count from 1 to "
               f"{policy.min_cell_size - 1}", small, f"{suppressed} cell(s) with suppressed values"),
        _check("complementary_suppression", "no suppressed count can be recovered by subtraction; averages use "
               "published scores only", lonely,
               "applied" if policy.complementary_suppression else "disabled by policy"),
        _check("rounding", f"scores rounded to {policy.rounding.score_decimals} decimals", rounding, "applied"),
    ]


def build_candidate(store: Store, config: Any, run_ids: list[str], loaded: LoadedPolicy, *, request_id: str
                    ) -> tuple[dict[str, bytes], list[Check], dict[str, str]]:
    """The candidate files, every check's result, and the runs' manifest hashes."""
    raw = agg.collect(store, config, run_ids)
    data = agg.publish(raw, loaded.policy, request_id=request_id, policy_sha256=loaded.sha256)
    files = render_files(data)
    checks = _structural_checks(data, loaded)
    allowed, system = _vocabulary(data)
    scan = loaded.policy.scan
    terms: set[str] = set()
    if scan.extract_terms:
        spec_text = []
        for benchmark in {c.benchmark for c in data.cells}:
            spec = get_spec(benchmark)
            spec_text.extend([spec.name, spec.description, spec.category, spec.subcategory,
                              spec.prompt.system or "", spec.prompt.template])
        vocabulary = vocabulary_tokens([*fixed_text(), *data.notes, *spec_text,
                                        *(c.category for c in data.cells), *(c.metric for c in data.cells)])
        datasets = {(b, fp) for r in raw.runs for b, fp in r.dataset_fingerprints.items()}
        terms = extract_terms(store, datasets, min_length=scan.min_term_length, vocabulary=vocabulary)
    not_allowed: list[Finding] = []
    phi: list[Finding] = []
    seen: list[Finding] = []
    external: list[Finding] = []
    for name, content in files.items():
        strings, refs = strings_of(name, content)
        a, p, t = scan_strings(name, strings, patterns=list(scan.patterns), terms=terms, allowed=allowed,
                               system=system)
        not_allowed += a
        phi += p
        seen += t
        external += [Finding(name, ref, "reference to an external resource") for ref in refs]
    total = sum(len(strings_of(n, c)[0]) for n, c in files.items())
    checks += [
        _check("string_allowlist", "every string is from the export vocabulary (model names, benchmark ids, "
               "metric and category names, run ids, hashes, fixed report text)", not_allowed,
               f"{total} string(s) checked"),
        _check("phi_patterns", f"no string matches a PHI pattern ({', '.join(scan.patterns)})", phi,
               f"{total} string(s) checked"),
        _check("extract_terms", "no string contains a name or identifier seen in the registered extracts",
               seen, f"{len(terms)} term(s) from the runs' datasets checked" if scan.extract_terms
               else "disabled by policy"),
        _check("self_contained_html", "the HTML report loads nothing from anywhere (inline SVG, no scripts)",
               external, "no external references"),
        Check(id="files", description="the bundle holds only the allowlisted files", result="pass"
              if sorted(files) == sorted(BUNDLE_FILES) else "fail", detail=", ".join(sorted(files))),
    ]
    run_manifests = {r.run_id: r.manifest_sha256 for r in raw.runs}
    return files, checks, run_manifests


def write_candidate(exports_dir: Path, request: ExportRequest, files: dict[str, bytes]) -> Path:
    """Write the request and its files under a temporary name; the caller renames it into place."""
    tmp = exports_dir / f".tmp-{request.request_id}"
    (tmp / "bundle").mkdir(parents=True, mode=0o700)
    for name, content in files.items():
        atomic_write(tmp / "bundle" / name, content, mode=0o640)
    atomic_write(tmp / "request.json", (request.model_dump_json(indent=2) + "\n").encode(), mode=0o600)
    return tmp


def bundle_hashes(bundle: Path) -> dict[str, str]:
    return {p.name: sha256_bytes(p.read_bytes()) for p in sorted(bundle.iterdir()) if p.is_file()}


# -- approval, signing, verification -------------------------------------------------------------------------


def build_manifest(request: ExportRequest, *, appliance: str, approver: str, approver_actor: str,
                   checkpoint: dict[str, Any], signer: Ed25519PublicKey) -> bytes:
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "request_id": request.request_id,
        "appliance": appliance,
        "appliance_version": __version__,
        "files": request.files,
        "policy_sha256": request.policy_sha256,
        "run_manifests": request.run_manifests,
        "checks": {c.id: c.result for c in request.checks},
        "requested_by": request.requested_by,
        "requested_at": request.requested_at,
        "approved_by": approver,
        "approved_by_actor": approver_actor,
        "approved_at": now_utc(),
        "audit_checkpoint": checkpoint,
        "key_id": key_id(signer),
    }
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")


def sign_bundle(bundle: Path, manifest: bytes, key: Ed25519PrivateKey) -> None:
    signature = base64.b64encode(key.sign(manifest)) + b"\n"
    atomic_write(bundle / MANIFEST, manifest, mode=0o640)
    atomic_write(bundle / SIGNATURE, signature, mode=0o640)


def verify_bundle(bundle: Path, public_key: Ed25519PublicKey) -> BundleVerification:
    from medhelm_local.audit.trail import checkpoint_signature_ok

    problems: list[str] = []
    files: dict[str, str] = {}
    request_id = signer = None
    if not bundle.is_dir():
        raise BadInputError(f"BUNDLE: {bundle} is not a directory")
    try:
        manifest_bytes = (bundle / MANIFEST).read_bytes()
        signature = base64.b64decode((bundle / SIGNATURE).read_bytes().strip(), validate=True)
    except FileNotFoundError as exc:
        problems.append(f"{Path(str(exc.filename)).name} is missing: the bundle was never approved or is incomplete")
        return BundleVerification(ok=False, bundle=str(bundle), request_id=None, key_id=None, problems=problems,
                                  files={})
    except ValueError:
        problems.append(f"{SIGNATURE} is not a base64 signature")
        manifest_bytes, signature = (bundle / MANIFEST).read_bytes(), b""
    try:
        public_key.verify(signature, manifest_bytes)
    except InvalidSignature:
        problems.append(f"{MANIFEST}: signature invalid for key {key_id(public_key)[:16]} (changed, or signed by "
                        "another key)")
    try:
        manifest = json.loads(manifest_bytes)
        listed: dict[str, str] = dict(manifest["files"])
        request_id, signer = manifest.get("request_id"), manifest.get("key_id")
    except (ValueError, KeyError, TypeError):
        problems.append(f"{MANIFEST} is not a valid export manifest")
        listed, manifest = {}, {}
    if signer is not None and signer != key_id(public_key):
        problems.append("the manifest names a different signing key")
    checkpoint = manifest.get("audit_checkpoint") if isinstance(manifest, dict) else None
    if not isinstance(checkpoint, dict) or not checkpoint_signature_ok(checkpoint, public_key):
        problems.append("the audit checkpoint in the manifest does not verify")
    present = {p.name for p in bundle.iterdir()}
    for extra in sorted(present - set(listed) - {MANIFEST, SIGNATURE}):
        problems.append(f"{extra}: not listed in the manifest")
    for name, expected in sorted(listed.items()):
        path = bundle / name
        if not path.is_file():
            problems.append(f"{name}: missing")
            continue
        actual = sha256_bytes(path.read_bytes())
        files[name] = actual
        if actual != expected:
            problems.append(f"{name}: sha256 differs from the signed manifest (the file was changed)")
    return BundleVerification(ok=not problems, bundle=str(bundle), request_id=request_id, key_id=signer,
                              problems=problems, files=files)


def release(bundle: Path, destination: Path, request_id: str) -> Path:
    """Copy a verified bundle to ``destination/<request id>`` (all or nothing)."""
    target = destination / request_id
    if target.exists():
        raise ExportRefused(f"--out: {target} already exists; choose another directory")
    destination.mkdir(parents=True, exist_ok=True)
    tmp = destination / f".{request_id}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(bundle, tmp)
    for path in tmp.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.replace(tmp, target)
    return target
