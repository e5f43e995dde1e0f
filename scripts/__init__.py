"""The command-line programs, installed as `tff_priv_scripts` (console entry points in pyproject.toml)."""
