"""The digest of the source tree a run measured, and ``python -m bench --check``.

The digest covers every file of the package as installed from this repository — ``podstore/``
and ``migrations/`` (shipped as ``podstore.migrations``) — and the bench's own code,
``bench/`` (its results directory aside: the results carry the digest), by relative path and
content, bytecode caches aside. Results carry it (``meta.source_digest`` in latest.json, a line
in latest.md).

``--check`` passes only for the results of a whole run of this tree: the digest matches in
both files; the run was not ``--quick``, not ``--only``, over the default sizes; every
section's figures are there; and latest.md holds every target latest.json judged. A file that
holds a digest and nothing else, or the results of other bench code, fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

TREES = ("podstore", "migrations", "bench")
#: Directories under TREES that are not source: the results name the digest themselves.
_SKIP_PATHS = {os.path.join("bench", "results")}
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


def source_digest(repo: str) -> str:
    """sha256 over (path, content) of every source file under TREES, in path order."""
    h = hashlib.sha256()
    files: list[str] = []
    for tree in TREES:
        for root, dirs, names in os.walk(os.path.join(repo, tree)):
            here = os.path.relpath(root, repo)
            dirs[:] = sorted(
                d
                for d in dirs
                if d not in _SKIP_DIRS
                and not d.endswith(".egg-info")
                and os.path.join(here, d) not in _SKIP_PATHS
            )
            files.extend(os.path.join(root, n) for n in names if not n.endswith(_SKIP_SUFFIXES))
    for path in sorted(os.path.relpath(f, repo) for f in files):
        with open(os.path.join(repo, path), "rb") as f:
            data = f.read()
        h.update(path.replace(os.sep, "/").encode() + b"\0")
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


_MD_LINE = re.compile(r"source digest `([0-9a-f]{64})`")


def incomplete(
    results: dict[str, Any], md: str, sections: Mapping[str, bool], sizes: Sequence[int]
) -> list[str]:
    """Why ``results`` (latest.json) and ``md`` (latest.md) are not a whole run: of every
    section of ``sections`` (name → whether it runs per size) over ``sizes`` (the default
    ones). Empty when they are."""
    meta = results.get("meta")
    if not isinstance(meta, dict):
        return ["latest.json holds no run (no meta)"]
    why = []
    if meta.get("quick") is not False:
        why.append("a --quick run" if meta.get("quick") else "the run does not say if --quick")
    if meta.get("only"):
        why.append(f"an --only run ({', '.join(meta['only'])})")
    ran = meta.get("sections")
    if not isinstance(ran, list) or sorted(ran) != sorted(sections):
        why.append(f"sections run: {ran}, not all of {sorted(sections)}")
    measured = [s.get("pods") for s in results.get("sizes") or [] if isinstance(s, dict)]
    if measured != list(sizes):
        why.append(f"sizes measured: {measured}, not {list(sizes)}")
    # The runner keeps the fixture's figures at the top, the other global sections' apart.
    found = {"fixture": results.get("fixture"), **(results.get("sections") or {})}
    empty = [name for name, per_size in sections.items() if not per_size and not found.get(name)]
    if empty:
        why.append(f"no figures of {', '.join(sorted(empty))}")
    targets = results.get("targets")
    if not isinstance(targets, list) or not targets:
        why.append("latest.json judged no target")
    else:
        missing = [t.get("name") for t in targets if str(t.get("name")) not in md]
        if missing:
            why.append(f"latest.md lacks {len(missing)} of latest.json's targets")
    return why


def check(
    repo: str, out: str, sections: Mapping[str, bool], sizes: Sequence[int]
) -> tuple[bool, str]:
    """Whether ``out``/latest.json and latest.md are a whole run of the current tree."""
    want = source_digest(repo)
    try:
        with open(os.path.join(out, "latest.json"), encoding="utf-8") as f:
            results = json.load(f)
        with open(os.path.join(out, "latest.md"), encoding="utf-8") as f:
            md = f.read()
    except (OSError, ValueError) as exc:
        return False, f"cannot read the results in {out}: {exc}"
    if not isinstance(results, dict):
        return False, f"{out}/latest.json is not a bench result"
    meta = results.get("meta") if isinstance(results.get("meta"), dict) else {}
    got_json = meta.get("source_digest")
    found = _MD_LINE.search(md)
    got_md = found.group(1) if found else None
    if got_json != want or got_md != want:
        return False, (
            f"bench results in {out} were measured on another tree: latest.json "
            f"{str(got_json)[:12]}, latest.md {str(got_md)[:12]}, current podstore/ + "
            f"migrations/ + bench/ {want[:12]}; regenerate them: python -m bench"
        )
    why = incomplete(results, md, sections, sizes)
    if why:
        return False, (
            f"bench results in {out} are not a whole run: {'; '.join(why)}; regenerate them: "
            "python -m bench"
        )
    return True, f"bench results in {out} are a whole run of this tree ({want[:12]})"
