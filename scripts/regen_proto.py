"""Regenerate podstore/deviceplugin/api_pb2.py and api_pb2.pyi from api.proto.

Needs grpcio-tools (the `dev` extra). The generated files are committed; a test compares them
with a fresh generation so a stale module cannot land.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "podstore" / "deviceplugin"


def generate(out_dir: Path) -> None:
    """Write api_pb2.py and api_pb2.pyi for api.proto into out_dir."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    rc = protoc.main(
        [
            "protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            str(PROTO_DIR / "api.proto"),
        ]
    )
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")


def main() -> int:
    check = "--check" in sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        stale = []
        for name in ("api_pb2.py", "api_pb2.pyi"):
            fresh = (Path(tmp) / name).read_bytes()
            target = PROTO_DIR / name
            if check:
                if not target.exists() or target.read_bytes() != fresh:
                    stale.append(name)
            else:
                target.write_bytes(fresh)
    if stale:
        print("stale generated files: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
