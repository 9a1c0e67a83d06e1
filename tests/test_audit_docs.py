"""Every ```sql block of docs/audit.md and docs/sql.md, run against the fixture node.

Each block is keyed by the heading above it; its expected rows are written out here, so a query
that stops answering its question (or a new query without an expectation) fails the suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from harness.audit_fixture import build
from harness.docblocks import DOCS, reads_the_fleet, sql_blocks

from podstore import PodStore

EXPECTED: dict[str, list[tuple[Any, ...]]] = {
    # docs/audit.md
    "1. Which pods hold GPUs on NUMA node 1?": [
        ("pod-a", "trainer", "nvidia.com/gpu", "GPU-1"),
        ("pod-b", "worker", "nvidia.com/gpu", "GPU-2"),
        ("pod-b", "worker", "nvidia.com/gpu", "GPU-3"),
        ("pod-c", "rogue", "nvidia.com/gpu", "GPU-3"),
    ],
    "2. Which registered devices does no container hold?": [
        ("example.com/fpga", "fpga-1"),
        ("intel.com/sriov", "0000:3b:02.1"),
        ("nvidia.com/gpu", "GPU-5"),
        ("nvidia.com/gpu", "GPU-6"),
    ],
    "3. Is any device allocated to two pods at once?": [
        ("nvidia.com/gpu", "GPU-3", "pod-b", "worker", 2),
        ("nvidia.com/gpu", "GPU-3", "pod-c", "rogue", 2),
    ],
    "4. Which allocated devices are not (or no longer) registered?": [
        ("example.com/fpga", "fpga-0", "pod-b", "sidecar"),
    ],
    "5. How much allocation churn was there per hour?": [
        ("2026-12-01T10:00Z", 4, 4, 0, 0, 0),
        ("2026-12-01T11:00Z", 4, 4, 0, 0, 0),
        ("2026-12-01T12:00Z", 2, 0, 1, 1, 0),
    ],
    "6. Which containers get conflicting env settings from their device plugins?": [
        (
            "pod-a",
            "trainer",
            "NVIDIA_DRIVER_CAPABILITIES",
            "all",
            "intel.com/sriov",
            "compute",
            "nvidia.com/gpu",
        ),
    ],
    "7. Which allocated devices have no NUMA topology?": [
        ("example.com/fpga", "fpga-0", "pod-b", "sidecar"),
    ],
    "8. Which pods hold the most devices?": [("pod-a", 3), ("pod-b", 3), ("pod-c", 1)],
    "9. What happened to GPU-3, in order?": [
        (3, "2026-12-01T10:30:00.000000Z", "insert", "pod-b", "worker"),
        (5, "2026-12-01T11:10:00.000000Z", "insert", "pod-c", "rogue"),
    ],
    "10. Who held GPU-3 at 11:00?": [("pod-b", "worker", "nvidia.com/gpu")],
    "11. Which entries have no plugin response?": [("pod-b", "sidecar", "example.com/fpga")],
    "12. Which containers got devices of one resource spread over several NUMA nodes?": [
        ("pod-a", "trainer", "nvidia.com/gpu", 2, 0, 1),
    ],
    "13. How full is each resource?": [
        ("example.com/fpga", 1, 0, 1),
        ("intel.com/sriov", 2, 1, 0),
        ("nvidia.com/gpu", 7, 5, 0),
    ],
    "14. Which entries were removed since noon, and what did they give back?": [
        ("2026-12-01T12:20:00.000000Z", "pod-e", "job", "nvidia.com/gpu", '{"1":["GPU-5"]}'),
    ],
    "15. How many GPU-hours did each pod use between 10:00 and 12:00?": [
        ("pod-a", 3.833, 2),
        ("pod-b", 3.0, 2),
        ("pod-c", 0.833, 1),
        ("pod-d", 1.483, 2),
        ("pod-e", 0.333, 1),
    ],
    "16. Which devices has one holder kept longest without a break?": [
        ("pod-a", "trainer", "GPU-0", "2026-12-01T10:05:00.000000Z"),
        ("pod-a", "trainer", "GPU-1", "2026-12-01T10:05:00.000000Z"),
        ("pod-a", "trainer", "0000:3b:02.0", "2026-12-01T10:06:00.000000Z"),
    ],
    # The fixture's entries all ended by the checkpoint: nothing overstated (the query's
    # arithmetic is checked where runtime ends exist: tests/test_intervals.py).
    "17. How much did the checkpoint alone overstate?": [],
    # docs/sql.md
    "`v_allocations` — one row per device listed in an entry": [
        ("pod-a", "trainer", "intel.com/sriov", "0000:3b:02.0"),
        ("pod-a", "trainer", "nvidia.com/gpu", "GPU-0"),
        ("pod-d", "init", "nvidia.com/gpu", "GPU-4"),
        ("pod-d", "main", "nvidia.com/gpu", "GPU-4"),
    ],
    "`v_device_owners` — one row per current holder of a device": [
        ("pod-b", "worker"),
        ("pod-c", "rogue"),
    ],
    "`v_double_allocations` — devices held from more than one pod": [
        ("nvidia.com/gpu", "GPU-3", "pod-b", "worker", 2),
        ("nvidia.com/gpu", "GPU-3", "pod-c", "rogue", 2),
    ],
    "`v_run_options` — merged runtime settings per container": [
        ("NVIDIA_DRIVER_CAPABILITIES", "all", "intel.com/sriov"),
        ("PCIDEVICE_INTEL_COM_SRIOV", "0000:3b:02.0", "intel.com/sriov"),
        ("NVIDIA_VISIBLE_DEVICES", "GPU-0,GPU-1", "nvidia.com/gpu"),
    ],
    "`v_run_option_conflicts` — settings dropped because another response set them differently": [
        (
            "pod-a",
            "trainer",
            "env",
            "NVIDIA_DRIVER_CAPABILITIES",
            "all",
            "intel.com/sriov",
            "compute",
            "nvidia.com/gpu",
        ),
    ],
    "Decoded responses": [("pod-d", "main", "nvidia.com/gpu", "/data", "/mnt/data")],
    "`allocation_event_devices` — which events name which device": [
        (3, "2026-12-01T10:30:00.000000Z", "insert", "pod-b", "worker", "listed"),
        (5, "2026-12-01T11:10:00.000000Z", "insert", "pod-c", "rogue", "listed"),
        (11, "2026-12-01T12:35:00.000000Z", "registered", None, None, "listed"),
    ],
    "The hash chain (revision 0005) and `history_chain_links`": [(13, "registered", 32, 0)],
    # The fixture has no CDI specs: GPU-3, held by two pods, keeps its own id.
    "`v_physical_double_allocations` — holders of one card in several pods, sharing undeclared": [
        (
            "device-plugin:nvidia.com/gpu:GPU-3",
            "device-plugin",
            "nvidia.com/gpu",
            "GPU-3",
            None,
            None,
            "worker",
            2,
        ),
        (
            "device-plugin:nvidia.com/gpu:GPU-3",
            "device-plugin",
            "nvidia.com/gpu",
            "GPU-3",
            None,
            None,
            "rogue",
            2,
        ),
    ],
}


# The blocks over the fleet's views run against a fleet (tests/fleet/test_fleet_node_state.py).
BLOCKS = [
    (heading, sql)
    for doc in ("audit.md", "sql.md")
    for heading, sql in sql_blocks(DOCS / doc)
    if not reads_the_fleet(sql)
]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodStore]:
    mp = pytest.MonkeyPatch()
    store = build(tmp_path_factory.mktemp("audit") / "node.db", mp)
    try:
        yield store
    finally:
        store.close()
        mp.undo()


def test_every_block_has_an_expectation_and_the_cookbook_has_ten_questions() -> None:
    headings = [h for h, _ in BLOCKS]
    assert len(headings) == len(set(headings)), "two sql blocks under one heading"
    assert set(headings) == set(EXPECTED)
    audit = [h for h, _ in sql_blocks(DOCS / "audit.md")]
    assert len(audit) >= 10


@pytest.mark.parametrize(("heading", "sql"), BLOCKS, ids=[h[:40] for h, _ in BLOCKS])
def test_documented_query_answers_its_question(node: PodStore, heading: str, sql: str) -> None:
    # Through the read-only connection: every documented query must run there too.
    assert node.query(sql).rows == EXPECTED[heading]
