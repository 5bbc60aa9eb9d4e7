"""Actions the trail records before they act (the intent) and again when they end (the outcome).

A consequential action writes its intent first (fail closed: no record, no action), then, from the same process,
one outcome record. A process killed in between (SIGKILL, power loss) leaves the intent alone in the trail, and so
does one still at work: :func:`unfinished` finds those intents for ``audit report``.

An outcome record names the intent it concludes in ``intent_seq`` (null: the action was refused or failed before
it announced anything). A record without the field (a trail written before it existed, or the appliance finishing
a rotation after a crash) concludes the latest open intent on the same ids, by the same actor on the same host
where the outcome comes from the process that wrote the intent; a refusal without it was made before acting and
concludes nothing.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from medhelm_local.audit.trail import AuditTrail, AuditWriteError, audit_event

INTENT_SEQ = "intent_seq"
REFUSALS = ("refused", "denied")  # outcomes of an action refused before it acted
FINISHED_STATUSES = ("finished", "inferred")  # a run's stored statuses once it ended with every item answered


@dataclass(frozen=True)
class Pairing:
    """How one kind of action's intent and outcome records belong together."""

    opens: dict[str, str | None]  # the intent's action -> its outcome (None: any)
    closes: str  # the outcome's action (any outcome but the intent's)
    key: tuple[str, ...]  # objects naming what is acted on: the first must be in an outcome, the others match if there
    same_process: bool  # the outcome is written by the process that wrote the intent: same actor, same host
    shown: tuple[str, ...]  # the intent's objects that say what was attempted (ids, never content)
    resumable: bool = False  # a later intent on the same ids takes over an open one (a run resumed)

    def is_intent(self, action: str, outcome: str) -> bool:
        """A refusal is never an intent: nothing was done, and nothing will conclude it."""
        return action in self.opens and self.opens[action] in (None, outcome) and outcome not in REFUSALS

    def is_outcome(self, action: str, outcome: str) -> bool:
        return action == self.closes and not self.is_intent(action, outcome)


PAIRINGS = (
    Pairing({"export.request": "started"}, "export.request", ("request_id",), True,
            ("request_id", "runs", "requester_key")),
    Pairing({"export.approve": "started"}, "export.approve", ("request_id",), True,
            ("request_id", "approver_key", "manifest_sha256")),
    Pairing({"export.release": "started"}, "export.release", ("request_id",), True,
            ("request_id", "manifest_sha256", "destination")),
    Pairing({"dataset.register": "attempt"}, "dataset.register", ("benchmark",), True, ("benchmark", "source_name")),
    Pairing({"keys.rotate": "started"}, "keys.rotate", ("key", "new_key_id"), False,
            ("key", "old_key_id", "new_key_id")),
    Pairing({"keys.recover": "started"}, "keys.recover", ("key",), True, ("key", "moved_store")),
    # appliance.yaml is written between a model change's intent and its outcome (`models add/update/remove`).
    Pairing({"config.model_add": "started"}, "config.model_add", ("model",), True, ("model", "endpoints")),
    Pairing({"config.model_update": "started"}, "config.model_update", ("model",), True,
            ("model", "changed", "endpoints")),
    Pairing({"config.model_remove": "started"}, "config.model_remove", ("model",), True, ("model", "endpoints")),
    # A run ends with run.finish, whichever invocation (start, resume, the shard completing it) ends it.
    Pairing({"run.start": None, "run.resume": None}, "run.finish", ("run_id",), False, ("run_id", "model", "mode"),
            resumable=True),
)


def pairing_of(action: str) -> Pairing:
    return next(p for p in PAIRINGS if action in p.opens)


@dataclass(frozen=True)
class OpenIntent:
    """An intent the trail records no outcome for."""

    record: dict[str, Any]
    pairing: Pairing

    @property
    def attempted(self) -> dict[str, Any]:
        objects = self.record.get("objects") or {}
        return {k: objects[k] for k in self.pairing.shown if objects.get(k) is not None}


def unfinished(records: list[dict[str, Any]]) -> list[OpenIntent]:
    """The intents among ``records`` (the whole trail, in order) that no outcome record concludes."""
    open_by_slot: dict[tuple[Any, ...], list[int]] = {}
    open_at: dict[int, tuple[tuple[Any, ...], Pairing]] = {}  # position -> its slot
    by_seq: dict[int, int] = {}  # an intent's seq -> its position
    for position, record in enumerate(records):
        objects, action, outcome = record.get("objects"), str(record.get("action")), str(record.get("outcome"))
        if not isinstance(objects, dict):
            continue  # not of the appliance's form: `audit verify` names it
        for pairing in PAIRINGS:
            if pairing.is_intent(action, outcome):
                slot = _slot(pairing, record, objects)
                waiting = open_by_slot.setdefault(slot, [])
                if pairing.resumable:
                    for taken_over in waiting:
                        open_at.pop(taken_over, None)
                    waiting.clear()
                waiting.append(position)
                open_at[position] = (slot, pairing)
                if isinstance(record.get("seq"), int):
                    by_seq[record["seq"]] = position
                break
            if pairing.is_outcome(action, outcome):
                concluded = _concluded(pairing, record, objects, outcome, records, open_by_slot, by_seq)
                if concluded is not None and concluded in open_at:
                    open_by_slot[open_at.pop(concluded)[0]].remove(concluded)
                break
    return [OpenIntent(records[position], pairing) for position, (_, pairing) in sorted(open_at.items())]


def open_intent(records: list[dict[str, Any]], closes: str, ident: Any) -> dict[str, Any] | None:
    """The latest intent among ``records`` (the whole trail, in order) on ``ident`` (its pairing's first id) that an
    outcome ``closes`` would conclude and none does yet: a run's open ``run.start`` or ``run.resume``."""
    found = [i.record for i in unfinished(records)
             if i.pairing.closes == closes and (i.record.get("objects") or {}).get(i.pairing.key[0]) == ident]
    return found[-1] if found else None


def _slot(pairing: Pairing, record: dict[str, Any], objects: dict[str, Any]) -> tuple[Any, ...]:
    process = (str(record.get("actor")), str(record.get("host"))) if pairing.same_process else ()
    return (pairing.closes, str(objects.get(pairing.key[0])), *process)


def _concluded(pairing: Pairing, record: dict[str, Any], objects: dict[str, Any], outcome: str,
               records: list[dict[str, Any]], open_by_slot: dict[tuple[Any, ...], list[int]],
               by_seq: dict[int, int]) -> int | None:
    """The position of the open intent ``record`` concludes, if any."""
    if INTENT_SEQ in objects:
        seq = objects[INTENT_SEQ]
        named = by_seq.get(seq) if isinstance(seq, int) else None
        if named is None:
            return None
        intent, ids = records[named], (records[named].get("objects") or {})
        same_ids = all(ids.get(k) == objects[k] for k in pairing.key if k in objects)
        return named if same_ids and pairing.is_intent(str(intent.get("action")), str(intent.get("outcome"))) else None
    if outcome == "refused" or objects.get(pairing.key[0]) is None:
        return None
    for position in reversed(open_by_slot.get(_slot(pairing, record, objects), [])):
        intent = records[position].get("objects") or {}
        if all(intent.get(k) == objects[k] for k in pairing.key[1:] if k in objects):
            return position
    return None


class Attempt:
    """An action announced in the trail (its intent, written by :func:`announce` before anything is done), then
    concluded by one outcome record naming that intent. As a context manager: leaving the block by an exception
    before :meth:`conclude` records the outcome ``failure`` with the exception's class, never its message (which
    may quote content); the exception goes on."""

    def __init__(self, home: Any, actor: str, action: str, role: str, intent: dict[str, Any],
                 checkpoint: dict[str, Any] | None) -> None:
        self.home, self.actor, self.action, self.role = home, actor, action, role
        self.intent = intent
        self.checkpoint = checkpoint  # the signed checkpoint that followed the intent
        self.concluded = False

    def conclude(self, outcome: str = "success", **objects: Any) -> dict[str, Any]:
        record = audit_event(self.home, self.actor, self.action, outcome=outcome, role=self.role,
                             **{INTENT_SEQ: self.intent.get("seq")}, **objects)
        self.concluded = True
        return record

    def __enter__(self) -> Attempt:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
                 ) -> None:
        if kind is not None and not self.concluded:
            intent = self.intent.get("objects") or {}
            ids = {k: intent[k] for k in pairing_of(self.action).key if k in intent}
            with contextlib.suppress(AuditWriteError):  # the trail refusing too: the original error is the one to see
                self.conclude("failure", error_type=kind.__name__, **ids)


def announce(home: Any, actor: str, action: str, *, role: str, opened: str = "started", **objects: Any) -> Attempt:
    """Write the intent of ``action`` (fail closed: raises :class:`AuditWriteError`, and the action is not done)."""
    trail = AuditTrail(home.audit_path, home.keys_dir)
    intent = trail.append(actor=actor, action=action, outcome=opened, role=role, objects=objects)
    return Attempt(home, actor, action, role, intent, trail.last_checkpoint)
