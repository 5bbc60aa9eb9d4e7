"""The audit trail's anchor outside the home: the signing public key, pinned where the appliance cannot write.

Everything in the home (the trail, its state file, the signing key pair) can be rewritten by whoever holds the
home, so a trail is only as trustworthy as the key it is checked against. The key is pinned outside it, as

* ``MEDHELM_AUDIT_KEY_FINGERPRINT`` = the key's OpenSSH fingerprint (``SHA256:...``, what ``ssh-keygen -lf`` prints
  for the key exported with ``keys export-public --format openssh``), printed by ``init`` for the compliance officer
  to record. Earlier releases printed the sha256 of the raw 32-byte key instead; a pin in that form still matches
  (:func:`earlier_fingerprint`) and ``doctor``/``audit verify`` say so, or
* ``MEDHELM_AUDIT_PUBKEY_FILE`` = the public key itself (PEM or OpenSSH ``ssh-ed25519 ...``, read by
  ``home.keys.load_public_key`` as every public key file is), e.g. a read-only ConfigMap mount.

In the Helm chart both come from a ConfigMap or Secret the appliance's service account cannot write. ``audit
verify`` checks against the pinned key (or ``--public-key FILE``), ``doctor`` checks that the private key matches
it, and ``audit checkpoint --export`` signs a head that a verifier keeps and compares later.

Checkpoints and manifests name their key by ``key_id`` (hex sha256 of the raw key, the earlier fingerprint's
digest); they are signed, so that form stays.
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

# The one fingerprint of an Ed25519 key in the project (OpenSSH's), re-exported for the audit side.
from medhelm_local.export.sshsig import fingerprint as fingerprint
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


def earlier_fingerprint(public_key: Ed25519PublicKey) -> str:
    """The form releases before the OpenSSH fingerprint printed and pinned: ``SHA256:`` + unpadded base64 of the
    sha256 of the raw 32-byte key (not what ``ssh-keygen -l`` prints). Only for matching pins set then."""
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
    """A checkpoint's or manifest's ``key_id`` (hex sha256 of the raw key) as text, where the key itself is not
    at hand: the earlier fingerprint form, since the OpenSSH one cannot be derived from it."""
    return "SHA256:" + base64.b64encode(bytes.fromhex(value)).decode("ascii").rstrip("=")


@dataclass(frozen=True)
class Anchor:
    """The key a trail must be signed by, and where that came from (for messages)."""

    fingerprint: str
    source: str
    public_key: Ed25519PublicKey | None = None  # None: only the fingerprint is pinned

    def matches(self, public_key: Ed25519PublicKey) -> bool:
        return self.fingerprint in (fingerprint(public_key), earlier_fingerprint(public_key))

    def pinned_in_earlier_form(self, public_key: Ed25519PublicKey) -> bool:
        return self.fingerprint != fingerprint(public_key) and self.fingerprint == earlier_fingerprint(public_key)

    def describe(self, public_key: Ed25519PublicKey) -> str:
        """Where the pin comes from, saying when it matched in the earlier (raw-key) fingerprint form."""
        if not self.pinned_in_earlier_form(public_key):
            return self.source
        return (f"{self.source}, in the earlier fingerprint form (sha256 of the raw key); its OpenSSH fingerprint, "
                f"as `ssh-keygen -lf` and `init` print it, is {fingerprint(public_key)}")


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
        pinned_anchor_fp = Anchor(fingerprint=pinned, source=FINGERPRINT_ENV)
        if from_file is not None and from_file.public_key is not None and not pinned_anchor_fp.matches(
                from_file.public_key):
            raise PinConfigError(f"{FINGERPRINT_ENV} ({pinned}) and {PUBKEY_FILE_ENV} ({from_file.fingerprint}) name "
                              "different keys; fix the pinned configuration")
        return from_file or pinned_anchor_fp
    return from_file


def option_anchor(path: Path, option: str = "--public-key") -> Anchor:
    """A key named on the command line by the verifier (it outranks the environment)."""
    key = load_public_key(path, given_as=option)
    return Anchor(fingerprint=fingerprint(key), source=f"{option} {path}", public_key=key)


def check_matches(public_key: Ed25519PublicKey, anchor: Anchor, *, what: str) -> None:
    if not anchor.matches(public_key):
        raise AnchorError(f"{what} has fingerprint {fingerprint(public_key)}, not the pinned key "
                          f"{anchor.fingerprint} ({anchor.source}): the home's key was replaced, or the pin is wrong")
