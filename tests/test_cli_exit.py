"""The installed command ends its process without the interpreter's teardown (``cli.entry``): what it wrote and
what exit handlers do must come out the same, with the same exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Runs the command's entry point as the console script does, with an exit handler and, optionally, a worker thread
# still writing when the command returns.
SCRIPT = textwrap.dedent("""
    import atexit, sys, threading, time
    from pathlib import Path

    marks = Path(sys.argv[1])
    worker = sys.argv[2] == "worker"
    atexit.register(lambda: (marks / "atexit").write_text("ran"))
    if worker:
        def late_write():
            time.sleep(0.3)
            (marks / "worker").write_text("done")
        threading.Thread(target=late_write).start()
    sys.argv = ["medhelm-local", *sys.argv[3:]]
    from medhelm_local.cli import entry
    entry()
""")


def _entry(tmp_path: Path, *args: str, worker: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MEDHELM_DEBUG"} | {"PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), "worker" if worker else "-", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_output_exit_code_and_exit_handlers_survive_the_quick_exit(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = _entry(tmp_path, "--home", str(home), "benchmarks", "list", "--json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)  # the whole document arrived, flushed through the pipe
    assert len(listed) >= 30
    assert (tmp_path / "atexit").read_text() == "ran"


def test_bad_input_keeps_its_exit_code(tmp_path: Path) -> None:
    done = _entry(tmp_path, "--home", str(tmp_path / "home"), "run", "--model", "x", "--benchmarks", ",")
    assert done.returncode == 2
    assert "--benchmarks" in done.stderr
    assert (tmp_path / "atexit").read_text() == "ran"


def test_a_thread_still_working_is_waited_for(tmp_path: Path) -> None:
    done = _entry(tmp_path, "--version", worker=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("medhelm-local ")
    assert (tmp_path / "worker").read_text() == "done"  # the usual exit joined it; a quick exit would have killed it


def test_a_profiled_command_exits_the_usual_way_so_the_profile_is_written(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MEDHELM_DEBUG"} | {"PYTHONPATH": str(REPO)}
    profile = tmp_path / "cli.prof"
    done = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "medhelm_local.cli",
                           "--version"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("medhelm-local ")
    assert profile.stat().st_size > 0


def test_the_console_script_is_the_quick_exit() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert 'medhelm-local = "medhelm_local.cli:entry"' in text


def test_an_interrupted_command_says_its_work_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C or SIGTERM (a KeyboardInterrupt inside the command, which typer turns into exit code 130) ends with
    the message that committed work is kept, not in silence, and not a run's resume hint for a command that is
    not a run (an interrupted run names itself: tests/runner/test_kill_resume.py)."""
    from medhelm_local import cli

    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.AppContext, "create", interrupted)
    monkeypatch.setattr(sys, "argv", ["medhelm-local", "--home", str(tmp_path / "home"), "runs", "list"])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    assert ended.value.code == 130
    said = capsys.readouterr().err
    assert "interrupted; what was already committed is kept" in said and "resume" not in said



# The installed command moves what it imported out of the garbage collector's reach before the command runs: a
# full collection then walks what the command made, not every module, schema and class imported.
FROZEN = textwrap.dedent("""
    import atexit, gc, sys
    from medhelm_local import cli
    seen = []
    command_main = cli.main
    def main():
        seen.append(gc.get_freeze_count())
        command_main()
    cli.main = main
    atexit.register(lambda: sys.stderr.write(f"frozen at start: {seen[0]}\\n"))
    sys.argv = ["medhelm-local", *sys.argv[1:]]
    cli.entry()
""")


def test_the_installed_command_runs_with_its_imports_frozen(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MEDHELM_DEBUG"} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", FROZEN, "--home", str(tmp_path / "home"), "benchmarks", "list",
                           "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) >= 30
    frozen = int(done.stderr.split("frozen at start: ")[1].split()[0])
    assert frozen > 10_000, frozen  # typer, pydantic, the command's modules and what they hold (about 37,000)
