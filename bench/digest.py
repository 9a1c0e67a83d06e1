"""The digest of the source tree a run measured, and ``python -m bench --check``.

The digest covers every file of the package as installed from this repository: ``podstore/``
and ``migrations/`` (shipped as ``podstore.migrations``), by relative path and content, bytecode
caches aside. Results carry it (``meta.source_digest`` in latest.json, a line in latest.md);
``--check`` recomputes it and fails when the committed results were measured on another tree.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

TREES = ("podstore", "migrations")
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


def source_digest(repo: str) -> str:
    """sha256 over (path, content) of every source file under TREES, in path order."""
    h = hashlib.sha256()
    files: list[str] = []
    for tree in TREES:
        for root, dirs, names in os.walk(os.path.join(repo, tree)):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
            files.extend(os.path.join(root, n) for n in names if not n.endswith(_SKIP_SUFFIXES))
    for path in sorted(os.path.relpath(f, repo) for f in files):
        with open(os.path.join(repo, path), "rb") as f:
            data = f.read()
        h.update(path.replace(os.sep, "/").encode() + b"\0")
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


_MD_LINE = re.compile(r"source digest `([0-9a-f]{64})`")


def check(repo: str, out: str) -> tuple[bool, str]:
    """Whether ``out``/latest.json and latest.md were measured on the current tree."""
    want = source_digest(repo)
    try:
        with open(os.path.join(out, "latest.json"), encoding="utf-8") as f:
            got_json = json.load(f).get("meta", {}).get("source_digest")
        with open(os.path.join(out, "latest.md"), encoding="utf-8") as f:
            found = _MD_LINE.search(f.read())
    except (OSError, ValueError) as exc:
        return False, f"cannot read the results in {out}: {exc}"
    got_md = found.group(1) if found else None
    if got_json == want and got_md == want:
        return True, f"bench results in {out} were measured on this tree ({want[:12]})"
    return False, (
        f"bench results in {out} were measured on another tree: latest.json {str(got_json)[:12]}, "
        f"latest.md {str(got_md)[:12]}, current podstore/ + migrations/ {want[:12]}; "
        "regenerate them: python -m bench"
    )
