"""The SQL run-option merge (decoded response rows + window functions) against run_options.merge.

``device_run_container_options`` merges the container's stored responses in Python
(run_options.merge, the plain reading of api.md's rules over the stored bytes); the SQL merge
over the decoded response rows (views.RUN_OPTIONS_FOR_CONTAINER, shaped by responses.shape) is
the one-container form of the views. For random responses — with
keys repeated across resources and within one response, equal and different values, resources
whose byte order differs from their code-point-naive order, nil and empty responses, and
replacing inserts — both give the same options and log the same conflicts in the same order.
The v_run_options / v_run_option_conflicts views must agree with both.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from harness.audit_fixture import response_rows_consistent
from hypothesis import given, settings
from hypothesis import strategies as st

from podstore import PodDevicesEntry, PodStore
from podstore.deviceplugin import CDIDevice, ContainerAllocateResponse, DeviceSpec, Mount
from podstore.pure import run_options
from podstore.storage import responses as response_rows
from podstore.storage.sql import views

RESOURCES = ["B.io/r", "a.io/r", "a.io/r2", "ü.io/r", "é/x"]
KEYS = ["A", "B", "a", "ä", ""]
VALUES = ["1", "2", ""]
PATHS = ["/m", "/n", "/dev/x"]
CDI = ["vendor.com/class=a", "vendor.com/class=b", "bad name"]

responses = st.builds(
    lambda envs, mounts, devices, annotations, cdi: _resp(envs, mounts, devices, annotations, cdi),
    st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4),
    st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from(PATHS), st.booleans()), max_size=3),
    st.lists(
        st.tuples(st.sampled_from(PATHS), st.sampled_from(PATHS), st.sampled_from(["rw", "r"])),
        max_size=3,
    ),
    st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3),
    st.lists(st.sampled_from(CDI), max_size=3),
)
maybe_response = st.one_of(st.none(), st.just(b""), responses)


def _resp(
    envs: dict[str, str],
    mounts: list[tuple[str, str, bool]],
    devices: list[tuple[str, str, str]],
    annotations: dict[str, str],
    cdi: list[str],
) -> ContainerAllocateResponse:
    msg = ContainerAllocateResponse(envs=envs, annotations=annotations)
    msg.mounts.extend(Mount(container_path=c, host_path=h, read_only=ro) for c, h, ro in mounts)
    msg.devices.extend(
        DeviceSpec(container_path=c, host_path=h, permissions=p) for c, h, p in devices
    )
    msg.cdi_devices.extend(CDIDevice(name=n) for n in cdi)
    return msg


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append((record.levelno, record.getMessage()))


@contextmanager
def captured() -> Iterator[list[tuple[int, str]]]:
    handler = _Capture()
    logger = logging.getLogger("podstore")
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodStore]:
    store = PodStore.open(tmp_path_factory.mktemp("merge") / "merge.db")
    try:
        yield store
    finally:
        store.close()


_pods = itertools.count()


@settings(max_examples=150)
@given(
    first=st.dictionaries(st.sampled_from(RESOURCES), maybe_response, max_size=4),
    final=st.dictionaries(st.sampled_from(RESOURCES), maybe_response, min_size=1, max_size=4),
    restore=st.booleans(),
    cdi_devices=st.booleans(),
    cdi_annotations=st.booleans(),
)
def test_sql_merge_equals_python_merge(
    shared: PodStore,
    first: dict[str, ContainerAllocateResponse | bytes | None],
    final: dict[str, ContainerAllocateResponse | bytes | None],
    restore: bool,
    cdi_devices: bool,
    cdi_annotations: bool,
) -> None:
    pod = f"pod-{next(_pods)}"
    # Earlier responses under some of the same resources: replaced ones must leave no rows.
    for resource, resp in first.items():
        shared.insert(pod, "c", resource, {0: ["d"]}, resp)
    if restore:
        shared.from_checkpoint_data(
            [
                PodDevicesEntry(
                    pod,
                    "c",
                    r,
                    {0: ["d"]},
                    None if resp is None else _bytes(resp),
                )
                for r, resp in final.items()
            ]
        )
    else:
        for resource, resp in final.items():
            shared.insert(pod, "c", resource, {0: ["d"]}, resp)
    stored = shared.query(
        "SELECT a.resource, a.alloc_resp FROM allocations a JOIN containers c ON c.id = "
        "a.container_id JOIN pods p ON p.id = c.pod_id WHERE p.uid = ?",
        (pod,),
    ).rows
    by_bytes = sorted(stored, key=lambda r: r[0].encode("utf-8"))

    with captured() as python_log:
        expected = run_options.merge(
            pod, "c", by_bytes, cdi_devices=cdi_devices, cdi_annotations=cdi_annotations
        )
    with captured() as sql_log:
        got = shared.device_run_container_options(
            pod, "c", cdi_devices=cdi_devices, cdi_annotations=cdi_annotations
        )
    assert got == expected
    assert sql_log == python_log
    # The SQL merge over the decoded rows (the one-container form of the views) agrees too.
    rows = shared.query(views.RUN_OPTIONS_FOR_CONTAINER, {"pod": pod, "container": "c"}).rows
    with captured() as rows_log:
        from_rows = response_rows.shape(
            pod, "c", rows, cdi_devices=cdi_devices, cdi_annotations=cdi_annotations
        )
    assert from_rows == expected
    assert rows_log == python_log

    # The views say the same (the CDI annotation aside: it is computed in Python).
    view = shared.query(
        "SELECT kind, name, value, permissions, read_only, resource FROM v_run_options "
        "WHERE pod_uid = ? AND container = 'c' ORDER BY kind, ordinal",
        (pod,),
    ).rows
    plain = run_options.merge(pod, "c", by_bytes, cdi_devices=True, cdi_annotations=False)
    assert [r[1:3] for r in view if r[0] == "env"] == [(e.name, e.value) for e in plain.envs]
    assert [r[1:5] for r in view if r[0] == "device"] == [
        (d.path_in_container, d.path_on_host, d.permissions, None) for d in plain.devices
    ]
    assert [r[1:5] for r in view if r[0] == "mount"] == [
        (m.container_path, m.host_path, None, int(m.read_only)) for m in plain.mounts
    ]
    assert [r[1:3] for r in view if r[0] == "annotation"] == [
        (a.name, a.value) for a in plain.annotations
    ]
    assert [r[1] for r in view if r[0] == "cdi"] == [c.name for c in plain.cdi_devices]
    conflicts = shared.query(
        "SELECT count(*) FROM v_run_option_conflicts WHERE pod_uid = ?", (pod,)
    ).rows[0][0]
    python_conflicts = [m for m in python_log if "conflicting" in m[1] and "from CDI" not in m[1]]
    assert conflicts == len(python_conflicts)


def _bytes(resp: ContainerAllocateResponse | bytes) -> bytes:
    return resp if isinstance(resp, bytes) else resp.SerializeToString(deterministic=True)


def test_response_rows_follow_every_write_path(db_path: Path) -> None:
    """insert, replace (rows cleared), from_checkpoint_data one by one and in bulk (> 64
    entries: write_many), delete (cascade): the rows always equal the decoded bytes."""
    resp1 = _resp({"B": "2", "A": "1"}, [("/m", "/h", True)], [("/d", "/d", "rw")], {"k": "v"},
                  ["v.com/c=a"])  # fmt: skip
    resp2 = _resp({"C": "3"}, [], [], {}, [])
    with PodStore.open(db_path) as store:
        store.insert("p", "c", "r", None, resp1)
        store.insert("p", "c", "r2", None, resp1)
        response_rows_consistent(db_path)
        store.insert("p", "c", "r", None, resp2)  # replace: resp1's rows must go
        store.insert("p", "c", "r2", None, None)
        response_rows_consistent(db_path)
        bulk = [
            PodDevicesEntry(f"q{i}", "c", "r", {0: [str(i)]}, _bytes(resp1 if i % 2 else resp2))
            for i in range(70)
        ]
        store.from_checkpoint_data(bulk)
        store.from_checkpoint_data(  # bulk again, replacing every entry
            [PodDevicesEntry(e.pod_uid, "c", "r", None, _bytes(resp2)) for e in bulk]
        )
        response_rows_consistent(db_path)
        store.from_checkpoint_data(bulk[:3])  # small: one by one
        response_rows_consistent(db_path)
        store.delete([e.pod_uid for e in bulk] + ["p"])
        assert store.query("SELECT count(*) FROM response_envs").rows == [(0,)]
        response_rows_consistent(db_path)


def test_conflicts_are_logged_at_error_level_as_before(
    store: PodStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.insert("p", "c", "b.io/r", None, _resp({"E": "b"}, [], [], {}, []))
    store.insert("p", "c", "a.io/r", None, _resp({"E": "a"}, [], [], {}, []))
    with caplog.at_level(logging.WARNING, logger="podstore"):
        opts = store.device_run_container_options("p", "c")
    assert opts is not None and [e.value for e in opts.envs] == ["a"]
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert (
        record.getMessage() == "conflicting setting for env 'E': 'a' kept, 'b' from b.io/r dropped"
    )
