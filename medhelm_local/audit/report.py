"""Reading the trail for people: filtering records and the ``audit report`` summary.

The summary answers a compliance officer's questions from the records alone: who ran which benchmarks on
which dataset fingerprints and models, what was requested for export, who approved or denied it, and what
left the appliance, and which actions announced in the trail have no outcome recorded (:mod:`audit.intents`).
:func:`compliance_report` lays it out once, as a head and tables, for every printable form:
the console's HTML page and the PDF (:mod:`audit.report_pdf`, ``audit report --pdf``) show the same tables. Audit
records carry no patient data (no prompt, output or extract value), so neither does the report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from medhelm_local.audit.anchor import key_id_fingerprint
from medhelm_local.audit.intents import FINISHED_STATUSES, REFUSALS, unfinished
from medhelm_local.audit.trail import CHECKPOINT_ACTION
from medhelm_local.audit.verify import verify_with_pinned_key
from medhelm_local.errors import BadInputError, MedhelmError

EXPORT_ACTIONS = ("export.request", "export.approve", "export.deny", "export.release")
NO_OUTCOME_YET = "no outcome yet"
RUN_IN_PROGRESS = "in progress (a process sending it holds its lock)"
# A run's intent left open by a process that ended (killed, power lost) at a point the store tells apart; the next
# `run` or `runs merge` concludes it with a record written late (`run.finish` recovered or abandoned).
RUN_FINISHED_UNRECORDED = ("the run is finished in the store; its process ended before it recorded run.finish "
                           "(the next run or runs merge records it)")
RUN_NEVER_CREATED = ("no run was created: no run has this id in the store (its process ended before it stored the "
                     "run's plan; the next run or runs merge records it abandoned)")


def parse_time(value: str, option: str) -> datetime:
    """An ISO date or date-time; naive values are taken as UTC."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadInputError(f"{option}: expected an ISO date such as 2026-01-31 or 2026-01-31T08:00Z") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def check_window(since: datetime | None, until: datetime | None, since_name: str, until_name: str) -> None:
    """Refuse an end at or before the start: no record could match, and an empty list would read as a quiet window."""
    if since is not None and until is not None and until <= since:
        def shown(moment: datetime) -> str:
            return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        raise BadInputError(f"{until_name} ({shown(until)}) is not after {since_name} ({shown(since)}), so no record "
                            "can match: the two may be swapped")


def record_time(record: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(record["ts"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return None


def filter_records(records: list[dict[str, Any]], *, since: datetime | None = None, until: datetime | None = None,
                   actor: str | None = None, action: str | None = None, checkpoints: bool = False
                   ) -> list[dict[str, Any]]:
    out = []
    for record in records:
        if not checkpoints and record.get("action") == CHECKPOINT_ACTION:
            continue
        when = record_time(record)
        if since and (when is None or when < since):
            continue
        if until and (when is None or when >= until):
            continue
        if actor and record.get("actor") != actor and str(record.get("actor", "")).split(":", 1)[-1] != actor:
            continue
        if action and not str(record.get("action", "")).startswith(action):
            continue
        out.append(record)
    return out


class RunSummary(BaseModel):
    run_id: str
    started: str
    actor: str
    model: str | None
    benchmarks: dict[str, str]  # benchmark -> dataset fingerprint
    endpoints: list[str]
    outcome: str | None = None
    finished: str | None = None
    resumed: int = 0
    scored: int | None = None  # instances scored and failed, as the run's finish recorded them
    failed: int | None = None


class ExportSummary(BaseModel):
    request_id: str
    requested: str
    requested_by: str
    requester: str | None = None  # the policy's name for the key that signed the request
    runs: list[str]
    status: str
    decided_by: str | None = None
    approver: str | None = None
    decided: str | None = None
    released_to: list[str] = []


class ExportRefusal(BaseModel):
    """An export action (request, approve, deny, release) the appliance refused, or that failed after its intent
    was recorded, as its record says: who tried, on what and why (the record's reason code, or the error's
    class)."""

    time: str
    actor: str
    action: str
    reason: str
    outcome: str = "refused"  # or "failed"
    request_id: str | None = None  # a refused request has no id yet
    runs: list[str] = []
    key: str | None = None  # the fingerprint of the key that signed the attempt, where one did


class UnfinishedAction(BaseModel):
    """An action whose intent the trail records with no outcome after it: still at work, or it ended without one
    (killed, power lost). Nothing in the trail tells which, except a run whose lock a process holds."""

    seq: int | None
    time: str
    actor: str
    host: str
    action: str  # the intent's action (run.start or run.resume for a run)
    attempted: dict[str, Any]  # the intent's ids: what was attempted, never content
    status: str  # NO_OUTCOME_YET, RUN_IN_PROGRESS, RUN_FINISHED_UNRECORDED or RUN_NEVER_CREATED


class TrailIntegrity(BaseModel):
    """Whether the trail the report is drawn from verifies, as ``audit verify`` checks it (pinned key, chain,
    Merkle roots, signatures, the state file's count): a report of an edited trail states what the trail says now,
    which is not what happened."""

    checked: bool
    intact: bool = False
    first_bad_seq: int | None = None
    problems: int = 0
    key: str | None = None  # the fingerprint of the key it was checked with
    anchored: bool = False  # that key is pinned outside the home
    reason: str | None = None  # why it could not be checked

    @property
    def text(self) -> str:
        """The verdict in words, for the report's head."""
        if not self.checked:
            return f"NOT CHECKED ({self.reason}): run medhelm-local audit verify before relying on this report"
        if not self.intact:
            return (f"NOT INTACT from record seq {self.first_bad_seq} ({self.problems} problem(s)): records from "
                    "there on may have been edited, removed or added, so the tables below show what the trail says "
                    "now, not what happened; run medhelm-local audit verify for each problem")
        if not self.anchored:
            return (f"intact, but UNANCHORED: checked with the home's own key {self.key}, which whoever can rewrite "
                    "the trail can replace; pin the key outside the home (audit verify says how)")
        return f"intact: every record checked against the pinned key {self.key}"


def trail_integrity(audit_path: Path, keys_dir: Path) -> TrailIntegrity:
    """Verify the home's trail for a report (nothing is recorded: the report is a reading, ``audit verify`` the
    audited check)."""
    try:
        report, _source = verify_with_pinned_key(audit_path, keys_dir)
    except (MedhelmError, OSError) as exc:  # no trail or public key yet, a pin that cannot be read
        return TrailIntegrity(checked=False, reason=str(exc) or type(exc).__name__)
    return TrailIntegrity(checked=True, intact=report.intact, first_bad_seq=report.first_bad_seq,
                          problems=len(report.problems), key=report.fingerprint, anchored=report.anchored)


class AuditSummary(BaseModel):
    since: str | None
    integrity: TrailIntegrity | None = None  # None: not checked (a summary of records given, not of a trail)
    records: int
    actors: dict[str, int]
    unfinished: list[UnfinishedAction] = []
    datasets: list[dict[str, Any]]
    runs: list[RunSummary]
    run_refusals: list[dict[str, Any]] = []  # resumes refused because the run's specs or model changed
    exports: list[ExportSummary]
    export_refusals: list[ExportRefusal] = []
    key_events: list[dict[str, Any]]
    config_changes: list[dict[str, Any]]
    egress_denials: list[dict[str, Any]]
    verifications: list[dict[str, Any]]
    unreadable: int = 0  # records not of the appliance's form, left out of the summary


# Why a registration was refused, from the error's kind (its message, which may quote the file, is never audited).
REFUSAL_REASONS = {
    "ExtractError": "the file did not read as the benchmark expects (the command named the row and column)",
    "SqlRefused": "the spec's SQL was refused (not a single SELECT over the extract's own tables)",
    "SpecPathError": "a path the spec names is outside the extract's folder",
    "ApplianceFileRefused": "the file is one of the appliance's own (keys, store, audit trail) or a model's API key",
    "ConfigError": "the spec or the appliance's settings were refused",
    "TemplateError": "the spec's prompt template was refused",
    "MetricUnsuited": "the spec's metric cannot score its task",
    "ScorerInputMismatch": "the spec's metric needs a field its loader does not give",
    "NotFoundError": "the file or benchmark was not found",
    # The kind every other refusal of the input has (a subclass above says more where one was raised).
    "BadInputError": ("the file or the benchmark's options were refused before anything was stored (for example a "
                      "path with no file, a pipe, or one of the appliance's own files; the command said which)"),
    "KeyboardInterrupt": "interrupted (Ctrl-C)",
    "Interrupted": "interrupted",
}


def outcome_text(entry: dict[str, Any]) -> str:
    """A registration's outcome, with why it was refused where the record says (the error's kind, in words)."""
    reason = entry.get("reason")
    if not reason:
        return str(entry.get("outcome"))
    return f"{entry.get('outcome')}: {REFUSAL_REASONS.get(str(reason), str(reason))}"


def _brief(record: dict[str, Any], *keys: str) -> dict[str, Any]:
    objects = record.get("objects") or {}
    return {"seq": record.get("seq"), "ts": record.get("ts"), "actor": record.get("actor"),
            "action": record.get("action"), "outcome": record.get("outcome"),
            **{k: objects.get(k) for k in keys if k in objects}}


def _key_brief(record: dict[str, Any]) -> dict[str, Any]:
    """A key event, the signing key named by its ``SHA256:`` fingerprint (as ``init`` printed it). ``key_id`` (hex,
    what records before the fingerprint was recorded carry) stays for scripts; the text names the fingerprint."""
    brief = _brief(record, "key", "key_id", "key_fingerprint", "previous_key_fingerprint", "new_key_fingerprint",
                   "old_key_id", "new_key_id")
    if isinstance(brief.get("key_id"), str) and "key_fingerprint" not in brief:
        with suppress(ValueError):
            brief["key_fingerprint"] = key_id_fingerprint(brief["key_id"])
    return brief


def _reread(dataset: dict[str, Any]) -> str:
    """A registration stored as a new version because this release read its source into other instances."""
    previous = dataset.get("previous_version")
    return f", a new reading of version {str(previous)[:16]}" if previous else ""


def _count(value: Any) -> int | None:
    """A count a record carries (a forged record may carry anything else: no count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _export_of(record: dict[str, Any]) -> ExportSummary:
    """The summary of an ``export.request`` record (ready or blocked)."""
    objects = record.get("objects") or {}
    return ExportSummary(request_id=str(objects.get("request_id", "?")), requested=str(record.get("ts", "")),
                         requested_by=str(record.get("actor", "")), requester=objects.get("requester"),
                         runs=list(objects.get("runs") or []),
                         status=str(record.get("outcome")))


def _refusal_of(record: dict[str, Any], requested: dict[str, Any] | None) -> ExportRefusal:
    """The summary of a refused ``export.*`` record; ``requested``: the request record it refers to, if known (a
    refused decision or release names only the request; its runs are the request's)."""
    objects = record.get("objects") or {}
    request_id = objects.get("request_id")
    runs = objects.get("runs", (requested or {}).get("objects", {}).get("runs")) or []
    failed = record.get("outcome") == "failure"
    return ExportRefusal(time=str(record.get("ts", "")), actor=str(record.get("actor", "")),
                         action=str(record.get("action")), outcome="failed" if failed else "refused",
                         reason=str(objects.get("error_type" if failed else "reason") or "not recorded"),
                         request_id=None if request_id is None else str(request_id), runs=list(runs),
                         key=objects.get("approver_key") or objects.get("requester_key"))


def _run_of(record: dict[str, Any]) -> RunSummary:
    """The summary of a ``run.start`` (or ``run.resume``) record."""
    objects = record.get("objects") or {}
    fingerprints = {b: str((d or {}).get("fingerprint", "")) if isinstance(d, dict) else str(d)
                    for b, d in (objects.get("datasets") or {}).items()}
    return RunSummary(run_id=str(objects.get("run_id", "?")), started=str(record.get("ts", "")),
                      actor=str(record.get("actor", "")), model=objects.get("model"), benchmarks=fingerprints,
                      endpoints=list(objects.get("endpoints") or []))


def _started_before(records: list[dict[str, Any]], since: datetime | None
                    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The export requests and run starts recorded before ``since``, by request and run id: what a decision, a
    release or a run's end inside the period belongs to."""
    requests: dict[str, dict[str, Any]] = {}
    starts: dict[str, dict[str, Any]] = {}
    for record in filter_records(records, until=since) if since else []:
        objects = record.get("objects")
        if not isinstance(objects, dict):
            continue
        if record.get("action") == "export.request" and record.get("outcome") in ("ready", "blocked"):
            requests[str(objects.get("request_id"))] = record
        elif record.get("action") in ("run.start", "run.resume") and record.get("outcome") not in REFUSALS:
            starts[str(objects.get("run_id"))] = record
    return requests, starts


def _unfinished(records: list[dict[str, Any]], since: datetime | None, running: Callable[[str], bool] | None,
                run_statuses: Mapping[str, str] | None) -> list[UnfinishedAction]:
    """The intents at or after ``since`` that nothing in the whole trail concludes; ``running(run_id)``: whether a
    process is sending that run now; ``run_statuses``: every run in the store, by id (None: the store unread)."""
    out = []
    for intent in unfinished(records):
        record = intent.record
        when = record_time(record)
        if since and (when is None or when < since):
            continue
        run_id = intent.attempted.get("run_id")
        seq = record.get("seq")
        out.append(UnfinishedAction(
            seq=seq if isinstance(seq, int) else None, time=str(record.get("ts", "")),
            actor=str(record.get("actor", "")), host=str(record.get("host", "")), action=str(record.get("action")),
            attempted=intent.attempted, status=_run_intent_status(record, run_id, running, run_statuses)))
    return out


def _run_intent_status(record: dict[str, Any], run_id: Any, running: Callable[[str], bool] | None,
                       run_statuses: Mapping[str, str] | None) -> str:
    """What is known of an open intent beyond the trail: for a run's, whether a process sends it, and what the
    store holds of it (a killed process leaves an intent open whether or not its step took effect)."""
    if run_id is None:
        return NO_OUTCOME_YET
    if running is not None and running(str(run_id)):
        return RUN_IN_PROGRESS
    if run_statuses is None:
        return NO_OUTCOME_YET
    stored = run_statuses.get(str(run_id))
    if stored is None and record.get("action") == "run.start":
        return RUN_NEVER_CREATED
    return RUN_FINISHED_UNRECORDED if stored in FINISHED_STATUSES else NO_OUTCOME_YET


def summarize(records: list[dict[str, Any]], since: datetime | None,
              running: Callable[[str], bool] | None = None, run_statuses: Mapping[str, str] | None = None
              ) -> AuditSummary:
    """The summary of the trail's records (checkpoints left out) at or after ``since``. ``records`` is the whole
    trail: an approval, denial or release in the period of a request made before it is listed with that request,
    and a run started before it with its end. ``running(run_id)``: whether a process is sending that run now (a
    run with no outcome yet is then said to be in progress); ``run_statuses``: the stored status of every run in
    the store, by id (a run's open intent is then said to be on a finished run, or on a run never created; None:
    the store was not read, and nothing is said beyond the trail)."""
    unconcluded = _unfinished(records, since, running, run_statuses)
    requested_before, started_before = _started_before(records, since)
    records = filter_records(records, since=since)
    actors: dict[str, int] = {}
    datasets: list[dict[str, Any]] = []
    runs: dict[str, RunSummary] = {}
    exports: dict[str, ExportSummary] = {}
    requests: dict[str, dict[str, Any]] = dict(requested_before)  # the request records, by id, for refusals
    refusals: list[ExportRefusal] = []
    run_refusals: list[dict[str, Any]] = []
    keys: list[dict[str, Any]] = []
    config: list[dict[str, Any]] = []
    egress: list[dict[str, Any]] = []
    verifications: list[dict[str, Any]] = []

    def export(request_id: str) -> ExportSummary | None:
        if request_id not in exports and request_id in requested_before:
            exports[request_id] = _export_of(requested_before[request_id])
        return exports.get(request_id)

    def run_of(run_id: str) -> RunSummary | None:
        if run_id not in runs and run_id in started_before:
            runs[run_id] = _run_of(started_before[run_id])
        return runs.get(run_id)

    def take(record: dict[str, Any]) -> None:
        action = str(record.get("action", ""))
        actor = str(record.get("actor", ""))
        objects = record.get("objects") or {}
        if not isinstance(objects, dict):
            raise TypeError("objects")
        ts = str(record.get("ts", ""))
        if action == "dataset.register":
            datasets.append(_brief(record, "benchmark", "fingerprint", "version", "instances", "previous_version",
                                   "source_name", "reason"))
        elif action in ("run.start", "run.resume") and record.get("outcome") in REFUSALS:
            run_refusals.append(_brief(record, "run_id", "model", "mode", "reason", "changed"))
        elif action == "run.resume" and (resumed := run_of(str(objects.get("run_id")))) is not None:
            resumed.resumed += 1
        elif action == "endpoint.use" and (used := run_of(str(objects.get("run_id")))) is not None:
            url = str(objects.get("url"))
            if url not in used.endpoints:
                used.endpoints.append(url)
        elif action in ("run.start", "run.resume"):
            started = _run_of(record)
            runs[started.run_id] = started
        elif action == "run.finish":
            finished = run_of(str(objects.get("run_id")))
            if finished is not None:
                finished.outcome, finished.finished = str(record.get("outcome")), ts
                finished.scored, finished.failed = _count(objects.get("scored")), _count(objects.get("failed"))
        elif action in EXPORT_ACTIONS and record.get("outcome") in ("refused", "failure"):
            refusals.append(_refusal_of(record, requests.get(str(objects.get("request_id")))))
        elif action == "export.request" and record.get("outcome") in ("ready", "blocked"):
            request = _export_of(record)
            exports[request.request_id] = request
            requests[request.request_id] = record
        elif action in ("export.approve", "export.deny") and record.get("outcome") in ("approved", "denied"):
            decided = export(str(objects.get("request_id")))
            if decided is not None:
                decided.status, decided.decided_by, decided.decided = str(record.get("outcome")), actor, ts
                decided.approver = objects.get("approver")
        elif action == "export.release" and record.get("outcome") == "success":
            released = export(str(objects.get("request_id")))
            if released is not None:
                released.released_to.append(str(objects.get("destination", "?")))
        elif action.startswith("keys."):
            keys.append(_key_brief(record))
        elif action.startswith("config."):
            config.append(_brief(record, "model", "changed", "endpoints", "reason"))
        elif action == "egress.denied":
            egress.append(_brief(record, "target"))
        elif action == "audit.verify":
            verifications.append(_brief(record, "records", "first_bad_seq"))

    unreadable = 0
    for record in records:
        # A record not of the form the appliance writes (tampered with: ``objects`` not a mapping, a list
        # where ids belong) is left out and counted; ``audit verify`` names it.
        try:
            take(record)
        except (AttributeError, TypeError, ValueError):  # pydantic's ValidationError is a ValueError
            unreadable += 1
            continue
        actor = str(record.get("actor", ""))
        actors[actor] = actors.get(actor, 0) + 1
    return AuditSummary(
        since=since.isoformat() if since else None, records=len(records), actors=actors, unfinished=unconcluded,
        datasets=datasets,
        runs=list(runs.values()), run_refusals=run_refusals, exports=list(exports.values()), export_refusals=refusals,
        key_events=keys,
        config_changes=config, egress_denials=egress, verifications=verifications, unreadable=unreadable,
    )


def _requested_by(export: ExportSummary) -> str:
    """Who requested: the acting identity and, as for the approver, the policy's name for the key that signed."""
    return export.requested_by + (f" (requester {export.requester})" if export.requester else "")


def _refused_on(refusal: ExportRefusal) -> str:
    """What a refused (or failed) export action was about: the request, its runs, the key that signed the attempt."""
    return ((f", request {refusal.request_id}" if refusal.request_id else "")
            + (f", runs {', '.join(refusal.runs)}" if refusal.runs else "")
            + (f", key {refusal.key}" if refusal.key else ""))


def _attempted(action: UnfinishedAction, separator: str) -> str:
    """What an unfinished action attempted, as ``key value`` pairs (lists joined with commas)."""
    return "".join(f"{separator}{k} {', '.join(map(str, v)) if isinstance(v, list) else v}"
                   for k, v in action.attempted.items())


def render_text(summary: AuditSummary) -> str:
    """A readable plain-text report."""
    out = [f"Audit report{' since ' + summary.since if summary.since else ''}: {summary.records} records"]
    if summary.integrity is not None:
        out.append(f"Trail integrity: {summary.integrity.text}")
    if summary.unreadable:
        out.append(f"{summary.unreadable} record(s) not of the form the appliance writes were left out: run "
                   "`medhelm-local audit verify`")
    out += ["", "Unfinished actions (no outcome recorded):"]
    out += [f"  {u.time}  {u.action} by {u.actor} on {u.host}: {u.status}" + _attempted(u, ", ")
            for u in summary.unfinished] or ["  (none)"]
    out += ["", "Who acted:"]
    out += [f"  {actor}: {n} records" for actor, n in sorted(summary.actors.items())] or ["  (nobody)"]
    out += ["", "Datasets registered:"]
    # The trail's `fingerprint` is the source file's sha256; `version` is what `datasets list` and runs call the
    # dataset version (its fingerprint there). Named as the PDF and `datasets list` name them.
    out += [f"  {d['ts']}  {d['actor']}  {d.get('benchmark')}"  # an attempt or a refusal has neither
            + (f"  source sha256 {str(d['fingerprint'])[:16]}" if d.get("fingerprint") else "")
            + (f" (dataset version {str(d['version'])[:16]}{_reread(d)})" if d.get("version") else "")
            + (f"  {d['source_name']}" if d.get("source_name") else "") + f"  {outcome_text(d)}"
            for d in summary.datasets] or ["  (none)"]
    out += ["", "Runs:"]
    for run in summary.runs:
        out.append(f"  {run.started}  {run.actor} ran {run.model} ({run.run_id}), outcome {run.outcome or 'open'}"
                   + (f" (scored {run.scored}, failed {run.failed})" if run.scored is not None else "")
                   + (f", resumed {run.resumed} time(s)" if run.resumed else ""))
        out += [f"      {b} on dataset version {fp[:16]}" for b, fp in sorted(run.benchmarks.items())]
        if run.endpoints:
            out.append(f"      endpoints: {', '.join(run.endpoints)}")
    if not summary.runs:
        out.append("  (none)")
    out += ["", "Exports:"]
    for export in summary.exports:
        line = f"  {export.requested}  {export.request_id} requested by {_requested_by(export)} for runs " \
               f"{', '.join(export.runs)}: {export.status}"
        if export.decided_by:
            line += f" by {export.decided_by}" + (f" (approver {export.approver})" if export.approver else "")
            line += f" at {export.decided}"
        out.append(line)
        out += [f"      released to {dest}" for dest in export.released_to]
    out += [f"  {r.time}  {r.action} {r.outcome} ({r.reason}), by {r.actor}" + _refused_on(r)
            for r in summary.export_refusals]
    if not summary.exports and not summary.export_refusals:
        out.append("  (none)")
    for title, items in (("Refused resumes of a run", summary.run_refusals), ("Key events", summary.key_events),
                         ("Configuration changes", summary.config_changes),
                         ("Egress denials", summary.egress_denials), ("Audit verifications", summary.verifications)):
        out += ["", f"{title}:"]
        out += [f"  {i['ts']}  {i['actor']}  {i['action']}  {i['outcome']}"
                + (f"  {_details(i, '  ')}" if _details(i) else "")
                for i in items] or ["  (none)"]
    return "\n".join(out) + "\n"


class ReportTable(BaseModel):
    """One section of the printable compliance report."""

    id: str
    title: str
    columns: list[str]
    rows: list[list[str]]


class ComplianceReport(BaseModel):
    """The printable compliance report: its head (what it covers) and its tables."""

    appliance: str
    generated: str
    since: str | None
    records: int
    last_checkpoint: str | None
    last_export: str | None
    integrity: TrailIntegrity | None = None
    tables: list[ReportTable]
    unreadable: int = 0  # records not of the appliance's form, left out of the tables


def _last(records: list[dict[str, Any]], action: str) -> str | None:
    for record in reversed(records):
        if record.get("action") == action:
            when = record_time(record)
            return when.isoformat() if when else None
    return None


def _details(item: dict[str, Any], separator: str = " ") -> str:
    return separator.join(f"{k}={v}" for k, v in item.items()
                          if k not in ("seq", "ts", "actor", "action", "outcome", "key_id") and v is not None)


def report_tables(summary: AuditSummary) -> list[ReportTable]:
    runs = [[r.started, r.actor, str(r.model or ""), r.run_id,
             "\n".join(f"{b} {fp[:16]}" for b, fp in sorted(r.benchmarks.items())), ", ".join(r.endpoints),
             (r.outcome or "open") + (f" (scored {r.scored}, failed {r.failed})" if r.scored is not None else "")
             + (f", resumed {r.resumed}x" if r.resumed else "")] for r in summary.runs]
    exports = [[e.requested, e.request_id, _requested_by(e), ", ".join(e.runs), e.status,
                (e.decided_by or "-") + (f" (approver {e.approver})" if e.approver else ""),
                ", ".join(e.released_to) or "-"] for e in summary.exports]
    tables = [
        ReportTable(id="report-unfinished", title="Unfinished actions (no outcome recorded)",
                    columns=["Time", "Actor", "Host", "Action", "Attempted", "Status"],
                    rows=[[u.time, u.actor, u.host, u.action, _attempted(u, "\n").lstrip("\n"), u.status]
                          for u in summary.unfinished]),
        ReportTable(id="actors", title="Who acted", columns=["Actor", "Records"],
                    rows=[[a, str(n)] for a, n in sorted(summary.actors.items())]),
        ReportTable(id="report-datasets", title="Datasets registered",
                    columns=["Time", "Actor", "Benchmark", "Source file", "Source sha256", "Dataset version",
                             "Outcome"],
                    rows=[[str(d.get("ts")), str(d.get("actor")), str(d.get("benchmark")),
                           str(d.get("source_name") or ""), str(d.get("fingerprint") or "")[:16],
                           str(d.get("version") or "")[:16] + _reread(d), outcome_text(d)] for d in summary.datasets]),
        ReportTable(id="report-runs", title="Runs", columns=["Started", "Actor", "Model", "Run",
                                                              "Benchmarks (dataset version)", "Endpoints", "Outcome"],
                    rows=runs),
        ReportTable(id="report-exports", title="Exports", columns=["Requested", "Request", "By", "Runs", "Status",
                                                                    "Decided by", "Released to"], rows=exports),
        ReportTable(id="report-export-refusals", title="Refused or failed export actions",
                    columns=["Time", "Actor", "Action", "Reason", "Request", "Runs", "Key"],
                    rows=[[r.time, r.actor, r.action, r.reason if r.outcome == "refused" else f"failed: {r.reason}",
                           r.request_id or "-", ", ".join(r.runs) or "-", r.key or "-"]
                          for r in summary.export_refusals]),
    ]
    for table_id, title, items in (("report-run-refusals", "Refused resumes of a run", summary.run_refusals),
                                   ("report-keys", "Key events", summary.key_events),
                                   ("report-config", "Configuration changes", summary.config_changes),
                                   ("report-egress", "Egress denials", summary.egress_denials),
                                   ("report-verifications", "Audit verifications", summary.verifications)):
        tables.append(ReportTable(id=table_id, title=title, columns=["Time", "Actor", "Action", "Outcome", "Details"],
                                  rows=[[str(i.get("ts")), str(i.get("actor")), str(i.get("action")),
                                         str(i.get("outcome")), _details(i)] for i in items]))
    return tables


def compliance_report(records: list[dict[str, Any]], *, since: datetime | None, appliance: str,
                      generated: datetime | None = None, running: Callable[[str], bool] | None = None,
                      run_statuses: Mapping[str, str] | None = None, integrity: TrailIntegrity | None = None
                      ) -> ComplianceReport:
    """The report over ``records`` (the whole trail: checkpoints are read from it) since ``since``; ``running``
    and ``run_statuses``: as for :func:`summarize`; ``integrity``: whether the trail verifies
    (:func:`trail_integrity`)."""
    summary = summarize(records, since, running, run_statuses)
    return ComplianceReport(
        appliance=appliance, generated=(generated or datetime.now(UTC)).isoformat(timespec="seconds"),
        since=since.isoformat() if since else None, records=summary.records, unreadable=summary.unreadable,
        integrity=integrity,
        last_checkpoint=_last(records, CHECKPOINT_ACTION), last_export=_last(records, "audit.checkpoint_export"),
        tables=report_tables(summary))
