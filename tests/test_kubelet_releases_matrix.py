"""Vector files × kubelet releases: verdict and read_as from the release table.

Each boundary is pinned on both sides (the last release before it and the first after), so that
moving it by one release in docs/kubelet-release-table.md fails here. Citations: the table rows
and docs/kubelet-releases.md sections named per boundary.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from podstore.checkpoint.releases import KNOWN, Release
from podstore.checkpoint.verdict import UNREADABLE, judge_file

V = Path(__file__).parent / "vectors"
N = V / "node"
ON = {"PodLevelResourceManagers": True}
OFF = {"PodLevelResourceManagers": False}
NUMA0 = "NUMA affinity: all devices read as NUMA node 0"

CASES = [
    # device D1: native to 1.19; unreadable 1.20-1.22 (commit a8b8995e, #102880); fallback
    # 1.23-1.30 (PR #102882); removed in 1.31 (PR #123398, CHANGELOG-1.31) — §2.2
    (V / "hand-v1.json", 18, OFF, "accept", "v1", ()),
    (V / "hand-v1.json", 19, OFF, "accept", "v1", ()),
    (V / "hand-v1.json", 20, OFF, "accept", None, (UNREADABLE,)),
    (V / "hand-v1.json", 22, OFF, "accept", None, (UNREADABLE,)),
    (V / "hand-v1.json", 23, OFF, "accept", "v1", (NUMA0,)),
    (V / "hand-v1.json", 30, OFF, "accept", "v1", (NUMA0,)),
    (V / "hand-v1.json", 31, OFF, "accept", None, (UNREADABLE,)),
    # device D2 from 1.20 (§2.2)
    (V / "hand-all-fields.json", 19, OFF, "accept", None, (UNREADABLE,)),
    (V / "hand-all-fields.json", 20, OFF, "accept", "v2", ()),
    (V / "hand-all-fields.json", 37, OFF, "accept", "v2", ()),
    # CPU C1 read through the fallback 1.18-1.36 (PR #84462/#86689); 1.37 treated as refusing (§9.1)
    (N / "cpu-v1-migration.json", 18, OFF, "accept", "v1", ()),
    (N / "cpu-v1-migration.json", 36, ON, "accept", "v1", ()),
    (N / "cpu-v1-migration.json", 37, OFF, "refuse", None, ()),
    # CPU C3 (checksum ≠ 0): 1.36 gate on (PR #134768), 1.37 (gate off: podEntries dropped) §3.2-3.3
    (N / "cpu-v3-pod-entries.json", 35, ON, "refuse", None, ()),
    (N / "cpu-v3-pod-entries.json", 36, OFF, "refuse", None, ()),
    (N / "cpu-v3-pod-entries.json", 36, ON, "accept", "v3", ()),
    (N / "cpu-v3-pod-entries.json", 37, OFF, "accept", "v3", ("podEntries",)),
    (N / "cpu-v3-pod-entries.json", 37, ON, "accept", "v3", ()),
    # CPU C4: ≤1.36 read the outer V2 copy (PR #139102), 1.37 reads data §3.3
    (N / "cpu-v4-embedded-v2-pod-entries.json", 18, OFF, "accept", "v2", ("podEntries",)),
    (N / "cpu-v4-embedded-v2-pod-entries.json", 36, ON, "accept", "v2", ("podEntries",)),
    (N / "cpu-v4-embedded-v2-pod-entries.json", 37, ON, "accept", "v4", ()),
    (N / "cpu-v4-embedded-v2-pod-entries.json", 37, OFF, "accept", "v4", ("podEntries",)),
    (N / "cpu-v2-pod.json", 18, OFF, "accept", "v2", ()),
    (N / "cpu-v2-pod.json", 37, ON, "accept", "v2", ()),
    # memory: no manager before 1.21 (§4)
    (N / "memory-v1.json", 20, OFF, "accept", None, None),
    (N / "memory-v1.json", 21, OFF, "accept", "v1", ()),
    (N / "memory-v1.json", 37, ON, "accept", "v1", ()),
    # M1 checksum 0: refused 1.21-1.35, accepted 1.36+ (§4.3, S test @ 121460de)
    (N / "memory-v1-zero-checksum.json", 21, OFF, "refuse", None, ()),
    (N / "memory-v1-zero-checksum.json", 35, OFF, "refuse", None, ()),
    (N / "memory-v1-zero-checksum.json", 36, OFF, "accept", "v1", ()),
    # M2: 1.36 gate on (PR #134768), 1.37 §4.2
    (N / "memory-v2.json", 35, ON, "refuse", None, ()),
    (N / "memory-v2.json", 36, OFF, "refuse", None, ()),
    (N / "memory-v2.json", 36, ON, "accept", "v2", ()),
    (N / "memory-v2.json", 37, OFF, "accept", "v2", ("podEntries",)),
    # M2 checksum 0 → M1 on 1.36+ (§4.3)
    (N / "memory-v2-zero-checksum.json", 35, ON, "refuse", None, ()),
    (N / "memory-v2-zero-checksum.json", 36, ON, "accept", "v1", ("podEntries",)),
    # M3: outer M1 copy ≤1.36, data 1.37 (PR #139626) §4.3
    (N / "memory-v3-pod-entries.json", 21, OFF, "accept", "v1", ("podEntries",)),
    (N / "memory-v3-pod-entries.json", 36, ON, "accept", "v1", ("podEntries",)),
    (N / "memory-v3-pod-entries.json", 37, ON, "accept", "v3", ()),
    # DRA: no file before 1.27 (PR #115912); classic 1.27-1.30; 1.31 DriverState (#127653);
    # data format from 1.32 (PR #126303) §5.2
    (N / "dra-v1-classic-single.json", 26, OFF, "accept", None, None),
    (N / "dra-v1-classic-single.json", 27, OFF, "accept", "v1", ()),
    (N / "dra-v1-classic-single.json", 30, OFF, "accept", "v1", ()),
    (N / "dra-v1-classic-single.json", 31, OFF, "refuse", None, ()),
    (N / "dra-v1-structured-single.json", 30, OFF, "refuse", None, ()),
    (N / "dra-v1-structured-single.json", 31, OFF, "accept", "v1", ()),
    (N / "dra-v1-structured-single.json", 32, OFF, "refuse", None, ()),
    (N / "dra-data-entries-single.json", 31, OFF, "refuse", None, ()),
    (N / "dra-data-entries-single.json", 32, OFF, "accept", "data", ()),
    (N / "dra-data-entries-single.json", 37, OFF, "accept", "data", ()),
    # unreadable files: CPU/memory/DRA refuse, devices start empty (§1)
    (N / "cpu-v1-era-corrupt.json", 30, OFF, "refuse", None, ()),
    (N / "memory-v1-corrupt.json", 30, OFF, "refuse", None, ()),
    (V / "corrupt-flip-checksum.json", 30, OFF, "accept", None, (UNREADABLE,)),
]


@pytest.mark.parametrize(
    ("path", "minor", "gates", "verdict", "read_as", "drops"),
    CASES,
    ids=[f"{c[0].name}@1.{c[1]}{'+gate' if c[2] is ON else ''}" for c in CASES],
)
def test_matrix(
    path: Path,
    minor: int,
    gates: dict[str, bool],
    verdict: str,
    read_as: str | None,
    drops: tuple[str, ...] | None,
) -> None:
    v = judge_file(path, Release(minor), gates)
    assert (v.verdict, v.read_as) == (verdict, read_as)
    if drops is None:  # no manager for the kind: the file is ignored
        assert v.drops and "no" in v.drops[0] and "manager" in v.drops[0]
    else:
        assert v.drops == drops
    assert (v.reason is not None) == (verdict == "refuse")


def test_accepted_by_ranges() -> None:
    assert judge_file(V / "hand-v1.json", Release(37), {}).accepted_by == (
        "1.18-1.19",
        "1.23-1.30",
    )
    assert judge_file(N / "memory-v1.json", Release(37), {}).accepted_by == ("1.21-1.37",)
    assert judge_file(N / "cpu-v3-pod-entries.json", Release(36), ON).accepted_by == ("1.36-1.37",)
    assert judge_file(N / "dra-data-entries-single.json", Release(None), {}).accepted_by == (
        "1.32-1.37",
    )


def test_any_accepts_what_podstore_reads() -> None:
    v = judge_file(N / "memory-v1-zero-checksum.json", Release(None), {})
    assert (v.kubelet_version, v.verdict, v.read_as) == ("any", "accept", "v1")


def test_every_vector_judged_for_every_release() -> None:
    files = [p for p in sorted(N.glob("*.json")) if p.name != "MANIFEST.json"]
    for p in files:
        for rel in KNOWN:
            v = judge_file(p, rel, ON)
            assert v.verdict in ("accept", "refuse")
