"""Benchmarks: one timing harness and what each benchmark builds and times (library side of scripts/benchmark_*.py)."""
