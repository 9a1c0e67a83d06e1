"""Regenerate the committed protobuf modules: podstore/deviceplugin/api_pb2.py(i) from
api.proto, podstore/criapi/runtime_pb2.py(i) from runtime.proto.

Needs grpcio-tools (the `dev` extra). The generated files are committed; a test compares them
with a fresh generation so a stale module cannot land.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "podstore" / "deviceplugin"
#: Each committed proto: its directory and file name (a tree without one skips it).
PROTOS = ((PROTO_DIR, "api.proto"), (ROOT / "podstore" / "criapi", "runtime.proto"))


def generate(proto_dir: Path, proto: str, out_dir: Path) -> None:
    """Write the _pb2.py and _pb2.pyi of ``proto`` into out_dir."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    rc = protoc.main(
        [
            "protoc",
            f"-I{proto_dir}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            str(proto_dir / proto),
        ]
    )
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    for proto_dir, proto in PROTOS:
        if not (proto_dir / proto).exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            generate(proto_dir, proto, Path(tmp))
            stem = proto.removesuffix(".proto")
            for name in (f"{stem}_pb2.py", f"{stem}_pb2.pyi"):
                fresh = (Path(tmp) / name).read_bytes()
                target = proto_dir / name
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
