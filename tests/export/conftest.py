"""The compliance package's evaluated home (one finished run, the site's export policy outside the home) and its
policy-environment reset, for the export tests."""

from tests.compliance.conftest import _export_policy_env, evaluated

__all__ = ["_export_policy_env", "evaluated"]
