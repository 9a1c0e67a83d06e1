"""Helpers for the reliability tests (tests/test_reliability_*.py).

Some modules are also run as scripts in real subprocesses (kill_writer.py, concurrency.py,
readonly_probe.py); docs/reliability.md describes each harness.
"""
