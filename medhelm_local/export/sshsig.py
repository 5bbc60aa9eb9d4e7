"""OpenSSH signatures (SSHSIG, ``ssh-keygen -Y sign``) with Ed25519 keys, verified and made in Python.

An approver signs a request's manifest digest on their own workstation::

    printf %s DIGEST | ssh-keygen -Y sign -f ~/.ssh/id_ed25519 -n medhelm-export > approval.sig

and the appliance (or anyone holding the export policy) checks it with :func:`verify`: the armored blob's
magic, version, namespace, hash algorithm (sha512 or sha256) and the Ed25519 signature over the SSHSIG
signed-data structure (PROTOCOL.sshsig). Only Ed25519 keys are accepted. :func:`sign` makes the same
signature from a private key file held by the signer (``--key FILE``); the appliance never stores it.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from medhelm_local.errors import BadInputError

MAGIC = b"SSHSIG"
BEGIN = "-----BEGIN SSH SIGNATURE-----"
END = "-----END SSH SIGNATURE-----"
KEY_TYPE = b"ssh-ed25519"
HASHES = {"sha512": hashlib.sha512, "sha256": hashlib.sha256}
PASSPHRASE_ENV = "MEDHELM_KEY_PASSPHRASE"


class SignatureError(Exception):
    """A signature that does not parse or does not verify; the message says which (never key material)."""


@dataclass(frozen=True)
class Verified:
    public_key: Ed25519PublicKey
    fingerprint: str
    namespace: str
    hash_algorithm: str


def _string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SignatureError("truncated SSHSIG blob")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def uint32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def string(self) -> bytes:
        return self.take(self.uint32())

    def done(self) -> bool:
        return self.pos == len(self.data)


def public_blob(key: Ed25519PublicKey) -> bytes:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return _string(KEY_TYPE) + _string(raw)


def fingerprint(key: Ed25519PublicKey) -> str:
    """OpenSSH's fingerprint (``ssh-keygen -l``): SHA256 of the key blob, unpadded base64."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(public_blob(key)).digest()).decode().rstrip("=")


def _key_from_blob(blob: bytes) -> Ed25519PublicKey:
    reader = _Reader(blob)
    if reader.string() != KEY_TYPE:
        raise SignatureError("the signing key is not an Ed25519 key (only ssh-ed25519 is accepted)")
    raw = reader.string()
    if len(raw) != 32 or not reader.done():
        raise SignatureError("malformed ssh-ed25519 public key")
    try:
        return Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        raise SignatureError("malformed ssh-ed25519 public key") from None


def parse_public_key(line: str, where: str) -> Ed25519PublicKey:
    """An OpenSSH public key line (``ssh-ed25519 AAAA... comment``)."""
    try:
        key = serialization.load_ssh_public_key(line.strip().encode("ascii"))
    except (ValueError, UnsupportedAlgorithm, UnicodeEncodeError):
        raise BadInputError(f"{where}: not an OpenSSH public key (expected 'ssh-ed25519 AAAA...')") from None
    if not isinstance(key, Ed25519PublicKey):
        raise BadInputError(f"{where}: only Ed25519 keys are accepted (ssh-keygen -t ed25519)")
    return key


def _signed_data(namespace: str, hash_algorithm: str, message: bytes) -> bytes:
    digest = HASHES[hash_algorithm](message).digest()
    return MAGIC + _string(namespace.encode()) + _string(b"") + _string(hash_algorithm.encode()) + _string(digest)


def armor(blob: bytes) -> str:
    text = base64.b64encode(blob).decode()
    lines = [text[i:i + 70] for i in range(0, len(text), 70)]
    return "\n".join([BEGIN, *lines, END]) + "\n"


def unarmor(text: str) -> bytes:
    body = text.strip()
    if len(body) > 64 * 1024:
        raise SignatureError("the SSH signature is far too long")
    if not body.startswith(BEGIN) or not body.endswith(END):
        raise SignatureError("not an armored SSH signature (-----BEGIN SSH SIGNATURE-----)")
    inner = "".join(body[len(BEGIN):-len(END)].split())
    try:
        return base64.b64decode(inner, validate=True)
    except ValueError:
        raise SignatureError("the SSH signature is not valid base64") from None


def is_canonical(armored: str) -> bool:
    """``armored`` is exactly what :func:`armor` writes for its blob (70-column lines, one final newline): no
    padding or other bytes beside the signature, which a bundle's signature files must not carry."""
    try:
        return armored == armor(unarmor(armored))
    except SignatureError:
        return False


def sign(key: Ed25519PrivateKey, message: bytes, namespace: str, hash_algorithm: str = "sha512") -> str:
    """The armored SSHSIG ``ssh-keygen -Y sign -n NAMESPACE`` would write for ``message``."""
    signature = key.sign(_signed_data(namespace, hash_algorithm, message))
    blob = (MAGIC + struct.pack(">I", 1) + _string(public_blob(key.public_key())) + _string(namespace.encode())
            + _string(b"") + _string(hash_algorithm.encode()) + _string(_string(KEY_TYPE) + _string(signature)))
    return armor(blob)


def verify(armored: str, messages: list[bytes], namespace: str) -> Verified:
    """Check an armored SSHSIG over one of ``messages`` (equivalent spellings of one value) in ``namespace``.

    Returns the signer's key; raises :class:`SignatureError` naming what is wrong."""
    reader = _Reader(unarmor(armored))
    if reader.take(6) != MAGIC:
        raise SignatureError("not an SSHSIG blob (bad magic)")
    if reader.uint32() != 1:
        raise SignatureError("unsupported SSHSIG version")
    public_key = _key_from_blob(reader.string())
    signed_namespace = reader.string().decode("utf-8", "replace")
    if reader.string():  # reserved: empty as OpenSSH writes it, and not covered by the signature
        raise SignatureError("the SSHSIG reserved field is not empty (it is not signed: nothing may ride in it)")
    hash_algorithm = reader.string().decode("ascii", "replace")
    signature_blob = reader.string()
    if not reader.done():
        raise SignatureError("trailing data after the SSHSIG blob")
    if signed_namespace != namespace:
        raise SignatureError(f"signed for namespace {signed_namespace!r}, expected {namespace!r} "
                             f"(ssh-keygen -Y sign -n {namespace})")
    if hash_algorithm not in HASHES:
        raise SignatureError(f"unsupported hash algorithm {hash_algorithm!r} (sha512 or sha256)")
    sig_reader = _Reader(signature_blob)
    if sig_reader.string() != KEY_TYPE:
        raise SignatureError("the signature is not an ssh-ed25519 signature")
    raw_signature = sig_reader.string()
    if len(raw_signature) != 64 or not sig_reader.done():
        raise SignatureError("malformed ssh-ed25519 signature")
    for message in messages:
        try:
            public_key.verify(raw_signature, _signed_data(namespace, hash_algorithm, message))
        except InvalidSignature:
            continue
        return Verified(public_key=public_key, fingerprint=fingerprint(public_key), namespace=namespace,
                        hash_algorithm=hash_algorithm)
    raise SignatureError("the signature does not match (signed something else, or changed)")


# What an approver does instead of giving the appliance a key it cannot use.
SIGN_ELSEWHERE = "sign with `ssh-keygen -Y sign -n medhelm-export` on your own machine and pass --signature FILE"


def openssh_decryption_available() -> bool:
    """Whether a passphrase-protected OpenSSH key can be decrypted here: cryptography needs the bcrypt package."""
    try:
        import bcrypt  # noqa: F401
    except ImportError:
        return False
    return True


def load_private_key(path: Path, *, otherwise: str = SIGN_ELSEWHERE) -> Ed25519PrivateKey:
    """The signer's own Ed25519 key (OpenSSH or PEM). A passphrase comes from $MEDHELM_KEY_PASSPHRASE or the
    terminal. The key is used in memory for one signature and never written anywhere. (Signing on your own
    machine with ``ssh-keygen -Y sign`` and passing ``--signature`` keeps the key off the appliance entirely.)
    ``otherwise``: what the signer can do where the key cannot be used (a request has no ``--signature``)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInputError(f"--key: cannot read {path} ({exc.strerror})") from None
    openssh = b"OPENSSH PRIVATE KEY" in data
    loader = serialization.load_ssh_private_key if openssh else serialization.load_pem_private_key
    unusable = (f"--key: {path} is not a private key this appliance can use (an Ed25519 key in OpenSSH or PEM "
                "format, with the right passphrase)")
    undecryptable = (f"--key: {path} is a passphrase-protected OpenSSH key, which this appliance cannot decrypt "
                     f"(the Python package bcrypt, which does, is not installed): {otherwise}")
    try:
        try:
            key = loader(data, None)
        except TypeError:  # encrypted: ask for the passphrase
            if openssh and not openssh_decryption_available():  # no passphrase would do: say so before asking
                raise BadInputError(undecryptable) from None
            secret = os.environ.get(PASSPHRASE_ENV)
            if secret is None:
                if not sys.stdin.isatty():
                    raise BadInputError(f"--key: {path} is passphrase-protected: set {PASSPHRASE_ENV}, or "
                                        f"{otherwise}") from None
                secret = getpass.getpass(f"passphrase for {path}: ")
            key = loader(data, secret.encode())
    except UnsupportedAlgorithm:
        raise BadInputError(undecryptable) from None
    except ValueError:
        raise BadInputError(unusable) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BadInputError(f"--key: {path}: only Ed25519 keys are accepted (ssh-keygen -t ed25519)")
    return key
