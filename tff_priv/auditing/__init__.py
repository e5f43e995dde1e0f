"""Empirical privacy auditing: factory audits and one-run estimators."""
