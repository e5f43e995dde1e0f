"""Shared pytest fixtures: the TFF execution context every test runs in."""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import pytest  # pylint: disable=g-import-not-at-top

from tff_priv import runtime  # pylint: disable=g-import-not-at-top


@pytest.fixture(scope='session', autouse=True)
def tff_runtime():
  """TFF's simulation context for the whole session; its worker is stopped at the end."""
  runtime.set_context('simulation')
  yield
  runtime.stop_workers()
