"""SIGTERM ends a command as Ctrl-C does, even when it lands where a raised KeyboardInterrupt would be lost."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# An event loop whose work runs finalizers (as a run's does: closed transports, dropped buffers). The signal
# arrives while one runs: a KeyboardInterrupt raised there is printed and dropped by Python, and the loop goes on.
SCRIPT = textwrap.dedent("""
    import asyncio, os, signal, sys, time
    from medhelm_local import cli

    handler = {"appliance": cli._terminate_as_ctrl_c, "default_int": signal.default_int_handler}[sys.argv[1]]
    signal.signal(signal.SIGTERM, handler)

    class Finalized:
        def __init__(self, signal_now):
            self.signal_now = signal_now

        def __del__(self):
            if self.signal_now:
                os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.perf_counter() + 0.005
            while time.perf_counter() < deadline:
                pass

    async def work():
        for step in range(400):
            Finalized(signal_now=step == 20)
            await asyncio.sleep(0)
        return "finished"

    try:
        print(asyncio.run(work()))
    except KeyboardInterrupt:
        print("interrupted")
""")


def _ended_by_sigterm(handler: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, handler], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_sigterm_inside_a_finalizer_still_interrupts_the_event_loop() -> None:
    assert _ended_by_sigterm("appliance") == "interrupted"


def test_the_interpreter_default_loses_that_signal() -> None:
    """Why the appliance has its own handler: with Python's Ctrl-C handler on SIGTERM the same script finishes."""
    assert _ended_by_sigterm("default_int") == "finished"
