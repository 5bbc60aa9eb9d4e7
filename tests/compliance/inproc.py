"""Running the CLI in this process (fast), with the same exit-code handling as the installed command."""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import CliResult


@dataclass
class InProcessCli:
    home: Path

    def __call__(self, *args: str) -> CliResult:
        from medhelm_local.cli import main

        out, err = io.StringIO(), io.StringIO()
        argv = sys.argv
        sys.argv = ["medhelm-local", "--home", str(self.home), *args]
        code = 0
        try:
            with redirect_stdout(out), redirect_stderr(err):
                main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.argv = argv
        return CliResult(code, out.getvalue(), err.getvalue())
