"""podstore's benchmark suite (issue 6): ``python -m bench``.

podstore is measured side by side, in one run, with the baselines it must beat or approach:
kubelet-style checkpointing (in-memory maps plus a full checkpoint rewrite per mutation), the
raw fsync floor, raw stdlib ``sqlite3`` with the same SQL, and the in-memory maps for reads.
Not a test package: ``bench/conftest.py`` keeps pytest out.
"""
