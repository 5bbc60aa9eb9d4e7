"""Issue 12 §6: everything the appliance writes is 0600/0700, whatever the caller's umask (umask 077 at
start-up). Before the fix, the store, its WAL and `audit.jsonl.state` were 0644 and `exports/<id>/` 0755."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compliance.conftest import evaluated_home, request_export
from tests.conftest import Cli, cli_env


@pytest.fixture
def loose_umask() -> Iterator[None]:
    previous = os.umask(0o022)  # the usual default: files 0644, folders 0755 unless the appliance says otherwise
    try:
        yield
    finally:
        os.umask(previous)


def _modes(root: Path) -> dict[str, int]:
    out = {}
    for folder, _dirs, files in os.walk(root):
        for path in [Path(folder), *(Path(folder) / f for f in files)]:
            out[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def _loose(modes: dict[str, int]) -> dict[str, str]:
    return {p: oct(m) for p, m in modes.items() if m & 0o077}


def test_cli_writes_private_files_under_a_loose_umask(tmp_path: Path, loose_umask: None) -> None:
    cli = Cli(home=tmp_path / "home", env=cli_env())
    assert cli("init").code == 0
    extract = tmp_path / "notes.csv"
    extract.write_text("prompt,context,label\n" + "".join(f"Refer?,Note {i},{'AB'[i % 2]}\n" for i in range(12)))
    registered = cli("datasets", "register", "hospice_referral", str(extract))
    assert registered.code == 0, registered.stderr
    modes = _modes(cli.home)
    assert modes["store/medhelm.duckdb"] == 0o600
    assert modes["audit/audit.jsonl.state"] == 0o600
    assert modes["keys/signing-ed25519.pub.pem"] == 0o600
    assert _loose(modes) == {}
    doctor = cli("doctor", "--json")
    assert doctor.code == 0, doctor.stdout
    item = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}["file modes"]
    assert item["status"] == "ok"


def test_export_folders_are_private_and_doctor_names_loose_files(tmp_path: Path, loose_umask: None) -> None:
    with evaluated_home(tmp_path) as evaluated:
        cli = evaluated.cli
        os.umask(0o022)  # whatever the caller's umask, each command sets its own
        request = request_export(cli, evaluated.run_id)
        folder = cli.home / "exports" / str(request["request_id"])
        modes = _modes(folder)
        assert modes["."] == 0o700 and _loose(modes) == {}, _loose(modes)
        assert _loose(_modes(cli.home)) == {}
        state = cli.home / "audit" / "audit.jsonl.state"
        state.chmod(0o644)
        doctor = cli("doctor", "--json")
        assert doctor.code == 1
        item = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}["file modes"]
        assert item["status"] == "fail" and "audit.jsonl.state 644" in item["detail"]
        state.chmod(0o640)  # group access (a Kubernetes fsGroup adds it) is reported, not fatal
        doctor = cli("doctor", "--json")
        item = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}["file modes"]
        assert doctor.code == 0 and item["status"] == "warn"
