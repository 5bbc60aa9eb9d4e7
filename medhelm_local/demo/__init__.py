"""``medhelm-local demo``: the whole pipeline, offline, on the embedded smoke-test model."""
