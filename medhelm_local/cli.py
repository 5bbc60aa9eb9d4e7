"""The ``medhelm-local`` command line: thin over the pipeline's packages."""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import NoReturn

import typer

from medhelm_local import __version__
from medhelm_local.console import error
from medhelm_local.context import AppContext
from medhelm_local.errors import Interrupted, MedhelmError
from medhelm_local.logs import configure_logging

PRIVATE_UMASK = 0o077
INTERRUPTED = Interrupted.exit_code  # the exit code of a command ended by Ctrl-C or SIGTERM (128 + SIGINT)

app = typer.Typer(
    name="medhelm-local",
    help="Evaluate LLMs on clinical work, MedHELM-style, without patient data leaving the network.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help, as click writes it: rich's boxes and its "<bool>" beside every flag (which takes no value) are
    # noise where help is piped, grepped or read by a screen reader.
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"medhelm-local {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    home: Path | None = typer.Option(
        None, "--home", help="Appliance home directory (default: $MEDHELM_HOME, else ~/.medhelm)."
    ),
    actor: str | None = typer.Option(
        None, "--actor", help="Who is acting, for the audit trail, e.g. an OIDC subject (env: MEDHELM_ACTOR)."
    ),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show version."),
) -> None:
    os.umask(PRIVATE_UMASK)
    configure_logging()
    ctx.obj = AppContext.create(home, actor)


# Command name -> module in medhelm_local.commands, in the order `--help` lists them. Modules with
# ``register(app)`` add top-level commands; the others are groups (``NAME``, ``HELP``, ``app``).
COMMAND_MODULES = {
    "init": "init", "doctor": "init", "demo": "demo", "run": "run", "score": "score",
    "leaderboard": "leaderboard", "models": "models", "benchmarks": "benchmarks", "datasets": "datasets",
    "taxonomy": "taxonomy", "audit": "audit", "export": "export", "serve": "serve", "keys": "keys",
    "jury": "jury", "runs": "runs",
}
_GLOBAL_OPTIONS_WITH_VALUE = {"--home", "--actor"}


def _requested_command(argv: list[str]) -> str | None:
    """The command named on the command line, skipping the global options before it."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _GLOBAL_OPTIONS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def register_commands(only: str | None = None) -> None:
    """Import and register the requested command's module only (each brings heavy libraries: numpy,
    pyarrow, duckdb ...); without a known command, all of them, for `--help` and usage errors."""
    names = [COMMAND_MODULES[only]] if only in COMMAND_MODULES else list(dict.fromkeys(COMMAND_MODULES.values()))
    for name in names:
        if name in _registered:
            continue
        _registered.add(name)
        module = importlib.import_module(f"medhelm_local.commands.{name}")
        if hasattr(module, "NAME"):
            app.add_typer(module.app, name=module.NAME, help=module.HELP)
        else:
            module.register(app)


_registered: set[str] = set()


def _terminate_as_ctrl_c(signum: int, frame: FrameType | None) -> None:
    """Handle SIGTERM with whatever handles Ctrl-C now. Inside ``asyncio.run`` that is asyncio's own handler, which
    cancels the main task and never raises here: a KeyboardInterrupt raised at an arbitrary point of the event
    loop could land in a finalizer, where Python prints and drops it, and the run would go on."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:  # SIGINT ignored (a background job of a script) or default: still end as an interruption
        raise KeyboardInterrupt


def main() -> None:
    # Everything the appliance writes (store, WAL, spill files, audit state, exports, reports, keys) is
    # 0600/0700, whatever the caller's umask; DuckDB creates its files with 0666 & ~umask.
    os.umask(PRIVATE_UMASK)
    # SIGTERM (what Kubernetes and `docker stop` send first) ends a command as Ctrl-C does: a run commits the
    # answers it holds, is marked interrupted and audited. Python's default would end the process at once, like
    # kill -9 (`serve` commands install their own handlers).
    signal.signal(signal.SIGTERM, _terminate_as_ctrl_c)
    register_commands(_requested_command(sys.argv[1:]))
    try:
        # Without standalone mode, click returns (not raises) the code of a typer.Exit.
        code = app(standalone_mode=False)
        if code == INTERRUPTED:  # typer turns a KeyboardInterrupt (Ctrl-C, SIGTERM) into this code, silently
            raise KeyboardInterrupt
        if isinstance(code, int) and code:
            sys.exit(code)
    except MedhelmError as exc:
        error(str(exc))
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        error("aborted")
        sys.exit(1)
    except KeyboardInterrupt:
        error("interrupted; what was already committed is kept")
        sys.exit(INTERRUPTED)
    except Exception as exc:
        # Usage errors (typer vendors its own click) know how to show themselves and carry exit code 2.
        show = getattr(exc, "show", None)
        if callable(show) and isinstance(getattr(exc, "exit_code", None), int):
            show()
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        # Unexpected: report the type only; the message or traceback could carry patient text.
        error(f"internal error ({type(exc).__name__}); set MEDHELM_DEBUG=1 to see the traceback")
        if _debug():
            raise
        sys.exit(1)


def _debug() -> bool:
    return os.environ.get("MEDHELM_DEBUG") == "1"


def entry() -> NoReturn:
    """The installed ``medhelm-local`` command: :func:`main`, then the process ends as soon as its work is done.

    Python's own exit would then tear the interpreter down, module by module (pydantic's models, DuckDB, httpcore,
    rich ...): 0.1 to 0.17 s per command on this project's machine (bench/README.md), freeing nothing the operating
    system does not. Everything the command wrote is committed and closed by then (the store, the audit trail,
    exports); exit handlers (logging's flush, temporary files' cleanup) still run, and the output is flushed. A
    command that leaves a worker thread running, ``MEDHELM_DEBUG=1``, or a process under a profiler or tracer
    (``python -m cProfile`` writes its file after the command returns) exits the usual way."""
    register_commands(_requested_command(sys.argv[1:]))
    # What the command imported lives as long as the process: out of the collector's reach, the one full collection
    # a command's start used to trigger (about 20 ms walking the modules, pydantic's schemas ...) has nothing to walk.
    gc.freeze()
    try:
        main()
        code = 0
    except SystemExit as exc:
        if isinstance(exc.code, str):  # sys.exit("message"): Python prints it and exits 1
            sys.stderr.write(exc.code + "\n")
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    workers = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if workers or _debug() or sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe (``| head``): Python's own exit reports it with 120
        code = code or 120
    os._exit(code)


if __name__ == "__main__":
    entry()
