"""The embedded llama.cpp server's API key: never on its command line, whatever its first character."""

from __future__ import annotations

from pathlib import Path

import httpx

from medhelm_local.inference.embedded import EmbeddedServer


def test_a_key_starting_with_a_dash_starts_the_server_and_stays_off_its_command_line() -> None:
    server = EmbeddedServer(n_ctx=512)
    server.api_key = "-Kx3dash-first_key_that_argparse_took_for_an_option"  # 1 start in 64 drew such a key
    with server:
        assert server._proc is not None
        command_line = Path(f"/proc/{server._proc.pid}/cmdline").read_bytes()
        assert server.api_key.encode() not in command_line
        url = f"{server.base_url}/models"
        assert httpx.get(url, headers={"Authorization": f"Bearer {server.api_key}"}, timeout=30).status_code == 200
        assert httpx.get(url, headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401
        assert httpx.get(url, timeout=30).status_code == 401
