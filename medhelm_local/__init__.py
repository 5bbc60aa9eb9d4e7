"""medhelm-local: MedHELM-style evaluation of LLMs inside a hospital's PHI-compliant network."""

import sys

__version__ = "0.1.0"

# httpx's package imports its own command line (``httpx._main``: click, pygments' lexers, rich.syntax: 14-21 ms of
# every command's start, bench/README.md) wherever click is installed, and uvicorn, which the console needs,
# installs it. No code here runs httpx's command line (a separate program), so this package's processes skip it:
# httpx then defines its ``main`` as a message that its dependencies are missing. Only where httpx is not imported
# yet, and nothing else is held back (click itself imports as usual, for uvicorn).
if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
