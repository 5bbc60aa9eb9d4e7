"""Loaders read a benchmark's native files (or a hospital extract) into validated instances."""

from medhelm_local.loaders.base import LoadResult, load_dataset, register_loader

__all__ = ["LoadResult", "load_dataset", "register_loader"]
