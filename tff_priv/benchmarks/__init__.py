"""Benchmarks of scripts/benchmark_*.py: one timing harness, what each times."""
