"""Concluding the run intents a killed process left open where the store shows how its step ended.

A process killed (SIGKILL, power lost) between a run's intent (``run.start``, ``run.resume``) and its ``run.finish``
leaves the intent open; a resume of the run concludes it. Two kill points leave nothing to resume:

* after the run was marked finished in the store, before ``run.finish`` was written (the store and the trail are
  two files: no order closes that window);
* after ``run.start``, before the run's plan was stored: no run has that id (running the command again creates a
  run with a new one).

The next ``run`` or ``runs merge`` concludes each such intent with a ``run.finish`` that names it (``intent_seq``),
written late (``recorded_late``) by that command's actor in the role ``system``: outcome ``recovered`` with the
run's stored status (``run_status``), or ``abandoned`` with ``run_in_store`` false. Nothing already in the trail is
changed. A run a process sends now (its run or shard lock held) is left to that process. A crash is told from a
tamper by ``audit verify``: a ``run.finish`` removed from the trail breaks its chain, a late record does not.

Only the trail's last ``RECENT_TRAIL_BYTES`` are read (about 500 events, each with its checkpoint): every ``run``
pays for this, and a trail grows for years (100,000 records took 1.7 s to read whole). The command after a crash
usually comes soon; an intent older than that window stays open, and ``audit report``, which reads the whole trail,
still says how its run ended.
"""

from __future__ import annotations

from typing import Any

from medhelm_local.audit import audit_event
from medhelm_local.audit.intents import FINISHED_STATUSES, INTENT_SEQ, unfinished
from medhelm_local.audit.trail import AuditTrail
from medhelm_local.context import AppContext
from medhelm_local.store.runlock import run_in_progress
from medhelm_local.store.store import Store

RECENT_TRAIL_BYTES = 512 * 1024


def conclude_left_open(app_ctx: AppContext, store: Store) -> int:
    """Conclude the run intents of ended processes on runs finished, or never created (see the module); returns how
    many. Call it before this process takes any run's lock: probing another's lock gives back this process's own."""
    home = app_ctx.home
    concluded = 0
    for intent in unfinished(AuditTrail(home.audit_path).recent_records(RECENT_TRAIL_BYTES)):
        record, run_id = intent.record, intent.attempted.get("run_id")
        if intent.pairing.closes != "run.finish" or not isinstance(run_id, str) or not isinstance(record.get("seq"),
                                                                                                   int):
            continue
        run = store.get_run(run_id)
        state: dict[str, Any]
        if run is None and record.get("action") == "run.start":
            outcome, state = "abandoned", {"run_in_store": False}
        elif run is not None and run.status in FINISHED_STATUSES:
            outcome, state = "recovered", {"run_status": run.status}
        else:
            continue  # a run left running or failed: its resume concludes it
        if run_in_progress(home.store_path, run_id):
            continue
        audit_event(home, app_ctx.actor, "run.finish", outcome=outcome, role="system", run_id=run_id,
                    recorded_late=True, **state, **{INTENT_SEQ: record["seq"]})
        concluded += 1
    return concluded
