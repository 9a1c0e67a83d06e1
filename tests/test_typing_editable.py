"""mypy in a user's project sees podstore's types after ``pip install -e .``.

setuptools makes an editable install one of two ways: a ``.pth`` file holding a path, or —
when the packages do not sit at their own paths under one root — a ``.pth`` that runs an
import-hook finder. Static tools read ``.pth`` paths but never run code, so with the finder
mypy reports "Cannot find implementation or library stub for module named 'podstore'" and
treats every podstore name as Any. podstore ships ``migrations/`` as ``podstore.migrations``;
mapping it with ``package-dir`` caused the finder. The symlink ``podstore/migrations ->
../migrations`` keeps the layout simple, so the path kind is used (pyproject.toml).
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

import podstore

ROOT = Path(__file__).resolve().parent.parent

USER_CODE = """\
import podstore

store = podstore.PodStore.open("node.db")
reveal_type(store)
wrong: int = store.pods()
"""


def _editable_install() -> bool:
    # Every podstore distribution on the path: a build's podstore.egg-info in the source tree
    # may be found first, and it records no install.
    for dist in importlib.metadata.distributions(name="podstore"):
        text = dist.read_text("direct_url.json")
        if text and json.loads(text).get("dir_info", {}).get("editable"):
            return True
    return False


def test_the_package_directory_holds_the_migrations() -> None:
    link = ROOT / "podstore" / "migrations"
    assert link.is_symlink() and link.resolve() == (ROOT / "migrations").resolve()
    assert (Path(podstore.__file__).parent / "migrations" / "env.py").is_file()


@pytest.mark.skipif(not _editable_install(), reason="podstore is not installed with pip -e here")
def test_mypy_in_a_user_project_sees_podstore_types(tmp_path: Path) -> None:
    (tmp_path / "user.py").write_text(USER_CODE)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "user.py"],
        cwd=tmp_path,  # outside the source tree: only the installed package can be found
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert "Cannot find implementation or library stub" not in out
    assert 'Revealed type is "podstore.store.PodStore"' in out
    # The types are used, not just found: a wrong assignment is caught.
    assert 'expression has type "set[str]", variable has type "int"' in out
    assert proc.returncode == 1
