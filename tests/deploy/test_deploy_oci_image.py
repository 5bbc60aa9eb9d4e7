"""deploy/oci-image.py: the image-integrity check of AIRGAP.md (issue 15 item 13) and the build-time SBOM
extraction (item 17), on OCI archives laid out as `docker buildx build --sbom=true -o type=oci` writes them."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from deploykit import REPO

SCRIPT = REPO / "deploy" / "oci-image.py"


def _descriptor(media: str, data: bytes, **extra: Any) -> dict[str, Any]:
    return {"mediaType": media, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data), **extra}


def build_archive(path: Path, *, sbom: bool = True, tamper: str | None = None, drop: str | None = None) -> str:
    """A BuildKit-style OCI archive: index.json -> image index -> (image manifest, attestation manifest)."""
    blobs: dict[str, bytes] = {}

    def put(data: bytes) -> None:
        blobs[hashlib.sha256(data).hexdigest()] = data

    layer = b"layer: the root filesystem" * 100
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers"}}).encode()
    put(layer)
    put(config)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": _descriptor("application/vnd.oci.image.config.v1+json", config),
        "layers": [_descriptor("application/vnd.oci.image.layer.v1.tar+gzip", layer)],
    }).encode()
    put(manifest)
    image_desc = _descriptor("application/vnd.oci.image.manifest.v1+json", manifest,
                             platform={"architecture": "amd64", "os": "linux"})
    manifests = [image_desc]
    if sbom:
        subject = {"name": "pkg:docker/medhelm-local", "digest": {"sha256": image_desc["digest"][7:]}}
        statement = json.dumps({"_type": "https://in-toto.io/Statement/v0.1",
                                "predicateType": "https://spdx.dev/Document", "subject": [subject],
                                "predicate": {"spdxVersion": "SPDX-2.3", "name": "sbom", "packages": [
                                    {"name": "vllm", "versionInfo": "0.31.0"}]}}).encode()
        att_config = b"{}"
        put(statement)
        put(att_config)
        att_manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": _descriptor("application/vnd.oci.image.config.v1+json", att_config),
            "layers": [_descriptor("application/vnd.in-toto+json", statement,
                                   annotations={"in-toto.io/predicate-type": "https://spdx.dev/Document"})],
        }).encode()
        put(att_manifest)
        manifests.append(_descriptor("application/vnd.oci.image.manifest.v1+json", att_manifest,
                                     platform={"architecture": "unknown", "os": "unknown"},
                                     annotations={"vnd.docker.reference.digest": image_desc["digest"],
                                                  "vnd.docker.reference.type": "attestation-manifest"}))
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": manifests}).encode()
    put(index)
    top = json.dumps({"schemaVersion": 2, "manifests": [_descriptor(
        "application/vnd.oci.image.index.v1+json", index,
        annotations={"org.opencontainers.image.ref.name": "0.1.0-gpu"})]}).encode()
    if tamper == "layer":
        blobs[hashlib.sha256(layer).hexdigest()] = layer[:-1] + b"X"
    if drop == "config":
        del blobs[hashlib.sha256(config).hexdigest()]
    with tarfile.open(path, "w") as tar:
        members = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}', "index.json": top}
        members |= {f"blobs/sha256/{h}": d for h, d in blobs.items()}
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return "sha256:" + hashlib.sha256(index).hexdigest()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


def test_digest_and_sbom_of_a_buildkit_archive(tmp_path: Path) -> None:
    archive = tmp_path / "medhelm-local-0.1.0-gpu.oci.tar"
    digest = build_archive(archive)
    proc = run(str(archive), "--sbom-dir", str(tmp_path / "sbom"), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # The digest is the image index's: what `skopeo copy --all --preserve-digests` pushes and the chart pins.
    assert out["digest"] == digest and out["blobs_verified"] == 7
    assert out["sboms"] == ["linux-amd64"]
    sbom = json.loads((tmp_path / "sbom" / "medhelm-local-0.1.0-gpu.linux-amd64.spdx.json").read_text())
    assert sbom["spdxVersion"] == "SPDX-2.3" and sbom["packages"][0]["name"] == "vllm"
    text = run(str(archive))
    assert text.returncode == 0 and text.stdout.startswith(digest)


@pytest.mark.parametrize("damage", ["tamper", "drop"])
def test_an_altered_archive_is_refused(tmp_path: Path, damage: str) -> None:
    archive = tmp_path / "image.oci.tar"
    if damage == "tamper":
        build_archive(archive, tamper="layer")
        message = "does not match its digest"
    else:
        build_archive(archive, drop="config")
        message = "missing from the archive"
    proc = run(str(archive))
    assert proc.returncode == 1 and message in proc.stderr


def test_a_missing_sbom_fails_when_one_is_asked_for(tmp_path: Path) -> None:
    archive = tmp_path / "image.oci.tar"
    build_archive(archive, sbom=False)
    assert run(str(archive)).returncode == 0
    proc = run(str(archive), "--sbom-dir", str(tmp_path / "sbom"))
    assert proc.returncode == 1 and "--sbom=true" in proc.stderr


def test_airgap_and_images_use_the_check_and_build_sboms() -> None:
    """The documented procedure builds OCI archives with SBOMs, checks them with this script at both ends, and
    pushes with preserved digests; the old `skopeo inspect --config | sha256sum` comparison is gone."""
    airgap = (REPO / "deploy" / "AIRGAP.md").read_text(encoding="utf-8")
    images = (REPO / "deploy" / "IMAGES.md").read_text(encoding="utf-8")
    assert "inspect --config" not in airgap
    for target in ("cpu", "gpu"):
        assert f"--target {target} --sbom=true" in airgap
        assert f"oci-image.py medhelm-local-0.1.0-{target}.oci.tar" in airgap
    assert "skopeo copy --all --preserve-digests oci-archive:" in airgap
    assert "--sbom=true" in images and "oci-image.py" in images
