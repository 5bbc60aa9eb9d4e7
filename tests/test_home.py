"""The appliance home: init, keys, config validation, home resolution."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from medhelm_local.errors import ConfigError, MedhelmError
from medhelm_local.home import Home, resolve_home
from medhelm_local.home.config import default_config, dump_config, load_config
from medhelm_local.home.keys import (
    DATA_KEY_FILE,
    PUBLIC_KEY_FILE,
    SIGNING_KEY_FILE,
    load_public_key,
    load_signing_key,
)
from medhelm_local.home.layout import atomic_write
from tests.conftest import Cli, cli_env, run_read_only


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_init_creates_config_and_private_keys(cli: Cli) -> None:
    result = cli("init", "--json")
    assert result.code == 0, result.stderr
    payload = result.json()
    assert isinstance(payload, dict)
    assert "appliance.yaml" in payload["created"]
    keys = cli.home / "keys"
    assert _mode(keys / "signing-ed25519.pem") == 0o600
    assert _mode(keys / "store-data.key") == 0o600
    assert _mode(cli.home / "appliance.yaml") == 0o600
    config = load_config(cli.home / "appliance.yaml")
    assert config.models[0].kind.value == "embedded"


def test_reinit_never_overwrites_keys(cli: Cli) -> None:
    assert cli("init").code == 0
    keys = cli.home / "keys"
    before = {p.name: p.read_bytes() for p in keys.iterdir()}
    again = cli("init", "--json")
    assert again.code == 0
    payload = again.json()
    assert isinstance(payload, dict)
    assert payload["created"] == []
    assert {p.name: p.read_bytes() for p in keys.iterdir()} == before


def test_bad_config_names_the_field(cli: Cli) -> None:
    assert cli("init").code == 0
    config_path = cli.home / "appliance.yaml"
    text = config_path.read_text().replace("max_concurrency: 256", "max_concurrency: lots")
    config_path.write_text(text)
    result = cli("models", "list")
    assert result.code == 2
    assert "runner.max_concurrency" in result.stderr


def test_unknown_field_and_bad_judge_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "appliance.yaml"
    path.write_text("version: 1\nmodelz: []\n")
    with pytest.raises(ConfigError, match="modelz"):
        load_config(path)
    path.write_text("version: 1\njudges: [nobody]\n")
    with pytest.raises(ConfigError, match="judges"):
        load_config(path)


def test_a_config_path_that_is_a_folder_is_bad_input(cli: Cli) -> None:
    assert cli("init").code == 0
    config_path = cli.home / "appliance.yaml"
    config_path.unlink()
    config_path.mkdir()  # what `docker run -v ./appliance.yaml:...` leaves when the host file is missing
    result = cli("models", "list")
    assert result.code == 2, result.stderr
    assert f"{config_path}: expected a readable file" in result.stderr and "internal error" not in result.stderr


@pytest.mark.parametrize("home", ["appliance.yaml", "appliance.yaml/home"])
def test_init_with_a_file_for_home_is_bad_input(tmp_path: Path, home: str) -> None:
    (tmp_path / "appliance.yaml").write_text("version: 1\n")
    result = Cli(home=tmp_path / home, env=cli_env())("init")
    assert result.code == 2, result.stderr
    assert "not a directory" in result.stderr and "internal error" not in result.stderr


def test_init_with_medhelm_config_naming_a_missing_file_on_a_read_only_folder_says_what_to_do(cli: Cli) -> None:
    """The chart (and compose) name the deployment's appliance.yaml by $MEDHELM_CONFIG, on a read-only mount; where
    the file is missing there, `init` tried to create it and ended with "internal error (OSError)" (exit 1). It
    names the file and what to do now (exit 2), and leaves the home without keys or config."""
    mounted = cli.home.parent / "etc"
    mounted.mkdir()
    config = mounted / "appliance.yaml"
    cli.env["MEDHELM_CONFIG"] = str(config)
    refused = run_read_only(cli, mounted, "init")
    assert refused.code == 2, refused.stderr
    assert (f"{config} ($MEDHELM_CONFIG): no such file, and init cannot create it" in refused.stderr
            and f"or unset it so that init writes {cli.home / 'appliance.yaml'}" in refused.stderr), refused.stderr
    assert "internal error" not in refused.stderr
    assert list(mounted.iterdir()) == [] and list(cli.home.iterdir()) == []


def test_files_are_written_whole_when_the_system_writes_less_than_asked(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """One os.write may write fewer bytes than it is given (a signal, a size limit, 2 GiB per call on Linux);
    atomic_write and the key files wrote once and kept what the first call wrote: a truncated appliance.yaml, or a
    truncated key that init then kept. Every byte is written now."""
    real_write = os.write
    calls = []

    def short_write(fd: int, data: bytes) -> int:
        calls.append(len(data))
        return real_write(fd, bytes(data)[:7])

    monkeypatch.setattr(os, "write", short_write)
    data = bytes(range(256)) * 40
    atomic_write(tmp_path / "file.bin", data)
    home = Home(tmp_path / "home")
    home.init()
    monkeypatch.setattr(os, "write", real_write)
    assert (tmp_path / "file.bin").read_bytes() == data
    assert (home.root / "appliance.yaml").read_text() == dump_config(default_config())
    public = load_public_key(home.keys_dir / PUBLIC_KEY_FILE)
    assert public.public_bytes_raw() == load_signing_key(home.keys_dir).public_key().public_bytes_raw()
    assert len((home.keys_dir / DATA_KEY_FILE).read_bytes()) == 64
    assert len(calls) > 100


def test_a_key_init_could_not_write_is_not_left_half_written(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while init wrote the signing key left an empty key file ("internal error (OSError)"); once space
    was freed, init kept it and every command failed on it ("internal error (ValueError)"). The failure names the
    key file, nothing of the key is left, and init run again creates it."""
    real_write = os.write

    def disk_full(fd: int, data: bytes) -> int:
        if b"PRIVATE KEY" in bytes(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", disk_full)
    key = tmp_path / "home" / "keys" / SIGNING_KEY_FILE
    with pytest.raises(MedhelmError, match=f"{key}: init cannot write it \\(No space left on device\\)"):
        Home(tmp_path / "home").init()
    assert not key.exists()
    monkeypatch.setattr(os, "write", real_write)
    home = Home(tmp_path / "home")
    assert f"keys/{SIGNING_KEY_FILE}" in home.init().created
    assert load_public_key(home.keys_dir / PUBLIC_KEY_FILE).public_bytes_raw() == (
        load_signing_key(home.keys_dir).public_key().public_bytes_raw())


def test_init_with_medhelm_keys_dir_on_a_read_only_folder_names_it(cli: Cli) -> None:
    """A mounted Secret ($MEDHELM_KEYS_DIR) without the keys: init ended with "internal error (OSError)"."""
    mounted = cli.home.parent / "secret"
    mounted.mkdir()
    cli.env["MEDHELM_KEYS_DIR"] = str(mounted / "keys")
    refused = run_read_only(cli, mounted, "init")
    assert refused.code == 1, refused.stderr
    assert f"{mounted / 'keys'}: init cannot write it" in refused.stderr and "$MEDHELM_KEYS_DIR" in refused.stderr
    assert "internal error" not in refused.stderr


def test_keys_readable_by_others_are_refused(home_cli: Cli) -> None:
    key = home_cli.home / "keys" / "store-data.key"
    key.chmod(0o644)
    result = home_cli("datasets", "list")
    assert result.code == 1
    assert "mode 644" in result.stderr
    # The key itself never appears in output.
    assert key.read_text().strip() not in result.stderr + result.stdout


def test_home_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDHELM_HOME", str(tmp_path / "env-home"))
    assert resolve_home(tmp_path / "opt-home") == (tmp_path / "opt-home").resolve()
    assert resolve_home(None) == (tmp_path / "env-home").resolve()
    monkeypatch.delenv("MEDHELM_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_home(None) == (tmp_path / ".medhelm").resolve()


def test_doctor_reports_a_usable_home(home_cli: Cli) -> None:
    result = home_cli("doctor", "--json")
    assert result.code == 0, result.stderr
    payload = result.json()
    assert isinstance(payload, dict)
    assert payload["ok"] is True
    assert {c["check"] for c in payload["checks"]} == {"config", "keys", "SQL sandbox", "pinned audit key",
                                                      "file modes", "store"}


def test_doctor_fails_without_init(cli: Cli) -> None:
    result = cli("doctor", "--json")
    assert result.code == 1
    payload = result.json()
    assert isinstance(payload, dict)
    assert payload["ok"] is False


def test_doctor_names_the_missing_key_file(home_cli: Cli) -> None:
    (home_cli.home / "keys" / "store-data.key").unlink()
    result = home_cli("doctor", "--json")
    assert result.code == 1
    payload = result.json()
    assert isinstance(payload, dict)
    keys = next(c for c in payload["checks"] if c["check"] == "keys")
    assert keys["status"] == "fail" and str(home_cli.home / "keys" / "store-data.key") in keys["detail"]


def test_home_paths_follow_config(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.init()
    assert home.store_path == tmp_path / "store" / "medhelm.duckdb"
    assert home.audit_path == tmp_path / "audit" / "audit.jsonl"
