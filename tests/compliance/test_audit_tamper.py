"""Tampering with a copy of a real audit trail, every way: `audit verify` catches each and names the seq."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from medhelm_local.audit.trail import CHECKPOINT_ACTION, canonical_json, checkpoint_message, line_hash
from medhelm_local.audit.verify import ExportedCheckpoint, verify_file
from medhelm_local.home.keys import load_public_key
from tests.compliance.conftest import EvaluatedHome, approve_args, evaluated_home, request_export
from tests.compliance.inproc import InProcessCli

Lines = list[bytes]


@pytest.fixture(scope="module")
def built_trail(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(trail, public key, checkpoint exported mid-way) from a home that registered, ran and exported."""
    tmp_path = tmp_path_factory.mktemp("real-trail")
    with evaluated_home(tmp_path) as evaluated:
        cli = evaluated.cli
        checkpoint = tmp_path / "checkpoint.json"
        assert cli("audit", "checkpoint", "--out", str(checkpoint)).code == 0
        request = request_export(cli, evaluated.run_id)
        assert cli("export", "approve", str(request["request_id"]), *approve_args(cli.home)).code == 0
        assert cli("audit", "verify").code == 0
        public = tmp_path / "appliance.pub.pem"
        assert cli("keys", "export-public", "--out", str(public)).code == 0
    return cli.home / "audit" / "audit.jsonl", public, checkpoint


@pytest.fixture
def real_trail(built_trail: tuple[Path, Path, Path], tmp_path: Path) -> tuple[Path, Path, Path]:
    """A fresh copy of the real trail for each test to tamper with."""
    trail, public, checkpoint = built_trail
    copy = tmp_path / "copy" / "audit.jsonl"
    copy.parent.mkdir()
    shutil.copy(trail, copy)
    return copy, public, checkpoint


def _lines(path: Path) -> Lines:
    return path.read_bytes()[:-1].split(b"\n")


def _write(path: Path, lines: Lines) -> None:
    path.write_bytes(b"\n".join(lines) + b"\n")


def _event_positions(lines: Lines) -> list[int]:
    """1-based positions of non-checkpoint records, excluding the first and the last few."""
    return [i for i, line in enumerate(lines, start=1) if json.loads(line)["action"] != CHECKPOINT_ACTION]


def _rechain(lines: Lines, start: int) -> Lines:
    """Recompute seq and prev from position ``start`` on, as an attacker without the key would."""
    out = list(lines[: start - 1])
    for position in range(start, len(lines) + 1):
        record = json.loads(lines[position - 1])
        record["seq"] = position
        record["prev"] = line_hash(out[-1]) if out else "0" * 64
        out.append(canonical_json(record))
    return out


def _verify(trail: Path, public: Path, checkpoint: Path | None = None) -> tuple[bool, int | None, list[str]]:
    external = ExportedCheckpoint.load(checkpoint) if checkpoint else None
    report = verify_file(trail, load_public_key(public), external=external)
    return report.intact, report.first_bad_seq, [p.kind for p in report.problems]


def test_untouched_trail_verifies(real_trail: tuple[Path, Path, Path]) -> None:
    trail, public, checkpoint = real_trail
    intact, first_bad, kinds = _verify(trail, public, checkpoint)
    assert intact and first_bad is None, kinds
    assert len(_lines(trail)) >= 16


def _edit(lines: Lines, k: int) -> Lines:
    record = json.loads(lines[k - 1])
    record["actor"] = "someone-else"
    return [*lines[: k - 1], canonical_json(record), *lines[k:]]


def _edit_whitespace(lines: Lines, k: int) -> Lines:
    return [*lines[: k - 1], lines[k - 1].replace(b'"outcome":', b'"outcome": '), *lines[k:]]


def _edit_and_rechain(lines: Lines, k: int) -> Lines:
    return _rechain(_edit(lines, k), k)


def _delete(lines: Lines, k: int) -> Lines:
    return [*lines[: k - 1], *lines[k:]]


def _delete_and_rechain(lines: Lines, k: int) -> Lines:
    return _rechain(_delete(lines, k), k)


def _insert(lines: Lines, k: int) -> Lines:
    forged = json.loads(lines[k - 1])
    forged["action"] = "dataset.register"
    return [*lines[: k - 1], canonical_json(forged), *lines[k - 1:]]


def _insert_and_rechain(lines: Lines, k: int) -> Lines:
    return _rechain(_insert(lines, k), k)


def _reorder(lines: Lines, k: int) -> Lines:
    return [*lines[: k - 1], lines[k + 1], lines[k], lines[k - 1], *lines[k + 2:]]


def _reorder_and_rechain(lines: Lines, k: int) -> Lines:
    return _rechain(_reorder(lines, k), k)


@pytest.mark.parametrize("tamper", [_edit, _edit_whitespace, _edit_and_rechain, _delete, _delete_and_rechain,
                                    _insert, _insert_and_rechain, _reorder, _reorder_and_rechain])
def test_tampering_is_caught_at_the_first_bad_seq(real_trail: tuple[Path, Path, Path],
                                                  tamper: Callable[[Lines, int], Lines]) -> None:
    trail, public, _ = real_trail
    lines = _lines(trail)
    events = _event_positions(lines)
    for k in (events[1], events[len(events) // 2], events[-2]):
        _write(trail, tamper(lines, k))
        intact, first_bad, kinds = _verify(trail, public)
        assert not intact, (tamper.__name__, k)
        assert first_bad == k, (tamper.__name__, k, first_bad, kinds)
    _write(trail, lines)
    assert _verify(trail, public)[0]


def test_truncated_tail_is_caught_against_an_exported_checkpoint(real_trail: tuple[Path, Path, Path]) -> None:
    trail, public, checkpoint = real_trail
    lines = _lines(trail)
    covered = ExportedCheckpoint.load(checkpoint).tree_size
    # Remove whole (event, checkpoint) pairs so the trail still ends in a valid signed checkpoint.
    for keep in (covered - 1, 4, 2):
        _write(trail, lines[:keep])
        assert _verify(trail, public)[0], "without an outside checkpoint a clean truncation is undetectable"
        intact, first_bad, kinds = _verify(trail, public, checkpoint)
        assert not intact
        assert first_bad == keep + 1, (keep, first_bad, kinds)
    # Cutting an event's checkpoint off is caught even without an outside checkpoint.
    _write(trail, lines[:-1])
    intact, first_bad, _ = _verify(trail, public)
    assert not intact and first_bad == len(lines) - 1


def test_partial_last_record_is_caught(real_trail: tuple[Path, Path, Path]) -> None:
    trail, public, _ = real_trail
    count = len(_lines(trail))
    trail.write_bytes(trail.read_bytes()[:-20])  # a torn write of the last checkpoint
    intact, first_bad, kinds = _verify(trail, public)
    assert not intact and "partial" in kinds
    assert first_bad == count - 1  # the event whose checkpoint is torn


def test_forged_signatures_are_caught(real_trail: tuple[Path, Path, Path]) -> None:
    trail, public, _ = real_trail
    lines = _lines(trail)
    attacker = Ed25519PrivateKey.generate()
    # 1. One checkpoint's signature replaced by the attacker's signature over the same message.
    position = [i for i, line in enumerate(lines, 1) if json.loads(line)["action"] == CHECKPOINT_ACTION][3]
    record = json.loads(lines[position - 1])
    cp = record["objects"]
    message = checkpoint_message(cp["tree_size"], cp["root"], cp["chain_head"], cp["key_id"])
    cp["signature"] = base64.b64encode(attacker.sign(message)).decode()
    _write(trail, [*lines[: position - 1], canonical_json(record), *lines[position:]])
    intact, first_bad, kinds = _verify(trail, public)
    assert not intact and first_bad == position and "signature" in kinds
    # 2. An edit, then every checkpoint re-signed with the attacker's own key: fails against the trusted key.
    from medhelm_local.audit.trail import key_id, sign_checkpoint

    edited = _edit(lines, 1)
    resigned: Lines = []
    from medhelm_local.audit.merkle import MerkleAccumulator

    merkle = MerkleAccumulator()
    for position, raw in enumerate(edited, start=1):
        rec = json.loads(raw)
        rec["prev"] = line_hash(resigned[-1]) if resigned else "0" * 64
        if rec["action"] == CHECKPOINT_ACTION:
            rec["objects"] = sign_checkpoint(attacker, position - 1, merkle.root().hex(), line_hash(resigned[-1]))
        line = canonical_json(rec)
        resigned.append(line)
        merkle.add(line)
    _write(trail, resigned)
    intact, first_bad, kinds = _verify(trail, public)
    assert not intact and first_bad == 2 and "signature" in kinds
    assert json.loads(resigned[1])["objects"]["key_id"] == key_id(attacker.public_key())


def test_cli_verify_exit_codes_on_a_read_only_copy(real_trail: tuple[Path, Path, Path], tmp_path: Path) -> None:
    trail, public, checkpoint = real_trail
    cli = InProcessCli(home=tmp_path / "no-home")  # verifying a copy needs no home and no private key
    trail.chmod(0o444)
    ok = cli("audit", "verify", "--trail", str(trail), "--public-key", str(public), "--checkpoint", str(checkpoint),
             "--json")
    assert ok.code == 0, ok.stderr
    assert json.loads(ok.stdout)["intact"] is True
    lines = _lines(trail)
    k = _event_positions(lines)[2]
    trail.chmod(0o644)
    _write(trail, _edit(lines, k))
    bad = cli("audit", "verify", "--trail", str(trail), "--public-key", str(public))
    assert bad.code == 1
    assert f"first bad record seq {k}" in bad.stdout
    assert cli("audit", "verify", "--trail", str(trail)).code == 2  # the trusted key must be named


def test_appending_to_a_tampered_trail_fails_closed(evaluated: EvaluatedHome, tmp_path: Path) -> None:
    cli = evaluated.cli
    trail = cli.home / "audit" / "audit.jsonl"
    lines = _lines(trail)
    _write(trail, _edit(lines, _event_positions(lines)[1]))
    before = trail.read_bytes()
    out = tmp_path / "cp.json"
    result = cli("audit", "checkpoint", "--out", str(out))
    assert result.code == 1 and "fails verification" in result.stderr
    assert trail.read_bytes() == before and not out.exists()
    verify = cli("audit", "verify")
    assert verify.code == 1 and "could not be recorded" in verify.stderr


def test_same_size_edits_with_the_append_cache(tmp_path: Path) -> None:
    """The append-time frontier cache never hides tampering from `audit verify`."""
    from medhelm_local.audit.trail import AuditTrail, AuditWriteError
    from medhelm_local.home.keys import ensure_keys, load_signing_key

    keys = tmp_path / "keys"
    ensure_keys(keys)
    path = tmp_path / "audit.jsonl"
    trail = AuditTrail(path, keys)
    for i in range(6):
        trail.append(actor="alice", action="test.event", outcome="success", objects={"i": i})
    public = load_signing_key(keys).public_key()
    # A same-size edit of the last record: the cache no longer matches, the full check refuses to append.
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    edited = data[:last_start] + data[last_start:].replace(b'"outcome":"signed"', b'"outcome":"signeD"')
    path.write_bytes(edited)
    with pytest.raises(AuditWriteError, match="fails verification"):
        trail.append(actor="alice", action="test.event", outcome="success")
    report = verify_file(path, public)
    assert not report.intact and report.first_bad_seq == 12
    path.write_bytes(data)
    # A same-size edit in the middle: appends go on (cache), but verify names the edited record.
    path.write_bytes(data.replace(b'"actor":"alice","host"', b'"actor":"alicE","host"', 1))
    trail.append(actor="alice", action="test.event", outcome="success")
    report = verify_file(path, public)
    assert not report.intact and report.first_bad_seq == 1


def test_a_checkpoint_from_another_key_is_rejected(real_trail: tuple[Path, Path, Path], tmp_path: Path) -> None:
    from medhelm_local.audit.trail import sign_checkpoint

    trail, public, checkpoint = real_trail
    genuine = json.loads(checkpoint.read_text())["checkpoint"]
    forged = sign_checkpoint(Ed25519PrivateKey.generate(), genuine["tree_size"], genuine["root"],
                             genuine["chain_head"])
    fake = tmp_path / "forged-checkpoint.json"
    fake.write_text(json.dumps({"checkpoint": forged}))
    intact, _, kinds = _verify(trail, public, fake)
    assert not intact and kinds == ["external-signature"]
