"""The audit trail's anchor outside the home: the signing public key, pinned where the appliance cannot write.

Everything in the home (the trail, its state file, the signing key pair) can be rewritten by whoever holds the
home, so a trail is only as trustworthy as the key it is checked against. The key is pinned outside it, as

* ``MEDHELM_AUDIT_KEY_FINGERPRINT`` = ``SHA256:<unpadded base64 of sha256 of the raw 32-byte Ed25519 public
  key>`` (OpenSSH fingerprint style), printed by ``init`` for the compliance officer to record, or
* ``MEDHELM_AUDIT_PUBKEY_FILE`` = the public key itself (PEM or OpenSSH ``ssh-ed25519 ...``, read by
  ``home.keys.load_public_key`` as every public key file is), e.g. a read-only ConfigMap mount.

In the Helm chart both come from a ConfigMap or Secret the appliance's service account cannot write. ``audit
verify`` checks against the pinned key (or ``--public-key FILE``), ``doctor`` checks that the private key matches
it, and ``audit checkpoint --export`` signs a head that a verifier keeps and compares later.

The fingerprint's digest is the checkpoints' ``key_id`` (hex): a fingerprint alone is enough to tell whether a
trail was signed by the pinned key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from medhelm_local.errors import BadInputError, MedhelmError
from medhelm_local.home.keys import load_public_key

FINGERPRINT_ENV = "MEDHELM_AUDIT_KEY_FINGERPRINT"
PUBKEY_FILE_ENV = "MEDHELM_AUDIT_PUBKEY_FILE"
_FINGERPRINT = re.compile(r"^SHA256:([A-Za-z0-9+/]{43})$")


class AnchorError(MedhelmError):
    """The appliance's key is not the pinned one."""


class PinConfigError(BadInputError):
    """The pinned key's configuration (environment) is unusable."""


def raw_public_bytes(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(public_key: Ed25519PublicKey) -> str:
    """``SHA256:<unpadded base64>`` of the raw 32-byte public key."""
    digest = hashlib.sha256(raw_public_bytes(public_key)).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def parse_fingerprint(text: str, *, source: str) -> str:
    """Validate a fingerprint as given (whitespace around it ignored); returns it normalised."""
    value = text.strip()
    match = _FINGERPRINT.match(value)
    if not match:
        raise PinConfigError(f"{source}: expected SHA256:<43 base64 characters> (as `medhelm-local init` prints it)")
    try:
        base64.b64decode(match.group(1) + "=", validate=True)
    except (binascii.Error, ValueError):
        raise PinConfigError(f"{source}: not valid base64 after 'SHA256:'") from None
    return value


def key_id_fingerprint(value: str) -> str:
    """The fingerprint of the key a checkpoint's or manifest's ``key_id`` (hex sha256 of the raw key) names: the
    one form every message and report names a key by."""
    return "SHA256:" + base64.b64encode(bytes.fromhex(value)).decode("ascii").rstrip("=")


def fingerprint_key_id(value: str) -> str:
    """The checkpoints' ``key_id`` (hex sha256 of the raw key) for a fingerprint."""
    return base64.b64decode(value.removeprefix("SHA256:") + "=").hex()


@dataclass(frozen=True)
class Anchor:
    """The key a trail must be signed by, and where that came from (for messages)."""

    fingerprint: str
    source: str
    public_key: Ed25519PublicKey | None = None  # None: only the fingerprint is pinned

    @property
    def key_id(self) -> str:
        return fingerprint_key_id(self.fingerprint)

    def matches(self, public_key: Ed25519PublicKey) -> bool:
        return fingerprint(public_key) == self.fingerprint


def pinned_anchor(environ: dict[str, str] | None = None) -> Anchor | None:
    """The key pinned in the environment (both variables set: they must name the same key), or None."""
    env = os.environ if environ is None else environ
    raw_fp = (env.get(FINGERPRINT_ENV) or "").strip()
    raw_file = (env.get(PUBKEY_FILE_ENV) or "").strip()
    from_file: Anchor | None = None
    if raw_file:
        try:
            key = load_public_key(Path(raw_file), given_as=PUBKEY_FILE_ENV)
        except BadInputError as exc:
            raise PinConfigError(str(exc)) from None
        from_file = Anchor(fingerprint=fingerprint(key), source=f"{PUBKEY_FILE_ENV}={raw_file}", public_key=key)
    if raw_fp:
        pinned = parse_fingerprint(raw_fp, source=FINGERPRINT_ENV)
        if from_file is not None and from_file.fingerprint != pinned:
            raise PinConfigError(f"{FINGERPRINT_ENV} ({pinned}) and {PUBKEY_FILE_ENV} ({from_file.fingerprint}) name "
                              "different keys; fix the pinned configuration")
        return from_file or Anchor(fingerprint=pinned, source=FINGERPRINT_ENV)
    return from_file


def option_anchor(path: Path, option: str = "--public-key") -> Anchor:
    """A key named on the command line by the verifier (it outranks the environment)."""
    key = load_public_key(path, given_as=option)
    return Anchor(fingerprint=fingerprint(key), source=f"{option} {path}", public_key=key)


def check_matches(public_key: Ed25519PublicKey, anchor: Anchor, *, what: str) -> None:
    if not anchor.matches(public_key):
        raise AnchorError(f"{what} has fingerprint {fingerprint(public_key)}, not the pinned key "
                          f"{anchor.fingerprint} ({anchor.source}): the home's key was replaced, or the pin is wrong")
