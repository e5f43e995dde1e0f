"""Benchmarks of whole learning-process rounds (library side of scripts/benchmark_*.py)."""
