"""Tests for accounting.events: the tree's sensitivity in dp_accounting."""

import dp_accounting
import numpy as np
import pytest

from tff_priv.accounting import events


def test_tree_sensitivity_is_complete_levels():
  # A leaf of a tree of n leaves lies in one complete node per level that
  # completes: ceil(log2(n + 1)) of them.
  for steps, levels in ((1, 1), (2, 2), (3, 2), (100, 7), (127, 7), (128, 8)):
    assert events.tree_sensitivity_squared(steps) == levels


def test_tree_is_the_gaussian_of_its_sensitivity():
  # eps of three trees = eps of three Gaussians of z / sqrt(S), at any z.
  relation = dp_accounting.NeighboringRelation.REPLACE_SPECIAL
  for z, steps in ((0.7, 5), (3.0, 40)):
    s = events.tree_sensitivity_squared(steps)
    tree = dp_accounting.rdp.RdpAccountant(neighboring_relation=relation)
    tree.compose(dp_accounting.SingleEpochTreeAggregationDpEvent(z, steps), 3)
    gaussian = dp_accounting.rdp.RdpAccountant()
    gaussian.compose(dp_accounting.GaussianDpEvent(z / np.sqrt(s)), 3)
    np.testing.assert_allclose(
        tree.get_epsilon(1e-5), gaussian.get_epsilon(1e-5), rtol=1e-12
    )


def test_bad_steps():
  with pytest.raises(ValueError, match='steps'):
    events.tree_sensitivity_squared(0)
