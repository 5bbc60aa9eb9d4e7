"""What the deployment says about the pod the appliance runs in, for the commands that send requests.

The Helm chart runs the appliance in pods where a person cannot send: the toolbox reaches DNS only (its
NetworkPolicies), and a run there would record every request as failed. The chart names the runner CronJob in
``$MEDHELM_RUNNER_CRONJOB`` on every appliance pod, so hints to resume a run name a Job from it, and marks the toolbox
with ``$MEDHELM_NO_MODEL_EGRESS=1``, so the commands that ask a model or judge server (``run``, ``jury rescore``,
``score`` and ``runs merge`` where judges score, ``models wait``) are refused there before anything is sent, naming
the Job that does it. Without them (a workstation, docker compose) hints name the plain command. Both only narrow
what this process offers to do: neither grants anything, so a person setting or clearing them gains nothing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from medhelm_local.errors import BadInputError, ConfigError

RUNNER_CRONJOB_ENV = "MEDHELM_RUNNER_CRONJOB"
NO_MODEL_EGRESS_ENV = "MEDHELM_NO_MODEL_EGRESS"

# A Kubernetes object name (DNS-1123 subdomain, as the chart renders it): anything else is not the chart's value.
_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
# An argument written as it is in a YAML flow sequence; any other is quoted (JSON's quoting is YAML's too).
_PLAIN_ARG = re.compile(r"[A-Za-z0-9_./-][A-Za-z0-9_./@=+-]*")


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


def no_model_egress() -> bool:
    """Whether the deployment says this pod reaches no model or judge server (the chart's toolbox)."""
    return os.environ.get(NO_MODEL_EGRESS_ENV) == "1"


def refuse_without_model_egress(asks: str, instead: str) -> None:
    """Exit 2 before anything is sent where the deployment says this pod reaches no model or judge server (the
    chart's toolbox): every request would fail to connect (and be recorded as failed), or wait for its timeout.
    ``asks`` says what the command would ask ("jury rescore asks the judges (j1, j2)"), ``instead`` how to do it
    where they are reached."""
    if no_model_egress():
        raise BadInputError(f"{asks}, and this pod reaches none (its NetworkPolicies allow DNS only): {instead}")


def as_job(*argv: str) -> str:
    """How a person runs ``medhelm-local ARGV`` where the model servers are reached: a Job from the runner CronJob
    with that ``runner.command``."""
    cronjob = runner_cronjob() or "RELEASE-runner"
    command = ", ".join(arg if _PLAIN_ARG.fullmatch(arg) else json.dumps(arg) for arg in ("medhelm-local", *argv))
    return (f"run it as a Job: set runner.command: [{command}] in the values, helm upgrade, then kubectl create job "
            f"--from=cronjob/{cronjob} JOB_NAME (deploy/RUNBOOK.md, Runs)")


def refuse_sending_without_egress(run_id: str | None, flag: str, *, judges: Sequence[str] = ()) -> None:
    """``run`` refused (:func:`refuse_without_model_egress`) where it sends to the model's servers, or, for an
    embedded model, asks ``judges`` (those reached over the network) to score it. ``run_id`` and ``flag`` name the
    run a resume (``--resume``) or retry (``--retry-errors``) sends; ``run_id`` is None for a new run."""
    asks = (f"run asks the judges ({', '.join(judges)}) to score it" if judges else
            "run sends requests to the model servers")
    if run_id is not None:
        refuse_without_model_egress(asks, f"run it as {send_again_hint(run_id, flag)}")
    cronjob = runner_cronjob() or "RELEASE-runner"
    refuse_without_model_egress(asks, "run it as a Job: set runner.model and runner.benchmarks (or runner.command) "
                                f"in the values, helm upgrade, then kubectl create job --from=cronjob/{cronjob} "
                                "JOB_NAME (deploy/RUNBOOK.md, Runs)")


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
