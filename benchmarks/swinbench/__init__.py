"""Benchmark code behind scripts/benchmark.py, kept out of the installed package (timings are never asserted in
unit tests). Import it with ``benchmarks/`` on ``sys.path``, as scripts/benchmark.py and tests/bench/conftest.py do."""
