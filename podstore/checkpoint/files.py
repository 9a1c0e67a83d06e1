"""Reading and atomically writing ``kubelet_internal_checkpoint`` files."""

from __future__ import annotations

import os
import stat

from podstore.checkpoint import decode
from podstore.checkpoint.decode import Checkpoint
from podstore.errors import (
    CheckpointError,
    CheckpointFormatError,
    CheckpointNotFoundError,
    InvalidInputError,
)
from podstore.fsutil import replace_file

#: Files larger than this are refused before they are read (256 MiB).
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


def read_checkpoint(
    source: str | os.PathLike[str] | bytes, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> Checkpoint:
    """Read and verify a kubelet checkpoint from a path or from the file's bytes, accepting
    and rejecting exactly as kubelet 1.23–1.29 does (v2, then the legacy v1 format).

    Raises CheckpointCorruptError (checksum mismatch; ``.expected`` stored, ``.actual``
    computed), CheckpointFormatError (no v1 or v2 checkpoint, naming the offset or field; more
    than ``max_bytes``), CheckpointNotFoundError (also a ``FileNotFoundError``),
    CheckpointError (unreadable otherwise), InvalidInputError (neither a path nor bytes).
    """
    if isinstance(source, bytes | bytearray | memoryview):
        _check_size(source, max_bytes)
        return decode.load(bytes(source).decode("utf-8", "surrogateescape"))
    path = _path(source)
    # The text goes straight into load(), which drops it once parsed (a name here would keep
    # it alive through the whole decode).
    return decode.load(_read_text(path, max_bytes), f"{path}: ")


def read_source(
    source: str | os.PathLike[str] | bytes, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[str, str]:
    """The text of a checkpoint (path or bytes; invalid UTF-8 as lone surrogates) and its
    error prefix (``"PATH: "`` or ``""``); raises as :func:`read_checkpoint` for reading."""
    if isinstance(source, bytes | bytearray | memoryview):
        _check_size(source, max_bytes)
        return bytes(source).decode("utf-8", "surrogateescape"), ""
    path = _path(source)
    return _read_text(path, max_bytes), f"{path}: "


def _check_size(data: bytes | bytearray | memoryview, max_bytes: int) -> None:
    if len(data) > max_bytes:
        raise CheckpointFormatError(
            f"checkpoint data is {len(data)} bytes, more than max_bytes={max_bytes}"
        )


def _path(source: object) -> str:
    try:
        path = os.fspath(source)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidInputError(
            f"source must be a path or bytes, not {type(source).__name__}"
        ) from None
    return path if isinstance(path, str) else os.fsdecode(path)


def _read_text(path: str, max_bytes: int) -> str:
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISREG(st.st_mode) and st.st_size > max_bytes:
                raise CheckpointFormatError(
                    f"{path}: checkpoint file is {st.st_size} bytes, "
                    f"more than max_bytes={max_bytes}"
                )
            # Read one byte past the limit so that a file still growing, or one whose size
            # fstat does not know (a pipe), is refused without reading it all. A regular
            # file is read at its size first: read(n) allocates n bytes up front, and a
            # 256 MiB buffer for a 2 MB file is commit charge a node agent does not need.
            limit = max_bytes + 1
            want = min(limit, st.st_size + 1) if stat.S_ISREG(st.st_mode) else limit
            raw = f.read(want)
            if len(raw) == want < limit:  # it grew since fstat: read on to the limit
                raw += f.read(limit - want)
    except FileNotFoundError as e:
        raise CheckpointNotFoundError(e.errno, "checkpoint file not found", path) from e
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read checkpoint: {e.strerror or e}") from e
    if len(raw) > max_bytes:
        raise CheckpointFormatError(f"{path}: checkpoint file is more than max_bytes={max_bytes}")
    # Invalid UTF-8 must survive until Go's rules replace it inside strings.
    return raw.decode("utf-8", "surrogateescape")


def write_checkpoint_file(
    path: str | os.PathLike[str], data: bytes | bytearray | memoryview
) -> None:
    """Replace the file at ``path`` (its directory must exist) with ``data`` atomically and
    durably, mode 0600: a crash leaves the old or the new file. The temporary file's name
    starts with ``.``, which kubelet's checkpoint listing ignores.

    Raises :class:`CheckpointError` (the ``OSError`` chained), :class:`InvalidInputError` when
    ``data`` is not bytes.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidInputError(f"data must be bytes, not {type(data).__name__}")
    try:
        replace_file(path, data, 0o600)
    except OSError as e:
        target = os.path.abspath(os.fspath(path))
        raise CheckpointError(f"{target}: cannot write checkpoint: {e.strerror or e}") from e
