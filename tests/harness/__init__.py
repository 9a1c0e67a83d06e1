"""All the tests' support code: fixtures' builders, reference models, subprocess harnesses.

pytest puts tests/ on the import path (``pythonpath`` in pyproject.toml), so tests import
``harness.<module>``; a child interpreter gets it through ``harness.paths.child_env``. Some
modules are also run as scripts in real subprocesses (kill_writer.py, concurrency.py,
readonly_probe.py, watch_follower.py, ship_child.py; docs/reliability.md describes each
harness), and cli_scale_report.py is the by-hand CLI scale report
(``PYTHONPATH=tests python -m harness.cli_scale_report``).
"""
