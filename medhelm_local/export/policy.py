"""The export disclosure policy: cell-size suppression, rounding, the string scan, who may approve.

The packaged default ships inside the package (``default-export-policy.yaml``); a site's own copy at
``<home>/policies/export-policy.yaml`` takes its place. Its sha256 goes into every request and manifest.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from medhelm_local.errors import ConfigError

PatternName = Literal["mrn", "ssn", "phone", "email", "date", "address", "zip_code", "url"]
HOME_POLICY = Path("policies") / "export-policy.yaml"
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


class Approval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    approvers: list[str] = Field(default_factory=list)
    allow_self_approval: bool = False


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
        problems = "; ".join(f"field {'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                             for e in exc.errors())
        raise ConfigError(f"{source}: {problems}") from None
    return LoadedPolicy(policy=policy, sha256=hashlib.sha256(data).hexdigest(), source=source)


def load_policy(home_root: Path) -> LoadedPolicy:
    """The home's policy if it has one, else the packaged default."""
    path = home_root / HOME_POLICY
    if path.exists():
        return parse_policy(path.read_bytes(), str(path))
    return parse_policy(default_policy_bytes(), "packaged default export policy")
