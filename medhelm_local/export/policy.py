"""The export disclosure policy: cell-size suppression, rounding, the string scan, who may request and approve.

The policy lives outside the home: ``$MEDHELM_EXPORT_POLICY`` names its file (a read-only mount in the chart),
because whoever can run the CLI can write the home. Without it the packaged default applies (it names no
approvers, so nothing can be approved). A copy under ``<home>/policies/`` is refused rather than read. Requesters
and approvers are listed by their OpenSSH Ed25519 public keys; the appliance holds no private key of theirs.
The policy's sha256 goes into every request and manifest.
"""

from __future__ import annotations

import hashlib
import os
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from medhelm_local.deployment import mounted_file
from medhelm_local.errors import BadInputError, ConfigError, validation_problems
from medhelm_local.export import sshsig

PatternName = Literal["mrn", "ssn", "phone", "email", "date", "address", "zip_code", "url"]
HOME_POLICY = Path("policies") / "export-policy.yaml"
POLICY_ENV = "MEDHELM_EXPORT_POLICY"
# Where the chart, compose and the image's deployments mount compliance's policy, read-only. Where a file is there,
# it is the policy: the CLI's environment is the insider's to set, and could name a policy listing their own key.
APPLIANCE_POLICY = Path("/etc/medhelm/policy/export-policy.yaml")
ALL_PATTERNS: tuple[PatternName, ...] = ("mrn", "ssn", "phone", "email", "date", "address", "zip_code", "url")


class Rounding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    score_decimals: int = Field(default=3, ge=0, le=6)
    cost_decimals: int = Field(default=2, ge=0, le=6)
    count_multiple: int = Field(default=1, ge=1)


class Scan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    patterns: list[PatternName] = Field(default_factory=lambda: list(ALL_PATTERNS))
    extract_terms: bool = True
    min_term_length: int = Field(default=3, ge=2)


class Person(BaseModel):
    """Someone who may request or approve, identified by the OpenSSH Ed25519 public key they sign with."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    key: str

    @field_validator("key")
    @classmethod
    def _ed25519(cls, value: str) -> str:
        try:
            sshsig.parse_public_key(value, "key")
        except BadInputError as exc:
            raise ValueError(str(exc)) from None
        return value

    def public_key(self) -> Ed25519PublicKey:
        return sshsig.parse_public_key(self.key, f"approval key of {self.name}")

    @property
    def fingerprint(self) -> str:
        return sshsig.fingerprint(self.public_key())


class Approval(BaseModel):
    """``requesters`` may request (``export request --key``); ``approvers`` may release. A request is approved
    only by an approver whose name and key both differ from the requester's."""

    model_config = ConfigDict(extra="forbid")

    requesters: list[Person] = Field(default_factory=list)
    approvers: list[Person] = Field(default_factory=list)

    @model_validator(mode="after")
    def _distinct(self) -> Approval:
        for role, people in (("requesters", self.requesters), ("approvers", self.approvers)):
            prints = [p.fingerprint for p in people]
            if len(set(prints)) != len(prints):
                raise ValueError(f"{role}: the same key is listed twice")
        names = {p.fingerprint: p.name for p in self.requesters}
        for approver in self.approvers:
            if approver.fingerprint in names and names[approver.fingerprint] != approver.name:
                raise ValueError(f"approvers: {approver.name}'s key is listed as a requester's key under another "
                                 "name (one key is one person)")
        return self

    def requester(self, fingerprint: str) -> Person | None:
        return next((p for p in self.requesters if p.fingerprint == fingerprint), None)

    def approver(self, fingerprint: str) -> Person | None:
        return next((p for p in self.approvers if p.fingerprint == fingerprint), None)


class ExportPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    min_cell_size: int = Field(default=11, ge=1)
    complementary_suppression: bool = True
    rounding: Rounding = Field(default_factory=Rounding)
    scan: Scan = Field(default_factory=Scan)
    approval: Approval = Field(default_factory=Approval)


class LoadedPolicy(BaseModel):
    policy: ExportPolicy
    sha256: str
    source: str


def default_policy_bytes() -> bytes:
    return (resources.files("medhelm_local.export") / "default-export-policy.yaml").read_bytes()


def parse_policy(data: bytes, source: str) -> LoadedPolicy:
    try:
        raw = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        raise ConfigError(f"{source}: not valid YAML") from None
    try:
        policy = ExportPolicy.model_validate(raw or {})
    except ValidationError as exc:
        raise ConfigError(f"{source}: {validation_problems(exc)}") from None
    return LoadedPolicy(policy=policy, sha256=hashlib.sha256(data).hexdigest(), source=source)


def load_policy_file(path: Path, option: str) -> LoadedPolicy:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{option}: cannot read the export policy {path} ({exc.strerror})") from None
    return parse_policy(data, str(path))


def load_policy(home_root: Path) -> LoadedPolicy:
    """The policy mounted at ``APPLIANCE_POLICY`` (``$MEDHELM_EXPORT_POLICY`` naming another file is then
    refused), else the one ``$MEDHELM_EXPORT_POLICY`` names, else the packaged default. A policy inside the home
    is refused: whoever runs the CLI can write there, so it could name their own key as an approver."""
    mounted = mounted_file(APPLIANCE_POLICY, POLICY_ENV, what="export policy",
                           followers="requests and approvals follow",
                           elsewhere="a recipient checks a bundle against their own copy with `export verify "
                                     "--policy FILE`")
    if mounted is not None:
        return load_policy_file(mounted, str(mounted))
    named = os.environ.get(POLICY_ENV)
    if named:
        return load_policy_file(Path(named), POLICY_ENV)
    if (home_root / HOME_POLICY).exists():
        raise ConfigError(f"{home_root / HOME_POLICY}: an export policy inside the home is not read (anyone who can "
                          f"run the CLI can write it); move it outside the home and set {POLICY_ENV} to its path")
    return parse_policy(default_policy_bytes(), "packaged default export policy")
