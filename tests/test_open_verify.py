"""PodStore.open's integrity check: blocking by default, or off the critical path."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from podstore import ContainerAllocateResponse, PodStore, StoreCorruptError
from podstore.sqlite import migrate

PAGE = 4096


def _store(path: Path) -> None:
    with PodStore.open(path) as store:
        for i in range(300):
            resp = ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": f"GPU-{i}"})
            store.insert(f"pod-{i}", "main", "nvidia.com/gpu", {0: [f"GPU-{i}"]}, resp)


def test_head_revision_constant_is_alembic_head() -> None:
    """Opening a current store skips Alembic only while this constant names the head."""
    assert migrate.head_revision() == migrate.HEAD_REVISION


def test_background_check_passes_on_a_sound_file(tmp_path: Path) -> None:
    _store(tmp_path / "s.db")
    with PodStore.open(tmp_path / "s.db", verify="background") as store:
        assert store.wait_verified(timeout=60)
        assert store.size() == 300


@pytest.mark.parametrize("verify", ["background", "blocking"])
def test_damage_is_reported_either_way(tmp_path: Path, verify: str) -> None:
    """Random bytes over the last page in use: "blocking" refuses the open; "background"
    returns, then wait_verified and every later call raise StoreCorruptError."""
    db = tmp_path / "s.db"
    _store(db)
    data = bytearray(db.read_bytes())
    last = len(data) // PAGE - 1
    data[last * PAGE : (last + 1) * PAGE] = random.Random(7).randbytes(PAGE)
    db.write_bytes(bytes(data))
    try:
        store = PodStore.open(db, verify=verify)  # type: ignore[arg-type]
    except StoreCorruptError:
        assert verify == "blocking"
        return
    assert verify == "background"
    with store:
        with pytest.raises(StoreCorruptError):
            store.wait_verified(timeout=60)
        with pytest.raises(StoreCorruptError):
            store.pods()


def test_off_skips_the_check_and_the_default_blocks(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    _store(db)
    data = bytearray(db.read_bytes())
    last = len(data) // PAGE - 1
    data[last * PAGE : (last + 1) * PAGE] = random.Random(7).randbytes(PAGE)
    db.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError):
        PodStore.open(db)
    with PodStore.open(db, verify="off", readonly=True) as store:
        assert store.wait_verified(timeout=0)
