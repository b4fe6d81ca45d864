"""Benchmark helpers behind scripts/benchmark.py (timings are never asserted in unit tests)."""
