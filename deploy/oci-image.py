#!/usr/bin/env python3
"""Check an OCI image archive end to end and extract its build-time SBOMs (deploy/AIRGAP.md, steps 1 and 3).

    python3 oci-image.py IMAGE.oci.tar [--sbom-dir DIR] [--json]

The archive is what `docker buildx build --sbom=true -o type=oci,dest=IMAGE.oci.tar` writes. Every blob the
image references (index, manifests, configs, layers, attestations) is read and its sha256 compared with the
digest that names it, so one digest, the image's, vouches for every byte. Prints that digest: record it in the
change ticket on the build host; at the site it must be the same, and after
`skopeo copy --all --preserve-digests` it is the digest the registry serves and the chart pins.

With --sbom-dir, each SPDX SBOM that BuildKit attached (an in-toto attestation per platform) is written there
as IMAGE.<platform>.spdx.json. Exit 0 only if every blob matches (and, with --sbom-dir, at least one SBOM
exists).
Standard library only: it runs on an admin workstation without the appliance.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

INDEX_TYPES = {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}
MANIFEST_TYPES = {"application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json"}
SPDX = "https://spdx.dev/Document"


class ArchiveError(Exception):
    pass


class Archive:
    def __init__(self, path: Path) -> None:
        self.tar = tarfile.open(path)  # noqa: SIM115 - closed by close()
        self.checked: set[str] = set()

    def close(self) -> None:
        self.tar.close()

    def member(self, name: str) -> bytes:
        try:
            f = self.tar.extractfile(name)
        except KeyError:
            f = None
        if f is None:
            raise ArchiveError(f"{name} is missing from the archive")
        with f:
            return f.read()

    def blob(self, digest: str, size: int | None = None) -> bytes:
        algorithm, _, hexdigest = digest.partition(":")
        if algorithm != "sha256" or len(hexdigest) != 64:
            raise ArchiveError(f"unsupported digest {digest!r}")
        data = self.member(f"blobs/sha256/{hexdigest}")
        if hashlib.sha256(data).hexdigest() != hexdigest:
            raise ArchiveError(f"blob {digest} does not match its digest: the archive was altered")
        if size is not None and len(data) != size:
            raise ArchiveError(f"blob {digest} has {len(data)} bytes, its descriptor says {size}")
        self.checked.add(digest)
        return data

    def walk(self, descriptor: dict[str, Any], sboms: dict[str, Any], platform: str = "") -> None:
        data = self.blob(descriptor["digest"], descriptor.get("size"))
        media = descriptor.get("mediaType", "")
        if media in INDEX_TYPES:
            index = json.loads(data)
            platforms = {m["digest"]: _platform(m) for m in index.get("manifests", [])}
            for m in index.get("manifests", []):
                annotations = m.get("annotations") or {}
                subject = annotations.get("vnd.docker.reference.digest")
                self.walk(m, sboms, platforms.get(subject, "") if subject else _platform(m))
        elif media in MANIFEST_TYPES:
            manifest = json.loads(data)
            self.blob(manifest["config"]["digest"], manifest["config"].get("size"))
            for layer in manifest.get("layers", []):
                content = self.blob(layer["digest"], layer.get("size"))
                predicate = (layer.get("annotations") or {}).get("in-toto.io/predicate-type")
                if predicate == SPDX:
                    statement = json.loads(content)
                    sboms[platform or "unknown"] = statement["predicate"]


def _platform(descriptor: dict[str, Any]) -> str:
    p = descriptor.get("platform") or {}
    parts = [p.get("os", ""), p.get("architecture", ""), p.get("variant", "")]
    return "-".join(x for x in parts if x and x != "unknown")


def check(path: Path) -> tuple[str, dict[str, Any], int]:
    """The image's digest, its SBOMs by platform, and how many blobs were verified."""
    archive = Archive(path)
    try:
        layout = json.loads(archive.member("oci-layout"))
        if layout.get("imageLayoutVersion") != "1.0.0":
            raise ArchiveError("not an OCI image layout (oci-layout)")
        top = json.loads(archive.member("index.json"))
        manifests = top.get("manifests", [])
        if len(manifests) != 1:
            raise ArchiveError(f"index.json names {len(manifests)} images; expected exactly one")
        sboms: dict[str, Any] = {}
        archive.walk(manifests[0], sboms)
        return manifests[0]["digest"], sboms, len(archive.checked)
    finally:
        archive.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archive", type=Path)
    parser.add_argument("--sbom-dir", type=Path, help="write each platform's SPDX SBOM here")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    try:
        digest, sboms, blobs = check(args.archive)
    except (ArchiveError, OSError, tarfile.TarError, json.JSONDecodeError, KeyError) as exc:
        print(f"oci-image: {args.archive}: {exc}", file=sys.stderr)
        return 1
    written = []
    if args.sbom_dir is not None:
        if not sboms:
            print(f"oci-image: {args.archive}: no SPDX SBOM attached (build with --sbom=true)", file=sys.stderr)
            return 1
        args.sbom_dir.mkdir(parents=True, exist_ok=True)
        stem = args.archive.name.removesuffix(".tar").removesuffix(".oci")
        for platform, document in sorted(sboms.items()):
            target = args.sbom_dir / f"{stem}.{platform}.spdx.json"
            target.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            written.append(str(target))
    if args.json:
        print(json.dumps({"digest": digest, "blobs_verified": blobs, "sboms": sorted(sboms), "written": written}))
    else:
        print(f"{digest}  {args.archive.name}  ({blobs} blobs verified; SBOMs: {', '.join(sorted(sboms)) or 'none'})")
        for path in written:
            print(f"  wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
