"""``appliance.yaml``: the validated configuration of one appliance home."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from medhelm_local.errors import ConfigError, validation_problems
from medhelm_local.patterns import HEADER_NAME, MODEL_NAME

CONFIG_VERSION = 1

# Loopback and in-cluster service names: the default allowlist keeps the appliance on its own network.
DEFAULT_ALLOWLIST = [
    "http://127.0.0.1",
    "http://localhost",
    "http://[::1]",
    "http://*.svc.cluster.local",
    "https://*.svc.cluster.local",
]

EMBEDDED_MODEL_NAME = "smollm2-135m-embedded"
DEFAULT_CONTEXT_LENGTH = 2048
# The model id the embedded llama.cpp server answers to (its --model_alias).
EMBEDDED_SERVED_MODEL = "smollm2-135m-instruct"


class BackendKind(StrEnum):
    EMBEDDED = "embedded"
    OPENAI_COMPATIBLE = "openai-compatible"
    VLLM = "vllm"


class Pricing(BaseModel):
    """How a model's cost is computed from measured usage and time."""

    model_config = ConfigDict(extra="forbid")

    input_per_million: float | None = Field(default=None, ge=0)
    output_per_million: float | None = Field(default=None, ge=0)
    gpu_hour_rate: float | None = Field(default=None, ge=0)
    gpus: int = Field(default=1, ge=1)


# How a model without a URL is given one (``models update`` names the model it changes instead).
GIVE_BASE_URL = "`models add --base-url URL`"


class ModelEndpoint(BaseModel):
    """One model the appliance can query: the model under test or a judge."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(pattern=MODEL_NAME)]
    kind: BackendKind = BackendKind.OPENAI_COMPATIBLE
    base_urls: list[str] = Field(default_factory=list)
    served_model: str | None = None
    # The model name the server's replies carry, where it is not the one asked for (a server that names the
    # model it loaded whatever it is asked, a gateway that adds a version); a reply naming any other model is a
    # failed request (``model_mismatch``). Unset: replies must name ``model_id``.
    reply_model: str | None = Field(default=None, min_length=1)
    # Name of an environment variable or a file holding the API key; the key itself never sits in the YAML.
    api_key_env: str | None = None
    api_key_file: Path | None = None
    timeout_s: float = Field(default=120.0, gt=0)
    # The model's context in tokens; prompts are fitted into it. Unset (None): the server's own limit where it
    # reports one (vLLM's max_model_len), else DEFAULT_CONTEXT_LENGTH; the embedded server and `serve vllm` are
    # started with DEFAULT_CONTEXT_LENGTH when it is unset.
    context_length: int | None = Field(default=None, ge=256)
    pricing: Pricing | None = None
    weights_path: Path | None = None

    @model_validator(mode="after")
    def _urls_match_kind(self) -> ModelEndpoint:
        if self.kind != BackendKind.EMBEDDED and not self.base_urls:
            raise ValueError(f"base_urls: a model of kind {self.kind.value} needs at least one base URL "
                             f"({GIVE_BASE_URL})")
        if self.kind == BackendKind.EMBEDDED and self.base_urls:
            raise ValueError("base_urls: an embedded model is started by the appliance and takes no URL")
        return self

    @field_validator("base_urls")
    @classmethod
    def _strip_slash(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"base_urls: {url!r} is not an http(s) URL")
        return [u.rstrip("/") for u in urls]

    @property
    def context_tokens(self) -> int:
        """The configured context length, or the default when unset."""
        return self.context_length or DEFAULT_CONTEXT_LENGTH

    @property
    def model_id(self) -> str:
        if self.kind == BackendKind.EMBEDDED:
            return self.served_model or EMBEDDED_SERVED_MODEL
        return self.served_model or self.name

    @property
    def replied_model(self) -> str:
        """The model name its replies must carry (``reply_model``, else the name asked for)."""
        return self.reply_model or self.model_id


class Paths(BaseModel):
    """Locations relative to the home unless absolute. Keys may live on a separate volume."""

    model_config = ConfigDict(extra="forbid")

    store: Path = Path("store/medhelm.duckdb")
    keys: Path = Path("keys")
    audit: Path = Path("audit/audit.jsonl")
    exports: Path = Path("exports")
    reports: Path = Path("reports")


class LoaderSettings(BaseModel):
    """Limits of the extract readers. ``csv_field_max_mib``: the longest CSV/TSV field (a discharge summary...)
    accepted, in MiB; env MEDHELM_CSV_FIELD_MAX_MIB overrides it."""

    model_config = ConfigDict(extra="forbid")

    csv_field_max_mib: int = Field(default=16, ge=1, le=1024)


class RunnerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The ceiling of `run --concurrency` (the adaptive limiter starts at half of the cap, or at the cap for vLLM,
    # and finds the server's capacity below it). 256 is vLLM's default number of concurrent sequences
    # (--max-num-seqs) for one replica.
    max_concurrency: int = Field(default=256, ge=1, le=4096)
    max_retries: int = Field(default=4, ge=0, le=20)
    seed: int = 0


class StoreSettings(BaseModel):
    """The encrypted store's own memory. Above ``memory_limit_mb`` DuckDB spills (encrypted) to a directory next
    to the store file instead of growing: a run's memory stays flat however many instances it has."""

    model_config = ConfigDict(extra="forbid")

    memory_limit_mb: int = Field(default=128, ge=64, le=1_048_576)
    threads: int = Field(default=2, ge=1, le=256)
    # Seconds a writer waits for another process's lock on the store before failing; env MEDHELM_LOCK_TIMEOUT_S
    # overrides it.
    lock_timeout_s: float = Field(default=60.0, ge=0, le=86_400)


class ConsoleRole(StrEnum):
    """Who may see which pages of the web console (``serve console``)."""

    INFORMATICS = "informatics"
    COMPLIANCE = "compliance"
    CLINICIAN = "clinician"
    IT = "it"


class ConsoleSettings(BaseModel):
    """The web console. Behind an authenticating proxy (oauth2-proxy), user and groups come in headers that are
    trusted only from ``trusted_proxies``; ``roles`` maps each role to the identity provider's groups that hold
    it. Without trusted proxies the console runs standalone: loopback only, one-time login link."""

    model_config = ConfigDict(extra="forbid")

    trusted_proxies: list[str] = Field(default_factory=list)  # IP addresses or CIDR networks of the proxy
    user_header: str = Field(default="X-Forwarded-User", pattern=HEADER_NAME)
    groups_header: str = Field(default="X-Forwarded-Groups", pattern=HEADER_NAME)
    roles: dict[ConsoleRole, list[str]] = Field(default_factory=dict)  # role -> groups holding it
    raters_per_item: int = Field(default=2, ge=2, le=10)  # clinicians who rate each sampled response
    sample_per_stratum: int = Field(default=10, ge=1, le=1000)  # sampled responses per (run, benchmark)
    read_wait_s: float = Field(default=3.0, ge=0, le=60)  # how long a page waits for a run's store lock

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, values: list[str]) -> list[str]:
        import ipaddress

        for value in values:
            try:
                network = ipaddress.ip_network(value, strict=False)
            except ValueError:
                raise ValueError(f"trusted_proxies: {value!r} is not an IP address or CIDR network") from None
            # Whoever connects from a trusted address names the user and their groups (a compliance officer's
            # included): the proxy's address or its own network, never a large share of every address.
            if network.prefixlen < (8 if network.version == 4 else 32):
                raise ValueError(f"trusted_proxies: {value!r} is broader than /8 (IPv4) or /32 (IPv6); name the "
                                 "authenticating proxy's address or network") from None
        return values


class IdentitySettings(BaseModel):
    """How the site's people are named in the audit trail (:mod:`medhelm_local.actors`)."""

    model_config = ConfigDict(extra="forbid")

    # The site's staff numbers, a regular expression matched whole (e.g. ``[eu]\d{7}``): a sign-in name, or one
    # part of a subject (``e1234567@hospital.org``, ``github|1234567``), matching it is accepted although a record
    # number has its shape. Set where the deployment is configured, as the rest of this file.
    staff_id_pattern: str | None = Field(default=None, min_length=1, max_length=100)

    @field_validator("staff_id_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            pattern = re.compile(value)
        except re.error as exc:
            raise ValueError(f"staff_id_pattern: not a regular expression ({exc.msg})") from None
        if pattern.fullmatch(""):
            raise ValueError("staff_id_pattern: matches an empty name; write the staff number's form, e.g. "
                             "[eu]\\d{7}")
        return value

    def staff_ids(self) -> re.Pattern[str] | None:
        return None if self.staff_id_pattern is None else re.compile(self.staff_id_pattern)


class ApplianceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = CONFIG_VERSION
    appliance_name: str = "medhelm-local"
    models: list[ModelEndpoint] = Field(default_factory=list)
    judges: list[str] = Field(default_factory=list)
    allowlist: list[str] = Field(default_factory=lambda: list(DEFAULT_ALLOWLIST))
    paths: Paths = Field(default_factory=Paths)
    loaders: LoaderSettings = Field(default_factory=LoaderSettings)
    runner: RunnerSettings = Field(default_factory=RunnerSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    identity: IdentitySettings = Field(default_factory=IdentitySettings)

    @model_validator(mode="after")
    def _references_resolve(self) -> ApplianceConfig:
        names = [m.name for m in self.models]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"models: duplicate model name(s) {duplicates}")
        for judge in self.judges:
            if judge not in names:
                raise ValueError(f"judges: {judge!r} is not a configured model")
        if self.version != CONFIG_VERSION:
            raise ValueError(f"version: expected {CONFIG_VERSION}")
        return self

    def model(self, name: str) -> ModelEndpoint:
        for endpoint in self.models:
            if endpoint.name == name:
                return endpoint
        from medhelm_local.errors import NotFoundError

        known = ", ".join(m.name for m in self.models) or "none"
        raise NotFoundError(f"model {name!r} is not configured (configured: {known}); see `models add`")


def default_config() -> ApplianceConfig:
    return ApplianceConfig(
        models=[ModelEndpoint(name=EMBEDDED_MODEL_NAME, kind=BackendKind.EMBEDDED, context_length=2048)]
    )


def load_config(path: Path) -> ApplianceConfig:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: not found; run `medhelm-local init` first") from exc
    except OSError as exc:  # a folder where the file should be (a bind mount of a missing file makes one)
        raise ConfigError(f"{path}: expected a readable file ({exc.strerror})") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    try:
        return ApplianceConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {validation_problems(exc)}") from None


def dump_config(config: ApplianceConfig) -> str:
    data = config.model_dump(mode="json", exclude_none=True)
    return yaml.safe_dump(data, sort_keys=False)
