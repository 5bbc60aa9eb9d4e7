"""What the deployment says about the pod the appliance runs in, for the commands that send requests.

The Helm chart runs the appliance in pods where a person cannot send: the toolbox reaches DNS only (its
NetworkPolicies), and a run there would record every request as failed. The chart names the runner CronJob in
``$MEDHELM_RUNNER_CRONJOB`` on every appliance pod, so hints to resume a run name a Job from it, and marks the toolbox
with ``$MEDHELM_NO_MODEL_EGRESS=1``, so ``run`` there is refused before anything is sent. Without them (a
workstation, docker compose) hints name the plain command. Both only narrow what this process offers to do: neither
grants anything, so a person setting or clearing them gains nothing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from medhelm_local.errors import BadInputError, ConfigError

RUNNER_CRONJOB_ENV = "MEDHELM_RUNNER_CRONJOB"
NO_MODEL_EGRESS_ENV = "MEDHELM_NO_MODEL_EGRESS"

# A Kubernetes object name (DNS-1123 subdomain, as the chart renders it): anything else is not the chart's value.
_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def runner_cronjob() -> str | None:
    """The runner CronJob's name where the Helm chart runs this pod, else None."""
    name = os.environ.get(RUNNER_CRONJOB_ENV, "")
    return name if _OBJECT_NAME.fullmatch(name) else None


def send_again_hint(run_id: str, flag: str = "--resume", *, quoted: bool = False) -> str:
    """How a person finishes ``run_id`` with ``run --resume`` (or ``--retry-errors``): the command here (in
    backticks when ``quoted``), or in the chart a Job from the runner CronJob (deploy/RUNBOOK.md, Runs)."""
    cronjob = runner_cronjob()
    if cronjob is None:
        command = f"medhelm-local run {flag} {run_id}"
        return f"`{command}`" if quoted else command
    return (f"a Job: set runner.command: [medhelm-local, run, {flag}, {run_id}, --json] in the values, helm upgrade, "
            f"then kubectl create job --from=cronjob/{cronjob} JOB_NAME (deploy/RUNBOOK.md, Runs; the toolbox "
            "reaches no model server)")


def refuse_sending_without_egress(run_id: str | None, flag: str) -> None:
    """Exit 2 before anything is sent where the deployment says this pod reaches no model server (the chart's
    toolbox): every request would fail to connect and be recorded as failed. ``run_id`` and ``flag`` name the run
    a resume (``--resume``) or retry (``--retry-errors``) sends; ``run_id`` is None for a new run."""
    if os.environ.get(NO_MODEL_EGRESS_ENV) != "1":
        return
    where = "run sends requests to the model servers, and this pod reaches none (its NetworkPolicies allow DNS only)"
    if run_id is not None:
        raise BadInputError(f"{where}: run it as {send_again_hint(run_id, flag)}")
    cronjob = runner_cronjob() or "RELEASE-runner"
    raise BadInputError(f"{where}: run it as a Job: set runner.model and runner.benchmarks (or runner.command) in "
                        f"the values, helm upgrade, then kubectl create job --from=cronjob/{cronjob} JOB_NAME "
                        "(deploy/RUNBOOK.md, Runs)")


def mounted_file(mounted: Path, env: str, *, what: str, followers: str, elsewhere: str) -> Path | None:
    """The deployment's read-only file at ``mounted`` where there is one (the chart's ConfigMaps, compose's ``:ro``
    mounts), else None. Where it is mounted, ``$env`` naming another file is refused (:class:`ConfigError`): the
    CLI's environment is the insider's to set, and a copy they wrote would widen the allowlist or name their own
    approver key. ``what`` names the file in the refusal, ``followers`` who follows it (its verb included),
    ``elsewhere`` where to turn instead."""
    named = os.environ.get(env)
    if not mounted.exists():
        return None
    if named and Path(named).resolve() != mounted.resolve():
        raise ConfigError(f"{env} names {named}, but this appliance's {what} is mounted at {mounted}: {followers} "
                          f"that one alone (unset {env}); {elsewhere}")
    return mounted
