"""Where an appliance home keeps its files, and ``init``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from medhelm_local.deployment import mounted_file
from medhelm_local.errors import BadInputError, ConfigError, MedhelmError
from medhelm_local.fileio import write_all
from medhelm_local.home.config import ApplianceConfig, default_config, dump_config, load_config
from medhelm_local.home.keys import SECRET_KEY_FILES, ensure_keys

CONFIG_FILE = "appliance.yaml"
CONFIG_ENV = "MEDHELM_CONFIG"
# Where the chart and compose mount the deployment's appliance.yaml, read-only. Where a file is there, it is the
# configuration: the CLI's environment is the insider's to set, and $MEDHELM_CONFIG naming a copy they wrote (or
# the home's own appliance.yaml, with the variable unset) would widen the allowlist, add a model on any host, or
# move the audit trail and the keys.
APPLIANCE_CONFIG = Path("/etc/medhelm/appliance.yaml")


def resolve_home(option: Path | None) -> Path:
    """``--home`` wins, then ``$MEDHELM_HOME``, then ``~/.medhelm``."""
    if option is not None:
        return option.expanduser().resolve()
    env = os.environ.get("MEDHELM_HOME")
    if env:
        return Path(env).expanduser().resolve()
    return (Path.home() / ".medhelm").resolve()


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write to a temporary sibling then rename, so a reader never sees half a file. A write that fails (a full
    disk, a read-only mount) leaves ``path`` as it was and no temporary file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@dataclass
class InitResult:
    home: Path
    created: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


@dataclass
class Home:
    root: Path

    @property
    def config_path(self) -> Path:
        """The deployment's mounted appliance.yaml (:data:`APPLIANCE_CONFIG`) where there is one, and then
        ``$MEDHELM_CONFIG`` naming another file is refused; else the file ``$MEDHELM_CONFIG`` names (a read-only
        config elsewhere), else the home's own."""
        mounted = mounted_file(APPLIANCE_CONFIG, CONFIG_ENV, what="configuration", followers="every command follows",
                               elsewhere="change it where the deployment is configured (the chart's values, "
                                         "deploy/appliance.compose.yaml)")
        if mounted is not None:
            return mounted
        override = os.environ.get(CONFIG_ENV)
        return Path(override) if override else self.root / CONFIG_FILE

    @property
    def config_from_deployment(self) -> bool:
        """appliance.yaml is the deployment's (mounted at :data:`APPLIANCE_CONFIG`, or the file ``$MEDHELM_CONFIG``
        names: the Helm chart's ConfigMap, compose's mount), not the home's own."""
        return APPLIANCE_CONFIG.exists() or bool(os.environ.get(CONFIG_ENV))

    def config_writable(self) -> bool:
        """Whether this process can replace appliance.yaml as :meth:`save_config` does: the file (where it exists)
        and its folder writable. A ConfigMap or a ``:ro`` mount is not, for root either (a read-only filesystem)."""
        path = self.config_path
        file_writable = not path.exists() or os.access(path, os.W_OK)
        return file_writable and os.access(path.parent, os.W_OK | os.X_OK)

    @cached_property
    def config(self) -> ApplianceConfig:
        config = load_config(self.config_path)
        self._refuse_appliance_key_files(config)
        return config

    def _refuse_appliance_key_files(self, config: ApplianceConfig) -> None:
        """No model's ``api_key_file`` lies in the appliance's own places (:meth:`appliance_place`): its content is
        sent as a bearer token to the model's server, which whoever edits the configuration (or points
        ``MEDHELM_CONFIG`` at a copy) may run on an allowlisted address, so it would hand them the store's data key
        or the signing key."""
        for model in config.models:
            place = None if model.api_key_file is None else self.appliance_place(model.api_key_file, config)
            if place is not None:
                raise ConfigError(f"{self.config_path}: model {model.name}: api_key_file lies in the appliance's "
                                  f"{place}; a model's API key is never read from there")

    def appliance_place(self, path: Path, config: ApplianceConfig | None = None) -> str | None:
        """Which of the appliance's own places ``path`` lies in, symlinks followed (a relative path is read from
        the working directory): its keys folder, the store's or the audit trail's folder, named with the folder;
        None: none of them. Where the store or the trail lies at the top of the home (or above it), its folder is
        the home: only the file and its companions (``medhelm.duckdb.wal``, ``audit.jsonl.state``) are its. A private
        key file (:data:`SECRET_KEY_FILES`) is one wherever it lies: whoever edits appliance.yaml can point
        ``paths.keys`` at a new folder, and the keys folder it named before is then none of these places."""
        config = config or self.config
        resolved = path.resolve()
        home = self.root.resolve()
        keys = self._keys_dir(config).resolve()
        if resolved.is_relative_to(keys):
            return f"keys folder {keys}"
        if resolved.name in SECRET_KEY_FILES:
            return f"key file {resolved}"
        for name, where in (("store", config.paths.store), ("audit trail", config.paths.audit)):
            file = self.resolve(where).resolve()
            if home.is_relative_to(file.parent):
                if resolved.parent == file.parent and resolved.name.startswith(file.name):
                    return f"{name} ({file})"
            elif resolved.is_relative_to(file.parent):
                return f"{name} folder {file.parent}"
        return None

    def refuse_output(self, path: Path, option: str) -> None:
        """Refuse (exit 2) a file a command is told to write (``--out``) where it would replace one of the appliance's
        own: in its keys, store or audit folders, a private key file wherever it lies, or appliance.yaml (``keys
        export-public --out keys/store-data.key`` replaced the store's data key with a public key: every stored
        result was lost)."""
        place = self.appliance_place(path)
        if place is None and path.resolve() == self.config_path.resolve():
            place = f"configuration {self.config_path}"
        if place is not None:
            raise BadInputError(f"{option}: {path} lies in the appliance's {place}; nothing a command exports is "
                                "written there (write it elsewhere, off the appliance)")

    def model_secret(self, path: Path, config: ApplianceConfig | None = None) -> str | None:
        """Which secret of a model ``path`` is, symlinks followed: a model's ``api_key_file`` (the chart mounts the
        vLLM key at /etc/medhelm/vllm/api-key, outside every appliance place), or a process's state under /proc
        (``/proc/self/environ`` holds the key a model's ``api_key_env`` names). None: neither."""
        config = config or self.config
        resolved = path.resolve()
        if resolved.is_relative_to("/proc"):
            return "a process's state under /proc (its environment holds the key a model's api_key_env names)"
        for model in config.models:
            if model.api_key_file is not None and model.api_key_file.resolve() == resolved:
                return f"the API key file of model {model.name}"
        return None

    def resolve(self, path: Path) -> Path:
        return path if path.is_absolute() else self.root / path

    @property
    def store_path(self) -> Path:
        return self.resolve(self.config.paths.store)

    @property
    def keys_dir(self) -> Path:
        return self._keys_dir(self.config)

    def _keys_dir(self, config: ApplianceConfig) -> Path:
        override = os.environ.get("MEDHELM_KEYS_DIR")
        return Path(override) if override else self.resolve(config.paths.keys)

    @property
    def audit_path(self) -> Path:
        return self.resolve(self.config.paths.audit)

    @property
    def exports_dir(self) -> Path:
        return self.resolve(self.config.paths.exports)

    @property
    def reports_dir(self) -> Path:
        return self.resolve(self.config.paths.reports)

    def save_config(self, config: ApplianceConfig) -> None:
        atomic_write(self.config_path, dump_config(config).encode("utf-8"))
        self.__dict__["config"] = config

    def init(self) -> InitResult:
        result = InitResult(home=self.root)
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        except (FileExistsError, NotADirectoryError):  # the path, or a folder on it, is a file
            raise BadInputError(f"{self.root}: not a directory; --home (or $MEDHELM_HOME) names the appliance's "
                                "home folder") from None
        except OSError as exc:
            raise MedhelmError(f"cannot create the home {self.root} ({exc.strerror})") from None
        if self.config_path.exists():
            result.kept.append(CONFIG_FILE)
            _ = self.config  # validate the existing file: a bad one must fail init loudly
        else:
            try:
                self.save_config(default_config())
            except OSError as exc:
                raise self._config_not_created(exc) from None
            result.created.append(CONFIG_FILE)
        try:
            for directory in (self.store_path.parent, self.audit_path.parent, self.exports_dir, self.reports_dir):
                directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            for name, created in ensure_keys(self.keys_dir, trail=self.audit_path, store=self.store_path).items():
                (result.created if created else result.kept).append(f"keys/{name}")
        except OSError as exc:
            where = Path(exc.filename or self.root)
            mounted = (" ($MEDHELM_KEYS_DIR: the folder, a mounted Secret, must hold the keys or let init write them)"
                       if os.environ.get("MEDHELM_KEYS_DIR") and where.is_relative_to(self.keys_dir) else "")
            raise MedhelmError(f"{where}: init cannot write it ({exc.strerror or type(exc).__name__}){mounted}; "
                               "free space or make it writable for this user, then run init again (it keeps what "
                               "it wrote)") from None
        return result

    def _config_not_created(self, exc: OSError) -> MedhelmError:
        """Why ``init`` could not write a missing appliance.yaml, and what to do: where ``$MEDHELM_CONFIG`` names it,
        the deployment's file is missing (bad input, exit 2); else the home cannot be written."""
        path, why = self.config_path, exc.strerror or type(exc).__name__
        if self.config_from_deployment:
            return BadInputError(
                f"{path} ($MEDHELM_CONFIG): no such file, and init cannot create it ({why}). $MEDHELM_CONFIG names "
                "the deployment's appliance.yaml (the Helm chart's ConfigMap, compose's mount): mount it there, "
                f"point $MEDHELM_CONFIG at the file, or unset it so that init writes {self.root / CONFIG_FILE}")
        return MedhelmError(f"{path}: init cannot write it ({why}); run init as the home's owner, on a writable "
                            "volume")
