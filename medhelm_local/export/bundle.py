"""Export requests and signed bundles.

``<home>/exports/<request id>/request.json`` is a convenience copy of the request (runs, requester, checks,
file hashes, status); the audit trail's ``export.request`` record is what approval trusts. ``bundle/`` holds
the candidate files and, from the request on, ``manifest.json`` (each file's sha256, the policy hash, the run
manifests' hashes, every check's result, the requester's name and key fingerprint, an audit checkpoint),
``manifest.sig`` (the appliance's Ed25519 signature over it) and ``request.sig`` (the requester's SSH
signature over the manifest digest, namespace ``medhelm-export-request``). Approval adds ``approval.sig``: an
approver's SSH signature over the same digest, namespace ``medhelm-export``, made with a key the appliance
never holds. ``export verify`` checks all of it against the policy's keys.
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, ValidationError

from medhelm_local import __version__
from medhelm_local.audit.anchor import earlier_fingerprint, fingerprint, key_id_fingerprint
from medhelm_local.audit.trail import CHECKPOINT_SCHEMA, key_id
from medhelm_local.benchmarks.registry import SpecRegistry, shipped_specs
from medhelm_local.errors import BadInputError, MedhelmError, NotFoundError
from medhelm_local.export import aggregates as agg
from medhelm_local.export import sshsig
from medhelm_local.export.differencing import CellInstances, cell_instances, close_pairs
from medhelm_local.export.policy import LoadedPolicy
from medhelm_local.export.render import fixed_text, render_files, suppressed_text
from medhelm_local.export.scan import Finding, extract_terms, scan_strings, strings_of, vocabulary_tokens
from medhelm_local.home.config import EMBEDDED_MODEL_NAME
from medhelm_local.home.layout import atomic_write
from medhelm_local.prompts.styles import PROMPT_STYLES
from medhelm_local.store.store import Store

MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
REQUEST_SIG = "request.sig"
APPROVAL_SIG = "approval.sig"
SIGNATURE_FILES = (MANIFEST, SIGNATURE, REQUEST_SIG, APPROVAL_SIG)
REQUEST_NAMESPACE = "medhelm-export-request"
APPROVAL_NAMESPACE = "medhelm-export"
MANIFEST_SCHEMA = "medhelm-local/export-manifest/v2"
MANIFEST_KEYS = ("schema", "request_id", "appliance", "appliance_version", "files", "policy_sha256",
                 "run_manifests", "checks", "requested_by", "requester_key", "requested_at", "audit_checkpoint",
                 "appliance_key_id")
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
    requested_by: str  # the requester's name in the policy (their key signed the request)
    requester_key: str  # OpenSSH fingerprint of that key
    requested_actor: str  # the OS user / --actor identity that ran the command (audit trail only)
    requested_at: str
    policy_sha256: str
    policy_source: str
    status: Status
    checks: list[Check]
    files: dict[str, str]
    run_manifests: dict[str, str]
    manifest_sha256: str
    decided_by: str | None = None
    approver: str | None = None
    approver_key: str | None = None
    decided_at: str | None = None
    released_to: list[str] = []


class BundleVerification(BaseModel):
    ok: bool
    bundle: str
    request_id: str | None
    manifest_sha256: str | None
    requested_by: str | None
    requester_key: str | None
    approved_by: str | None
    approver_key: str | None
    key_id: str | None  # the manifest's appliance_key_id (hex), kept for scripts
    key_fingerprint: str | None  # with the appliance key given, as `init` and `ssh-keygen -lf` name it; else the
    # earlier raw-key form of key_id (the OpenSSH fingerprint cannot be derived from it)
    problems: list[str]
    files: dict[str, str]
    same_policy: bool | None = None  # the bundle was checked under exactly the policy it was verified against
    notes: list[str] = []


class ExportRefused(MedhelmError):
    """A decision or release that the request's state or the policy does not allow. ``reason``: the short code the
    audit record of the refusal carries."""

    exit_code = 2

    def __init__(self, message: str, reason: str = "refused") -> None:
        super().__init__(message)
        self.reason = reason


def now_utc() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def new_request_id() -> str:
    return datetime.now(UTC).strftime("exp-%Y%m%dT%H%M%SZ-") + secrets.token_hex(3)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_messages(digest: str) -> list[bytes]:
    """What an SSH signature over a manifest digest may have signed: the 64 hex characters, with or without
    the newline ``echo`` adds."""
    return [digest.encode("ascii"), (digest + "\n").encode("ascii")]


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
        raise MedhelmError(f"{path}: damaged export request (or made by an older version: request again)") from None


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


def fixed_vocabulary() -> set[str]:
    """The appliance's own text: schema keys, fixed report text and notes, check ids, the shipped benchmarks'
    ids, the taxonomy's category names, metric names, prompt style names, the embedded model's shipped name. Never
    text a user wrote (custom specs, model names, run ids): that is data, and data is scanned."""
    from medhelm_local.scoring.metrics import known_metrics
    from medhelm_local.taxonomy.model import load_taxonomy

    words = set(fixed_text()) | set(agg.NOTES) | set(MANIFEST_KEYS) | set(CHECK_IDS) | {"pass", "fail", "finished"}
    for model_cls in (agg.ExportAggregates, agg.PublishedRun, agg.PublishedCell, agg.PublishedModel):
        words.update(model_cls.model_fields)
    words.update({agg.EXPORT_SCHEMA, MANIFEST_SCHEMA, __version__, *PROMPT_STYLES, *known_metrics()})
    words.update(spec.id for spec in shipped_specs())
    words.add(EMBEDDED_MODEL_NAME)  # the embedded model's name as shipped (PubMedQA's text holds "Paraffin-embedded")
    words.update(c.name for c in load_taxonomy().categories)
    words.update({"tree_size", "root", "chain_head", "key_id", "signature", CHECKPOINT_SCHEMA, *BUNDLE_FILES})
    return words


def _data_values(data: agg.ExportAggregates) -> tuple[set[str], set[str]]:
    """(data values the bundle may carry, code-generated suppression markers)."""
    allowed: set[str] = set()
    markers: set[str] = set()
    for cell in data.cells:
        allowed.update({cell.model, cell.benchmark, cell.category, cell.metric})
        markers.update({suppressed_text(cell), *cell.suppressed})
    for run in data.runs:
        allowed.update({run.run_id, run.model, run.status, run.prompt_style, *run.benchmarks,
                        *run.dataset_fingerprints})
    for model in data.models:
        allowed.update({model.model, *model.category_scores})
        markers.update(model.suppressed)
    return allowed, markers


def raw_run_ids(raw: agg.RawExport) -> list[str]:
    return [r.run_id for r in raw.runs]


def generated_run_ids(store: Store, raw: agg.RawExport) -> set[str]:
    """The run ids of a form the runner generates (a timestamp and 6 hex digits, or, for shards, 24 hex digits of
    the run's own plan key): generated values, as hashes are, so the encoded-text rule does not read them. The
    shard form chosen with ``--run-id`` for a run of another plan is scanned like any other run id."""
    from medhelm_local.runner.plan import is_generated_run_id
    from medhelm_local.store.runs import runner_run

    generated = set()
    for run in raw.runs:
        planned = runner_run(store, run.run_id)
        if is_generated_run_id(run.run_id, None if planned is None else planned[0]):
            generated.add(run.run_id)
    return generated


def _check(check_id: str, description: str, findings: list[Finding], ok_detail: str) -> Check:
    if not findings:
        return Check(id=check_id, description=description, result="pass", detail=ok_detail)
    return Check(id=check_id, description=description, result="fail",
                 detail=f"{len(findings)} finding(s); the values are not shown (they may be PHI)",
                 findings=[{"file": f.file, "location": f.location, "rule": f.rule} for f in findings[:200]])


CHECK_IDS = ("schema", "min_cell_size", "complementary_suppression", "implied_counts", "rounding", "differencing",
             "string_allowlist", "phi_patterns", "extract_terms", "self_contained_html", "files")


def _structural_checks(data: agg.ExportAggregates, raw: agg.RawExport, loaded: LoadedPolicy) -> list[Check]:
    policy = loaded.policy
    small: list[Finding] = []
    lonely: list[Finding] = []
    implied: list[Finding] = []
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
        if cell.score is not None and (cell.n_failed is None and cell.n_total is not None):
            lonely.append(Finding("aggregates.json", f"{where}.score", "a score beside a suppressed failure count "
                                  "reveals it (score x n_total)"))
        proportion = raw.cells[index].proportion
        # Where counts are rounded, the published score times the published n is no count (0.05 x 205 = 10.25 for
        # 11 of 203): the exact count is checked, and what the published values could pin is the decimals rule.
        implied_score, implied_n = ((raw.cells[index].score, raw.cells[index].n_scored)
                                    if policy.rounding.count_multiple > 1 else (cell.score, cell.n_scored))
        if (proportion and cell.score is not None and implied_score is not None and implied_n is not None
                and agg.implied_small(implied_score, implied_n, policy)):
            implied.append(Finding("aggregates.json", f"{where}.score", "the count the score implies is a small "
                                   "cell"))
        if cell.score is not None and agg.f1_small(raw.cells[index], policy):
            implied.append(Finding("aggregates.json", f"{where}.score", "a micro-F1 computed from a small count "
                                   "(TP, FP or FN)"))
        if cell.score_nonempty_gold is not None and cell.n_gold_empty is None:
            lonely.append(Finding("aggregates.json", f"{where}.score_nonempty_gold", "a score on non-empty gold beside "
                                  "a suppressed empty-gold count reveals it (its decimals pin the count)"))
        ci = [(name, getattr(cell, name)) for name in ("ci_low", "ci_high") if getattr(cell, name) is not None]
        if ci and cell.score is None:
            lonely.append(Finding("aggregates.json", f"{where}.{ci[0][0]}", "a confidence interval beside a "
                                  "suppressed score locates it"))
        elif ci and not scored_enough:
            small.append(Finding("aggregates.json", f"{where}.{ci[0][0]}", "interval on fewer instances than the "
                                 "minimum"))
        if ci and proportion and policy.rounding.count_multiple > 1:
            implied.append(Finding("aggregates.json", f"{where}.{ci[0][0]}", "a proportion's interval (multiples "
                                   "of 1/n) gives away the exact count that rounding hides"))
        allowed = agg.cell_decimals(raw.cells[index], policy)
        finer = [name for name, value in [("score", cell.score), *ci, ("score_nonempty_gold", cell.score_nonempty_gold)]
                 if value is not None and round(value, allowed) != value]
        if finer:
            implied.append(Finding("aggregates.json", f"{where}.{finer[0]}", "more decimals than the cell's instance "
                                   "count supports: gives away the exact count that rounding hides"))
        for name, value in [("score", cell.score), *ci]:
            if value is not None and round(value, policy.rounding.score_decimals) != value:
                rounding.append(Finding("aggregates.json", f"{where}.{name}", "not rounded"))
    proportions = any(c.proportion for c in raw.cells)
    for index, model in enumerate(data.models):
        where = f"$.models[{index}]"
        values = [(name, getattr(model, name)) for name in ("win_rate", "win_rate_ci_low", "win_rate_ci_high",
                                                            "macro_avg", "macro_avg_ci_low", "macro_avg_ci_high")]
        values += [(f"{name}{{key {i}}}", v) for name in ("category_scores", "category_ci_low", "category_ci_high")
                   for i, v in enumerate(getattr(model, name).values())]
        for name, value in values:
            if value is not None and round(value, policy.rounding.score_decimals) != value:
                rounding.append(Finding("aggregates.json", f"{where}.{name}", "not rounded"))
        intervals = [name for name, value in values if "_ci_" in name and value is not None]
        if intervals and proportions and policy.rounding.count_multiple > 1:
            implied.append(Finding("aggregates.json", f"{where}.{intervals[0]}", "an interval over proportions "
                                   "(multiples of 1/n) gives away the exact counts that rounding hides"))
        behind = [(c.category, raw.cells[i]) for i, c in enumerate(data.cells)
                  if c.model == model.model and c.in_leaderboard and c.score is not None]
        summaries = [(name, value, [r for _, r in behind]) for name, value in values
                     if name.startswith("macro_avg_ci")]
        summaries += [(f"{name}{{key {i}}}", value, [r for c, r in behind if c == category])
                      for name in ("category_ci_low", "category_ci_high")
                      for i, (category, value) in enumerate(getattr(model, name).items())]
        finer = [name for name, value, cells in summaries
                 if value is not None and round(value, agg.summary_decimals(cells, policy)) != value]
        if finer:
            implied.append(Finding("aggregates.json", f"{where}.{finer[0]}", "an interval with more decimals than "
                                   "the instance counts behind it support: gives away the counts rounding hides"))
    suppressed = sum(1 for c in data.cells if c.suppressed)
    return [
        Check(id="schema", description="only fields of the closed aggregate schema are present", result="pass",
              detail=f"{len(data.cells)} cell(s), {len(data.models)} model row(s), {len(data.runs)} run(s)"),
        _check("min_cell_size", f"no score on fewer than {policy.min_cell_size} instances and no count from 1 to "
               f"{policy.min_cell_size - 1}", small, f"{suppressed} cell(s) with suppressed values"),
        _check("complementary_suppression", "no suppressed count can be recovered by subtraction or from a "
               "score; averages use published scores only", lonely,
               "applied" if policy.complementary_suppression else "disabled by policy"),
        _check("implied_counts", f"no published proportion implies a count (score x n, or n minus it) from 1 to "
               f"{policy.min_cell_size - 1}; where counts are rounded, no score or interval gives the exact count "
               "away", implied, "applied"),
        _check("rounding", f"scores and their confidence intervals rounded to {policy.rounding.score_decimals} "
               "decimals", rounding, "applied"),
    ]


def _published(cell: agg.PublishedCell) -> bool:
    return any(v is not None for v in (cell.score, cell.ci_low, cell.ci_high, cell.n_scored, cell.n_failed,
                                       cell.n_total, cell.n_gold_empty, cell.score_nonempty_gold))


@dataclass
class Candidate:
    files: dict[str, bytes]
    checks: list[Check]
    run_manifests: dict[str, str]
    released_cells: list[CellInstances]  # what approval records as released

    @property
    def status(self) -> Status:
        return "ready" if all(c.result == "pass" for c in self.checks) else "blocked"

    @property
    def hashes(self) -> dict[str, str]:
        return {name: sha256_bytes(content) for name, content in self.files.items()}


ManifestHead = dict[str, Any]  # build_manifest's keyword arguments other than files, run_manifests and checks


def build_candidate(store: Store, specs: SpecRegistry, config: Any, run_ids: list[str], loaded: LoadedPolicy, *,
                    request_id: str, generated_at: str, manifest_head: ManifestHead) -> Candidate:
    """The candidate files and every check's result, computed from the store (deterministic for the same store,
    runs, policy, request id and time). The manifest that will leave with them (``manifest_head`` plus the
    files' hashes, run manifests and check results) is scanned like every other file that leaves."""
    raw = agg.collect(store, specs, config, run_ids)
    data = agg.publish(raw, loaded.policy, request_id=request_id, policy_sha256=loaded.sha256,
                       generated_at=generated_at)
    files = render_files(data)
    checks = _structural_checks(data, raw, loaded)
    policy = loaded.policy
    instances = [cell_instances(store, i, c.run_id, c.model, c.benchmark, c.metric)
                 for i, c in enumerate(data.cells) if _published(c)]
    close = close_pairs(instances, store, policy.min_cell_size)
    checks.append(_check(
        "differencing", f"no published cell differs from a released cell (or another cell of this export) of the "
        f"same benchmark and model by 1 to {policy.min_cell_size - 1} instances",
        [Finding("aggregates.json", f"$.cells[{index}]", f"differs by fewer than {policy.min_cell_size} "
                 f"instances from a cell {what}") for index, what in close],
        f"{len(instances)} published cell(s) compared with released cells"))
    fixed = fixed_vocabulary()
    allowed, markers = _data_values(data)
    allowed |= {str(manifest_head.get("requested_by")), str(manifest_head.get("appliance")), *raw_run_ids(raw)}
    fixed |= markers | generated_run_ids(store, raw)
    scan = policy.scan
    terms: set[str] = set()
    if scan.extract_terms:
        datasets = {(b, fp) for r in raw.runs for b, fp in r.dataset_fingerprints.items()}
        terms = extract_terms(store, datasets, min_length=scan.min_term_length, vocabulary=vocabulary_tokens(fixed))
    not_allowed: list[Finding] = []
    phi: list[Finding] = []
    seen: list[Finding] = []
    external: list[Finding] = []
    preview = build_manifest(files={n: sha256_bytes(c) for n, c in files.items()},
                             run_manifests={r.run_id: r.manifest_sha256 for r in raw.runs},
                             checks=dict.fromkeys(CHECK_IDS, "pass"), **manifest_head)
    leaving = {**{n: strings_of(n, c, fixed) for n, c in files.items()}, MANIFEST: strings_of(MANIFEST, preview, fixed)}
    for name, (strings, refs) in leaving.items():
        a, p, t = scan_strings(name, strings, patterns=list(scan.patterns), terms=terms, allowed=allowed, fixed=fixed)
        not_allowed += a
        phi += p
        seen += t
        external += [Finding(name, ref, "reference to an external resource") for ref in refs]
    total = sum(len(strings) for strings, _ in leaving.values())
    checks += [
        _check("string_allowlist", "every string is from the export vocabulary (model names, benchmark ids, "
               "metric and category names, run ids, hashes, fixed report text)", not_allowed,
               f"{total} string(s) checked"),
        _check("phi_patterns", f"no string matches a PHI pattern ({', '.join(scan.patterns)}), '_' read as a "
               "separator, or holds encoded text (a long hex, base64 or digit run)", phi,
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
    return Candidate(files=files, checks=checks, run_manifests=run_manifests, released_cells=instances)


def build_manifest(*, request_id: str, appliance: str, files: dict[str, str], policy_sha256: str,
                   run_manifests: dict[str, str], checks: dict[str, str], requested_by: str, requester_key: str,
                   requested_at: str, checkpoint: dict[str, Any], appliance_key: Ed25519PublicKey) -> bytes:
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "request_id": request_id,
        "appliance": appliance,
        "appliance_version": __version__,
        "files": files,
        "policy_sha256": policy_sha256,
        "run_manifests": run_manifests,
        "checks": checks,
        "requested_by": requested_by,
        "requester_key": requester_key,
        "requested_at": requested_at,
        "audit_checkpoint": checkpoint,
        "appliance_key_id": key_id(appliance_key),
    }
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")


def write_candidate(exports_dir: Path, request: ExportRequest, files: dict[str, bytes]) -> Path:
    """Write the request and its files under a temporary name; the caller renames it into place."""
    tmp = exports_dir / f".tmp-{request.request_id}"
    (tmp / "bundle").mkdir(parents=True, mode=0o700)
    for name, content in files.items():
        atomic_write(tmp / "bundle" / name, content, mode=0o640)
    atomic_write(tmp / "request.json", (request.model_dump_json(indent=2) + "\n").encode(), mode=0o600)
    return tmp


def sign_appliance(bundle: Path, manifest: bytes, key: Ed25519PrivateKey) -> None:
    atomic_write(bundle / MANIFEST, manifest, mode=0o600)
    atomic_write(bundle / SIGNATURE, base64.b64encode(key.sign(manifest)) + b"\n", mode=0o600)


# -- verification ----------------------------------------------------------------------------------------------


def _read_sig(bundle: Path, name: str) -> str | None:
    try:
        return (bundle / name).read_text(encoding="ascii")
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def _appliance_signature(written: bytes | None) -> bytes | None:
    """The 64-byte signature of ``manifest.sig`` written as :func:`sign_appliance` writes it, else None."""
    if written is None:
        return None
    try:
        raw = base64.b64decode(written.strip(), validate=True)
    except ValueError:
        return None
    return raw if len(raw) == 64 and written == base64.b64encode(raw) + b"\n" else None


def verify_bundle(bundle: Path, loaded: LoadedPolicy, *, appliance_key: Ed25519PublicKey | None = None,
                  pending: bool = False, same_policy: bool = False) -> BundleVerification:
    """Every file against the manifest; the requester's and an approver's SSH signatures over the manifest
    digest, by keys the policy lists (different keys, different names); with ``appliance_key``, the appliance's
    own signature and audit checkpoint. ``pending``: no approval yet (what an approver checks before signing,
    against the policy in force: the bundle must have been checked under exactly it, as with ``same_policy``).
    ``same_policy``: the bundle must have been checked under exactly this policy (on the appliance); a recipient
    may hold a later version of it (more approvers), which is noted, not refused."""
    from medhelm_local.audit.trail import checkpoint_signature_ok

    if not bundle.is_dir():
        raise BadInputError(f"BUNDLE: {bundle} is not a directory")
    problems: list[str] = []
    files: dict[str, str] = {}
    approval = loaded.policy.approval
    result: dict[str, Any] = {"request_id": None, "requested_by": None, "requester_key": None, "approved_by": None,
                              "approver_key": None, "key_id": None, "key_fingerprint": None,
                              "manifest_sha256": None}
    try:
        manifest_bytes = (bundle / MANIFEST).read_bytes()
    except FileNotFoundError:
        return BundleVerification(ok=False, bundle=str(bundle), problems=[f"{MANIFEST} is missing"], files={},
                                  **result)
    digest = sha256_bytes(manifest_bytes)
    result["manifest_sha256"] = digest
    try:
        manifest = json.loads(manifest_bytes)
        listed: dict[str, str] = dict(manifest["files"])
        result["request_id"] = str(manifest["request_id"])
        requester_key = str(manifest["requester_key"])
        result["requested_by"], result["requester_key"] = str(manifest["requested_by"]), requester_key
        result["key_id"] = manifest.get("appliance_key_id")
        with suppress(ValueError, TypeError, AttributeError):  # not hex: the manifest names no key we can print
            result["key_fingerprint"] = key_id_fingerprint(result["key_id"]) if result["key_id"] else None
        if manifest.get("schema") != MANIFEST_SCHEMA:
            problems.append(f"{MANIFEST}: schema is not {MANIFEST_SCHEMA}")
    except (ValueError, KeyError, TypeError):
        problems.append(f"{MANIFEST} is not a valid export manifest")
        manifest, listed, requester_key = {}, {}, ""
    notes: list[str] = []
    matches = manifest.get("policy_sha256") == loaded.sha256
    if not matches and pending:  # its disclosure rules may not be the ones the approver holds: min_cell_size: 2
        problems.append(f"the request was checked under another version of the export policy than {loaded.source}, "
                        "so its suppression and rounding may not be this policy's: do not sign it; ask the "
                        "requester for a new request made under this policy")
    elif not matches:
        (problems if same_policy else notes).append(
            f"the request was checked under another version of the export policy than {loaded.source}")
    if set(manifest.get("checks", {}).values()) - {"pass"}:
        problems.append("the manifest records a failed check")
    request_sig = _read_sig(bundle, REQUEST_SIG)
    requester_print = None
    if request_sig is None:
        problems.append(f"{REQUEST_SIG} is missing: the request was not signed by a requester")
    else:
        try:
            requester_print = sshsig.verify(request_sig, digest_messages(digest), REQUEST_NAMESPACE).fingerprint
        except sshsig.SignatureError as exc:
            problems.append(f"{REQUEST_SIG}: {exc}")
        else:
            if not sshsig.is_canonical(request_sig):
                problems.append(f"{REQUEST_SIG}: holds bytes beside the signature (not as the appliance wrote it)")
            if requester_print != requester_key:
                problems.append(f"{REQUEST_SIG}: signed by another key than the manifest's requester_key")
            requester = approval.requester(requester_print)
            if requester is None:
                problems.append(f"{REQUEST_SIG}: the requester's key is not listed under approval.requesters in "
                                f"{loaded.source}")
            elif requester.name != result["requested_by"]:
                problems.append("the manifest's requested_by is not the name the policy gives the requester's key")
    approval_sig = _read_sig(bundle, APPROVAL_SIG)
    if approval_sig is None:
        if not pending:
            problems.append(f"{APPROVAL_SIG} is missing: no approver signed this export")
    elif pending:
        problems.append(f"{APPROVAL_SIG} is present: the bundle is already approved")
    else:
        try:
            signer = sshsig.verify(approval_sig, digest_messages(digest), APPROVAL_NAMESPACE)
        except sshsig.SignatureError as exc:
            problems.append(f"{APPROVAL_SIG}: {exc}")
        else:
            if not sshsig.is_canonical(approval_sig):
                problems.append(f"{APPROVAL_SIG}: holds bytes beside the signature (not as the appliance wrote it)")
            person = approval.approver(signer.fingerprint)
            result["approver_key"] = signer.fingerprint
            if person is None:
                problems.append(f"{APPROVAL_SIG}: signed by a key not listed under approval.approvers in "
                                f"{loaded.source}")
            else:
                result["approved_by"] = person.name
                if signer.fingerprint in (requester_print, requester_key) or person.name == result["requested_by"]:
                    problems.append(f"{APPROVAL_SIG}: the approver is the requester (two people are required)")
    try:
        written: bytes | None = (bundle / SIGNATURE).read_bytes()
    except FileNotFoundError:
        written = None
    raw_signature = _appliance_signature(written)
    if written is not None and raw_signature is None:  # checked with or without the key: nothing rides in it
        problems.append(f"{SIGNATURE}: not one base64 Ed25519 signature line (holds bytes beside the signature)")
    if appliance_key is not None:
        if written is None:
            problems.append(f"{SIGNATURE} is missing")
        elif raw_signature is not None:
            try:
                appliance_key.verify(raw_signature, manifest_bytes)
            except InvalidSignature:
                problems.append(f"{MANIFEST}: the appliance signature is invalid for key "
                                f"{fingerprint(appliance_key)}")
        if result["key_id"] not in (None, key_id(appliance_key)):
            # only the manifest's key_id is at hand: both keys are named in its (earlier, raw-key) form too
            problems.append(f"the manifest names appliance key {result['key_fingerprint'] or 'that is unreadable'} "
                            f"(sha256 of the raw key, the form earlier releases printed), not "
                            f"{fingerprint(appliance_key)} ({earlier_fingerprint(appliance_key)} in that form)")
        elif result["key_id"] is not None:  # the key is at hand: name it as `init` and `ssh-keygen -lf` do
            result["key_fingerprint"] = fingerprint(appliance_key)
        checkpoint = manifest.get("audit_checkpoint")
        if not isinstance(checkpoint, dict) or not checkpoint_signature_ok(checkpoint, appliance_key):
            problems.append("the audit checkpoint in the manifest does not verify")
    present = {p.name for p in bundle.iterdir()}
    for extra in sorted(present - set(listed) - set(SIGNATURE_FILES)):
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
    return BundleVerification(ok=not problems, bundle=str(bundle), problems=problems, files=files,
                              same_policy=matches, notes=notes, **result)


def release(bundle: Path, destination: Path, request_id: str,
            check_copy: Callable[[Path], list[str]] | None = None) -> Path:
    """Copy a verified bundle to ``destination/<request id>`` (all or nothing). ``check_copy``: the problems of the
    copy itself, checked before it is put in place (the bundle in the home can change between its check and the
    copy: what leaves is what was checked)."""
    target = destination / request_id
    if target.exists():
        raise ExportRefused(f"--out: {target} already exists; choose another directory",
                            reason="destination_exists")
    if destination.exists() and not destination.is_dir():
        raise ExportRefused(f"--out: {destination} is not a directory", reason="destination_not_a_directory")
    try:
        destination.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file on the way to it, no permission
        raise ExportRefused(f"--out: cannot create the directory {destination} ({exc.strerror})",
                            reason="destination_not_writable") from None
    tmp = destination / f".{request_id}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(bundle, tmp)
    for path in tmp.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    problems = check_copy(tmp) if check_copy is not None else []
    if problems:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ExportRefused(f"bundle {request_id} changed while it was copied ({'; '.join(problems)}); not released",
                            reason="changed_while_copied")
    os.replace(tmp, target)
    return target
