"""Benchmarks, run by hand on loopback (``bench/run.py``); never part of the test suite."""
