"""Package data shipped with medhelm-local."""
