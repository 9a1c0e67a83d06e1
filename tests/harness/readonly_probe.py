"""Open a store read-only as another user and try every write; print one JSON result line.

``readonly_probe.py DB [--as-nobody]``. Root ignores file permissions, so the security test
runs this with ``--as-nobody`` (setgid/setuid 65534) to make a read-only file and directory
real; on a read-only mount it runs as root.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

NOBODY = 65534


def main(argv: list[str]) -> int:
    db = argv[0]
    # Import (and warm up Alembic's script directory) first: nobody cannot read the Python
    # installation under /root.
    import binascii  # noqa: F401  (imported lazily by protobuf)
    import encodings.idna  # noqa: F401

    from podstore import PodDevicesEntry, PodStore, PodStoreError, ReadOnlyStoreError
    from podstore.sqlite.migrate import classify_revision, head_revision

    classify_revision(head_revision())
    if "--as-nobody" in argv:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    out: dict[str, Any] = {"uid": os.getuid()}
    try:
        store = PodStore.open(db, readonly=True)
    except PodStoreError as exc:
        out["open_error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(out))
        return 0
    with store:
        out["pods"] = sorted(store.pods())
        out["entries"] = len(store.to_checkpoint_data())
        writes: dict[str, Callable[[], object]] = {
            "insert": lambda: store.insert("x", "c", "r", {0: ["d"]}, b""),
            "delete": lambda: store.delete(sorted(store.pods())),
            "from_checkpoint_data": lambda: store.from_checkpoint_data(
                [PodDevicesEntry("x", "c", "r", {0: ["d"]}, b"")]
            ),
            "set_registered_devices": lambda: store.set_registered_devices({"r": ["d"]}),
            "transaction": lambda: store.transaction().__enter__(),
        }
        results: dict[str, str] = {}
        for name, call in writes.items():
            try:
                call()
                results[name] = "succeeded"
            except ReadOnlyStoreError:
                results[name] = "ReadOnlyStoreError"
            except Exception as exc:  # reported, and the test fails on it
                results[name] = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
        out["writes"] = results
        out["pods_after"] = sorted(store.pods())
    try:
        PodStore.open(db).close()
        out["writable_open"] = "succeeded"
    except ReadOnlyStoreError:
        out["writable_open"] = "ReadOnlyStoreError"
    except Exception as exc:
        out["writable_open"] = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
