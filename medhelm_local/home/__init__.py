"""The appliance home: configuration, keys and where every file lives."""

from medhelm_local.home.config import ApplianceConfig, ModelEndpoint
from medhelm_local.home.layout import Home, resolve_home

__all__ = ["ApplianceConfig", "Home", "ModelEndpoint", "resolve_home"]
