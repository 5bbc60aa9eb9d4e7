"""The ``medhelm-local`` command line: thin over the pipeline's packages."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from medhelm_local import __version__
from medhelm_local.benchmarks.registry import set_active_home
from medhelm_local.commands import (
    audit,
    benchmarks,
    datasets,
    demo,
    export,
    init,
    jury,
    keys,
    leaderboard,
    models,
    run,
    runs,
    score,
    serve,
    taxonomy,
)
from medhelm_local.console import error
from medhelm_local.context import AppContext
from medhelm_local.errors import MedhelmError
from medhelm_local.logs import configure_logging

app = typer.Typer(
    name="medhelm-local",
    help="Evaluate LLMs on clinical work, MedHELM-style, without patient data leaving the network.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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
    configure_logging()
    ctx.obj = AppContext.create(home, actor)
    # Benchmarks a team defined in this home (bring-your-own-extract YAML) resolve like built-in ones.
    set_active_home(ctx.obj.home.root)


for module in (init, demo, run, score, leaderboard):
    module.register(app)
for module in (models, benchmarks, datasets, taxonomy, audit, export, serve, keys, jury):
    app.add_typer(module.app, name=module.NAME, help=module.HELP)
app.add_typer(runs.app, name=runs.NAME, help=runs.HELP)


def main() -> None:
    try:
        # Without standalone mode, click returns (not raises) the code of a typer.Exit.
        code = app(standalone_mode=False)
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
        error("interrupted; completed work is saved and the run can be resumed")
        sys.exit(130)
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
    import os

    return os.environ.get("MEDHELM_DEBUG") == "1"


if __name__ == "__main__":
    main()
