"""The appliance's two secrets: an Ed25519 signing key (audit checkpoints, exports) and the store's data key.

Both are created once with mode 0600 and never overwritten; their bytes never reach a log or an error. A lost
key is never replaced silently while data that needs it exists (``keys recover`` does it, audited).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from medhelm_local.errors import BadInputError, MedhelmError
from medhelm_local.fileio import write_all

SIGNING_KEY_FILE = "signing-ed25519.pem"
PUBLIC_KEY_FILE = "signing-ed25519.pub.pem"
# The name the documents and the CLI's help give the copy of the public key a verifier keeps off the appliance.
VERIFIER_KEY_NAME = "appliance.pub.pem"
VERIFIER_OPENSSH_KEY_NAME = "appliance.pub"  # the same key written by `keys export-public --format openssh`
DATA_KEY_FILE = "store-data.key"
NEW_DATA_KEY_FILE = DATA_KEY_FILE + ".new"  # written by a key rotation before the swap
# The names of the private key files, wherever they lie (Home.appliance_place: never read as data).
SECRET_KEY_FILES = frozenset({SIGNING_KEY_FILE, DATA_KEY_FILE, NEW_DATA_KEY_FILE})


class KeyError_(MedhelmError):
    """A key file is missing, unreadable or too widely readable."""


def write_secret_file(path: Path, data: bytes, mode: int = 0o600) -> bool:
    """Create ``path`` with ``data`` unless it exists. Returns True when created.

    O_EXCL makes a concurrent or repeated init unable to replace an existing key. A write that fails (a full disk)
    removes the file it created: part of a key is no key, and every later init would keep it.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return False
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(path, mode)
    except BaseException as exc:
        path.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # os.write's error names no file
            exc.filename = str(path)
        raise
    return True


class LostKeyError(MedhelmError):
    """A key is missing while data that needs it exists: it is never replaced silently."""


def ensure_keys(keys_dir: Path, *, trail: Path | None = None, store: Path | None = None) -> dict[str, bool]:
    """Create any missing key; report which were created (True) or kept (False).

    A missing signing key is not replaced while ``trail`` holds records, nor a missing data key while the
    ``store`` file exists: a new key would sign or open nothing that is there (every later action refused as an
    invalid signature, or the store unreadable). ``keys recover`` does that explicitly, audited.
    """
    signing_path = keys_dir / SIGNING_KEY_FILE
    data_path = keys_dir / DATA_KEY_FILE
    lost = []
    if not signing_path.exists() and trail is not None and trail.exists() and trail.stat().st_size > 0:
        lost.append(f"the signing key {signing_path} is missing while the audit trail {trail} holds records "
                    "(restore the key from backup, or run `medhelm-local keys recover --signing-key`)")
    if not data_path.exists() and store is not None and store.exists():
        lost.append(f"the store's data key {data_path} is missing while the store {store} exists (restore the "
                    "key from backup, or run `medhelm-local keys recover --data-key`, which sets the unreadable "
                    "store aside)")
    if lost:
        raise LostKeyError("init will not replace a lost key: " + "; ".join(lost))
    created: dict[str, bool] = {}
    public_path = keys_dir / PUBLIC_KEY_FILE
    if signing_path.exists():
        created[SIGNING_KEY_FILE] = False
    else:
        created[SIGNING_KEY_FILE] = write_secret_file(signing_path, new_signing_key_pem())
        if created[SIGNING_KEY_FILE]:
            public_path.unlink(missing_ok=True)  # a public key left from a lost private key is not this key's
    created[PUBLIC_KEY_FILE] = write_secret_file(public_path, public_key_pem(load_signing_key(keys_dir)))
    created[DATA_KEY_FILE] = write_secret_file(data_path, new_data_key())
    return created


def new_signing_key_pem() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_key_pem(private: Ed25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def new_data_key() -> bytes:
    return secrets.token_hex(32).encode("ascii")


def _read_private(path: Path) -> bytes:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise KeyError_(f"{path}: key file missing; run `medhelm-local init`") from None
    if st.st_mode & 0o077:
        raise KeyError_(f"{path}: key file is readable by group or others (mode {st.st_mode & 0o777:o}); "
                        "expected 0600")
    return path.read_bytes()


def load_signing_key(keys_dir: Path) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(_read_private(keys_dir / SIGNING_KEY_FILE), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyError_(f"{keys_dir / SIGNING_KEY_FILE}: expected an Ed25519 private key")
    return key


PUBLIC_KEY_FORMATS = ("a PEM public key (-----BEGIN PUBLIC KEY-----, as `keys export-public` writes it) or an "
                      "OpenSSH one (ssh-ed25519 AAAA...)")
_PUBLIC_KEY_MAX_BYTES = 16 * 1024  # either form is well under 1 KiB


def load_public_key(path: Path, *, given_as: str | None = None) -> Ed25519PublicKey:
    """The appliance's Ed25519 public key from ``path``, in either form a verifier may hold it: PEM
    (SubjectPublicKeyInfo) or OpenSSH (``ssh-ed25519 AAAA... comment``). The one reader of a public key file.

    ``given_as``: the option or variable a verifier named the file with (``--public-key``); a problem with it is then
    bad input (exit 2). Without it, the file is the home's own key, and a problem with it is the appliance's
    (exit 1). Messages name the file and the forms accepted, never its content: a private key given by mistake is
    refused as one."""
    name = f"{given_as}: {path}" if given_as else str(path)
    error = BadInputError if given_as else KeyError_
    try:
        with path.open("rb") as handle:
            data = handle.read(_PUBLIC_KEY_MAX_BYTES + 1)
    except FileNotFoundError:
        raise error(f"{name}: public key file not found") from None
    except OSError as exc:
        raise error(f"{name}: cannot read the public key file ({exc.strerror})") from None
    if b"PRIVATE KEY-----" in data:
        raise error(f"{name}: this is a private key, not a public key; give {PUBLIC_KEY_FORMATS}, and keep the private "
                    "key where it was (nothing of it was shown or kept)")
    key: object = None
    if len(data) <= _PUBLIC_KEY_MAX_BYTES:
        try:
            if data.lstrip().startswith(b"-----BEGIN"):
                key = serialization.load_pem_public_key(data)
            else:
                key = serialization.load_ssh_public_key(data.strip())
        except (ValueError, TypeError, UnsupportedAlgorithm):
            key = None
    if key is None:
        raise error(f"{name}: not a public key file; expected {PUBLIC_KEY_FORMATS}")
    if not isinstance(key, Ed25519PublicKey):
        raise error(f"{name}: a public key of another type; expected an Ed25519 key ({PUBLIC_KEY_FORMATS})")
    return key


def load_data_key(keys_dir: Path) -> str:
    key = _read_private(keys_dir / DATA_KEY_FILE).decode("ascii").strip()
    if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
        raise KeyError_(f"{keys_dir / DATA_KEY_FILE}: expected 64 hex characters")
    return key
