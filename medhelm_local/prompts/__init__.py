"""Turning an instance and its benchmark's template into chat messages."""

from medhelm_local.prompts.build import build_request, template_hash

__all__ = ["build_request", "template_hash"]
