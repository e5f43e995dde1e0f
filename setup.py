"""tff_priv's build: the metadata is in pyproject.toml (PEP 621)."""

import setuptools

setuptools.setup()
