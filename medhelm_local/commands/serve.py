"""``serve``: model servers managed by the appliance."""

from __future__ import annotations

import typer

from medhelm_local.commands import NotBuiltYet

NAME = "serve"
HELP = "Start local model servers (vLLM on a GPU host)."
app = typer.Typer(no_args_is_help=True)


@app.command("vllm")
def vllm() -> None:
    """Serve local weights with vLLM, offline, prompts never logged."""
    raise NotBuiltYet("`serve vllm`", 4)
