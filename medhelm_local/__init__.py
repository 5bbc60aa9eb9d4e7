"""medhelm-local: MedHELM-style evaluation of LLMs inside a hospital's PHI-compliant network."""

__version__ = "0.1.0"
