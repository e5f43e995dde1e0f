"""Command-line programs, installed as `tff_priv_scripts` (pyproject.toml)."""
