"""The reproducibility manifest of a run: exactly what was evaluated, with what, and how.

Stored with the run (``runs.manifest``); :func:`manifest_sha256` is the hash that exports carry. Nothing in a
manifest is patient data: versions, hashes, ids, URLs and parameters only.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from medhelm_local import __version__
from medhelm_local.home.config import ApplianceConfig, ModelEndpoint
from medhelm_local.store import runs as runs_db
from medhelm_local.store.store import Store

MANIFEST_VERSION = 1
_HASH_CHUNK = 4 * 1024 * 1024


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str).encode()


def manifest_sha256(manifest: Mapping[str, Any]) -> str:
    """sha256 of the manifest's canonical JSON (sorted keys, no whitespace): stable across machines."""
    return hashlib.sha256(canonical_json(dict(manifest))).hexdigest()


def config_sha256(config: ApplianceConfig) -> str:
    # The config holds no secrets (only the names of variables and files that do).
    return hashlib.sha256(canonical_json(config.model_dump(mode="json"))).hexdigest()


def git_commit() -> str | None:
    """The appliance's git commit, read from ``.git`` next to the package or ``$MEDHELM_GIT_COMMIT``; never fails."""
    env = os.environ.get("MEDHELM_GIT_COMMIT")
    if env:
        return env
    try:
        git_dir = Path(__file__).resolve().parents[2] / ".git"
        head = (git_dir / "HEAD").read_text(encoding="ascii").strip()
        if not head.startswith("ref: "):
            return head or None
        ref = head[5:]
        ref_file = git_dir / ref
        if ref_file.is_file():
            return ref_file.read_text(encoding="ascii").strip() or None
        packed = git_dir / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="ascii").splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    except (OSError, UnicodeDecodeError, IndexError):
        return None
    return None


def package_versions() -> dict[str, str]:
    """Every installed distribution and its version, sorted by name.

    Read from the top of each distribution's METADATA (or PKG-INFO) file, where ``Name`` and ``Version`` are
    single-line headers: the same values as ``dist.metadata``, which parses every header of every file with the
    email parser (a fifth of a second for the 118 distributions of this project's venv, once per run)."""
    versions: dict[str, str] = {}
    for dist in metadata.distributions():
        name, version = _name_and_version(dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "")
        if name and version is not None:
            versions[name.lower()] = version
    return dict(sorted(versions.items()))


def _name_and_version(text: str) -> tuple[str | None, str | None]:
    name = version = None
    for line in text.splitlines():
        if not line:  # the end of the headers
            break
        if name is None and line.startswith("Name:"):
            name = line[len("Name:"):].strip()
        elif version is None and line.startswith("Version:"):
            version = line[len("Version:"):].strip()
    return name, version


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def weights_fingerprint(store: Store, weights_path: Path) -> dict[str, Any]:
    """sha256 of every file under ``weights_path`` (or of the file itself) and one hash over all of them.

    Each file is hashed once: the result is cached in the store by absolute path, size and mtime.
    """
    root = weights_path.expanduser().resolve()
    if root.is_file():
        files = [root]
    elif root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    else:
        return {"path": str(root), "error": "not_found"}
    entries = []
    for file in files:
        stat = file.stat()
        cached = runs_db.cached_weight_hash(store, str(file), stat.st_size, stat.st_mtime_ns)
        if cached is None:
            store.release()  # hashing weights can take minutes: not while holding the store's lock
        sha = cached or _file_sha256(file)
        if cached is None:
            runs_db.remember_weight_hash(store, str(file), stat.st_size, stat.st_mtime_ns, sha)
        rel = file.name if root.is_file() else str(file.relative_to(root))
        entries.append({"file": rel, "size": stat.st_size, "sha256": sha})
    overall = hashlib.sha256("".join(f"{e['sha256']}  {e['file']}\n" for e in entries).encode()).hexdigest()
    return {"path": str(root), "files": entries, "sha256": overall}


def model_identity(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What must not change between the sessions of one run: served model, weights, server versions."""
    model = manifest.get("model", {})
    weights = model.get("weights") or {}
    return {
        "served_model": model.get("served_model"),
        "weights_sha256": weights.get("sha256"),
        "server_versions": sorted({str(s.get("version")) for s in model.get("servers", []) if s.get("version")}),
    }


def build_manifest(*, config: ApplianceConfig, endpoint: ModelEndpoint, servers: list[dict[str, Any]],
                   weights: dict[str, Any] | None, datasets: dict[str, Any], seed: int, max_instances: int | None,
                   order_mode: str, decoding: dict[str, Any], prompt_style: dict[str, Any] | None = None,
                   specs: dict[str, Any] | None = None, context: dict[str, Any] | None = None) -> dict[str, Any]:
    """``prompt_style``: the style's name and per-benchmark hash (``prompts.styles.manifest_entry``); ``specs``:
    the run's frozen specs and their hashes (``prompts.styles.manifest_specs``), covered by the manifest's hash;
    ``context``: the context length prompts are fitted into and how tokens are counted
    (``runner.fitting.context_entry``)."""
    return {
        "manifest_version": MANIFEST_VERSION,
        "appliance": {"version": __version__, "git_commit": git_commit()},
        "config_sha256": config_sha256(config),
        "model": {
            "name": endpoint.name, "kind": endpoint.kind.value, "served_model": endpoint.model_id,
            "servers": servers, "weights": weights,
        },
        "datasets": datasets,
        "decoding": decoding,
        "prompt_style": prompt_style or {"name": "default"},
        "seeds": {"sampling": seed, "decoding": seed},
        "max_instances": max_instances,
        "order": order_mode,
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation()},
        "packages": package_versions(),
        **(specs or {}),
        **({"context": context} if context is not None else {}),
    }
