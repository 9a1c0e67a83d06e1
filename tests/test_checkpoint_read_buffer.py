"""Reading a checkpoint allocates what the file holds, not the size limit; a file longer than
fstat says is still read whole (and refused past the limit)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from podstore.checkpoint import files
from podstore.errors import CheckpointFormatError


def test_a_small_file_is_read_without_a_buffer_of_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_bytes(b'{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":0}')
    tracemalloc.start()
    try:
        text = files._read_text(str(path), files.DEFAULT_MAX_BYTES)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert text.startswith('{"Data"')
    # read(max_bytes + 1) allocated the whole 256 MiB limit up front for a 75-byte file.
    assert peak < 1024 * 1024


def test_a_regular_file_longer_than_its_fstat_size_is_read_whole() -> None:
    # /proc files are regular files whose fstat size is 0 whatever they hold: the case of a
    # file that grew between fstat and read.
    proc = Path("/proc/self/status")
    if not proc.exists():
        pytest.skip("needs Linux /proc")
    text = files._read_text(str(proc), files.DEFAULT_MAX_BYTES)
    assert "VmRSS:" in text and text.endswith("\n")
    with pytest.raises(CheckpointFormatError, match="more than max_bytes=16"):
        files._read_text(str(proc), 16)
