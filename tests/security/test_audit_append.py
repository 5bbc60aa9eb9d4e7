"""Issue 12 §5: a failed append (disk full, EFBIG) leaves no half-written record; `audit repair` removes what a
crash left, and nothing else. Before the fix, a short write left half a record and every later action was
refused."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from medhelm_local.audit.trail import AuditTrail, AuditWriteError
from medhelm_local.audit.verify import verify_file
from medhelm_local.home.keys import ensure_keys, load_signing_key
from tests.compliance.inproc import InProcessCli


def _trail(tmp_path: Path, n: int = 3) -> tuple[AuditTrail, Path]:
    keys = tmp_path / "keys"
    ensure_keys(keys)
    trail = AuditTrail(tmp_path / "audit" / "audit.jsonl", keys)
    for i in range(n):
        trail.append(actor="alice", action="test.event", outcome="success", objects={"i": i})
    return trail, keys


def _intact(trail: AuditTrail, keys: Path) -> bool:
    return verify_file(trail.path, load_signing_key(keys).public_key()).intact


FSIZE_CHILD = r"""
import json, os, resource, signal, sys
from pathlib import Path
from medhelm_local.audit.trail import AuditTrail, AuditWriteError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
path, keys = Path(sys.argv[1]), Path(sys.argv[2])
limit = path.stat().st_size + 60  # room for part of a record, not a whole one
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
try:
    AuditTrail(path, keys).append(actor="alice", action="test.event", outcome="success", objects={"big": "x" * 200})
    print(json.dumps({"raised": None}))
except AuditWriteError as exc:
    print(json.dumps({"raised": str(exc)}))
"""


def test_efbig_leaves_the_trail_exactly_as_it_was(tmp_path: Path) -> None:
    trail, keys = _trail(tmp_path)
    before = trail.path.read_bytes()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.run([sys.executable, "-c", FSIZE_CHILD, str(trail.path), str(keys)], capture_output=True,
                           text=True, env=env, timeout=120)
    assert child.returncode == 0, child.stderr
    raised = json.loads(child.stdout)["raised"]
    assert raised and "left as it was" in raised  # the action was refused, the trail untouched
    assert trail.path.read_bytes() == before
    trail.append(actor="alice", action="test.event", outcome="success")  # later actions work
    assert _intact(trail, keys)


def test_enospc_after_a_partial_write_is_rolled_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trail, keys = _trail(tmp_path)
    before = trail.path.read_bytes()
    real_write = os.write
    calls = {"n": 0}

    def failing_write(fd: int, data: bytes) -> int:
        if os.path.realpath(f"/proc/self/fd/{fd}") != str(trail.path.resolve()):
            return real_write(fd, data)
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data)[: len(data) // 3])  # a short write, as a filling disk gives
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", failing_write)
    with pytest.raises(AuditWriteError, match="left as it was"):
        trail.append(actor="alice", action="test.event", outcome="success")
    monkeypatch.setattr(os, "write", real_write)
    assert calls["n"] == 2
    assert trail.path.read_bytes() == before
    trail.append(actor="alice", action="test.event", outcome="success")
    assert _intact(trail, keys)


def _cli_home(tmp_path: Path) -> InProcessCli:
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    for i in range(2):
        assert cli("audit", "checkpoint", "--out", str(tmp_path / f"h{i}.json")).code == 0
    return cli


def test_repair_removes_a_record_a_crash_left_half_written(tmp_path: Path) -> None:
    cli = _cli_home(tmp_path)
    path = cli.home / "audit" / "audit.jsonl"
    good = path.read_bytes()
    # a process killed mid-write: a whole event line and half of its checkpoint
    event = json.dumps({"seq": 999, "action": "run.start"}).encode()
    path.write_bytes(good + event + b"\n" + b'{"seq":1000,"ts":"2026-')
    refused = cli("audit", "checkpoint", "--out", str(tmp_path / "x.json"))
    assert refused.code == 1 and "partial" in refused.stderr
    repaired = cli("audit", "repair", "--json")
    assert repaired.code == 0, repaired.stderr
    result = json.loads(repaired.stdout)
    removed = len(event) + 1 + len(b'{"seq":1000,"ts":"2026-')
    assert result["removed_bytes"] == removed
    assert (path.parent / result["saved_as"]).read_bytes() == event + b"\n" + b'{"seq":1000,"ts":"2026-'
    assert oct((path.parent / result["saved_as"]).stat().st_mode & 0o777) == oct(0o600)
    assert path.read_bytes().startswith(good)
    verify = cli("audit", "verify", "--json")
    assert verify.code == 0, verify.stdout
    actions = [json.loads(line)["action"] for line in path.read_bytes().splitlines()]
    assert "audit.repair" in actions  # the repair is itself on the record
    assert cli("audit", "repair", "--json").code == 0  # nothing left to repair


def test_repair_refuses_to_remove_records_a_completed_append_wrote(tmp_path: Path) -> None:
    cli = _cli_home(tmp_path)
    path = cli.home / "audit" / "audit.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[:-40])  # the end of the last acknowledged checkpoint cut off: not a failed append
    result = cli("audit", "repair")
    assert result.code == 1 and "not a failed append" in result.stderr
    assert path.read_bytes() == data[:-40]  # nothing was changed


def test_repair_refuses_an_edited_trail(tmp_path: Path) -> None:
    cli = _cli_home(tmp_path)
    path = cli.home / "audit" / "audit.jsonl"
    data = path.read_bytes().replace(b'"outcome":"success"', b'"outcome":"failure"', 1) + b'{"partial'
    path.write_bytes(data)
    result = cli("audit", "repair")
    assert result.code == 1 and "fails verification" in result.stderr
    assert path.read_bytes() == data
