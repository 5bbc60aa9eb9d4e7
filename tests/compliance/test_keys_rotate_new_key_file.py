"""`keys rotate --new-key-file`: the Kubernetes rotation of RUNBOOK.md (issue 15 item 11). The new data key is
generated and stored (a new Secret) before the store is re-encrypted, so the store never depends on a key that
exists only in the toolbox's in-memory keys directory; a pod restarted from the new Secret opens the store."""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path

from medhelm_local.home.keys import DATA_KEY_FILE
from tests.compliance.conftest import hospice_csv
from tests.conftest import Cli, cli_env

KEY_FILES = ("signing-ed25519.pem", "signing-ed25519.pub.pem", DATA_KEY_FILE)


def _secret_mounted_home(tmp_path: Path) -> tuple[Cli, Path, Path]:
    """A home whose keys come from a "Secret" (a directory the pod copies into its own keys directory)."""
    made = Cli(home=tmp_path / "offline", env=cli_env())
    assert made("init").code == 0
    secret_v1 = tmp_path / "secret-v1"
    secret_v1.mkdir()
    for name in KEY_FILES:
        shutil.copy(made.home / "keys" / name, secret_v1 / name)
    pod_keys = _copy_keys(secret_v1, tmp_path / "pod-1-keys")
    cli = Cli(home=tmp_path / "home", env=cli_env() | {"MEDHELM_KEYS_DIR": str(pod_keys)})
    assert cli("init").code == 0
    extract = hospice_csv(tmp_path / "notes.csv", 12, note=lambda i: f"rotation note {i}.")
    assert cli("datasets", "register", "hospice_referral", str(extract)).code == 0
    return cli, secret_v1, pod_keys


def _copy_keys(secret: Path, target: Path) -> Path:
    """What the chart's copy-keys init container does: owner-only copies in the pod's own directory."""
    target.mkdir(mode=0o700)
    for name in KEY_FILES:
        (target / name).write_bytes((secret / name).read_bytes())
        (target / name).chmod(0o400)
    return target


def _datasets(cli: Cli) -> list[object]:
    result = cli("datasets", "list", "--json")
    assert result.code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert isinstance(rows, list)
    return rows


def test_rotation_with_a_key_stored_first_survives_a_restart_from_the_new_secret(tmp_path: Path) -> None:
    cli, secret_v1, _pod_keys = _secret_mounted_home(tmp_path)
    before = _datasets(cli)
    new_key = secrets.token_hex(32)
    # 1. The new Secret exists before the store changes: old signing keys + the new data key.
    secret_v2 = tmp_path / "secret-v2"
    secret_v2.mkdir()
    for name in KEY_FILES[:2]:
        shutil.copy(secret_v1 / name, secret_v2 / name)
    (secret_v2 / DATA_KEY_FILE).write_text(new_key)
    # 2. Rotate with that key, streamed in (kubectl exec -i ... --new-key-file - < store-data.key).
    result = cli("keys", "rotate", "--new-key-file", "-", "--json", input_text=new_key + "\n")
    assert result.code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["new_key_id"] != payload["old_key_id"] and payload["tables"]["instances"] == 12
    # 3. The pod restarts from the new Secret (helm upgrade --set keys.existingSecret=...-v2): the store opens.
    restarted = Cli(home=cli.home, env=cli_env() | {"MEDHELM_KEYS_DIR": str(_copy_keys(secret_v2, tmp_path / "pod-2"))})
    assert _datasets(restarted) == before
    # The old Secret no longer opens it.
    stale = Cli(home=cli.home, env=cli_env() | {"MEDHELM_KEYS_DIR": str(_copy_keys(secret_v1, tmp_path / "pod-3"))})
    assert stale("datasets", "list", "--json").code != 0


def test_a_bad_or_unchanged_new_key_is_refused_before_anything_changes(tmp_path: Path) -> None:
    cli, _secret_v1, pod_keys = _secret_mounted_home(tmp_path)
    before = _datasets(cli)
    current = (pod_keys / DATA_KEY_FILE).read_text().strip()
    for bad in ("not-a-key", "ABCD" * 16, current[:-2]):
        key_file = tmp_path / "bad.key"
        key_file.write_text(bad)
        result = cli("keys", "rotate", "--new-key-file", str(key_file))
        assert result.code == 2 and "64 lowercase hex" in result.stderr
    same = cli("keys", "rotate", "--new-key-file", "-", input_text=current)
    assert same.code != 0 and "current one" in same.stderr
    assert (pod_keys / DATA_KEY_FILE).read_text().strip() == current
    assert _datasets(cli) == before
    assert cli("keys", "rotate", "--new-key-file", str(tmp_path / "missing.key")).code == 2
