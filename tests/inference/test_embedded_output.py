"""The embedded llama.cpp server's output never reaches the disk: a request it rejects is logged with its
messages (patient text), so the output is read from a pipe and kept, in memory, only until the server answers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx
import pytest

from medhelm_local.inference import embedded
from medhelm_local.inference.embedded import EmbeddedServer, EmbeddedServerError

MARKER = "PHIMARKER-58213 Ada Quillonby MRN 7730019942"


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and needle in path.read_bytes():
                found.append(path)
        except OSError:
            continue
    return found


def test_a_rejected_request_leaves_no_patient_text_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(embedded.tempfile, "tempdir", None)  # the server's private folder goes under tmp_path
    with EmbeddedServer(n_ctx=512) as server:
        assert server._workdir is not None and server._workdir.is_relative_to(tmp_path)
        # A role the server does not know: it rejects the request and logs it, messages included.
        reply = httpx.post(f"{server.base_url}/chat/completions", timeout=30,
                           headers={"Authorization": f"Bearer {server.api_key}"},
                           json={"model": "m", "messages": [{"role": "surgeon", "content": MARKER}]})
        assert reply.status_code >= 400
        ok = httpx.post(f"{server.base_url}/chat/completions", timeout=60,
                        headers={"Authorization": f"Bearer {server.api_key}"},
                        json={"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": MARKER}]})
        assert ok.status_code == 200  # still serving: its output is drained, never blocks
        assert _files_holding(tmp_path, MARKER.encode()) == []
        assert not list(server._startup_output)  # nothing kept once it answered
    assert _files_holding(tmp_path, MARKER.encode()) == []


def test_a_server_that_fails_to_start_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The startup output's last lines are still the error's (read from the pipe, not a file)."""
    def failing(*_args: object) -> list[str]:
        return [sys.executable, "-c", "import sys; print('loading model'); print('error: no such GGUF file'); "
                "sys.exit(3)"]

    monkeypatch.setattr(embedded, "server_command", failing)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(embedded.tempfile, "tempdir", None)
    with pytest.raises(EmbeddedServerError, match=r"code 3\): loading model \| error: no such GGUF file"):
        EmbeddedServer(startup_timeout_s=30).start()
    assert os.listdir(tmp_path) == []  # its private folder is gone
