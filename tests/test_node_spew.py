"""go-spew's ``%#v`` of the CPU, memory and DRA checkpoint structs, pinned against text written
by hand from go-spew's rules (podstore/checkpoint/spew.py's docstring; kubelet-semantics §6.2):

- the pointer at the top prints ``(*pkg.Type)``; struct fields print ``Name:(type)value``;
- map keys and values and slice elements print no type; a pointer there prints ``<*>`` then
  the value without type, or ``<nil>``; a nil pointer field prints ``(*pkg.T)<nil>``;
- nil maps and slices print ``<nil>``, empty ones ``map[]`` / ``[]``; ``struct {}`` prints
  ``{}``;
- map keys are sorted: integers numerically, strings by their bytes;
- strings are raw, numbers decimal.

Each hand-written text whose values come from an upstream vector also hashes (FNV-1a 32) to
that vector's stored checksum, which shows the hand-written text is Go's.
"""

from __future__ import annotations

from typing import Any

import pytest
from fnv_hash_fast import fnv1a_32

from podstore.checkpoint import cpu_state, dra_v1, memory_state, spew
from podstore.checkpoint.gotypes import Struct
from podstore.checkpoint.versions import Layout, decode_layout, parse


def _decoded(t: Struct, initial: list[Any], text: str) -> list[Any]:
    return decode_layout(Layout("test", t, lambda: list(initial), ()), parse(text, ""))


def _render(t: Struct, initial: list[Any], text: str, renames: Any = ()) -> str:
    return spew.render_value(t, _decoded(t, initial, text), renames)


MEMORY_V1_TEXT = (
    "(*state.MemoryManagerCheckpoint){PolicyName:(string)static "
    "MachineState:(state.NUMANodeMap)map[0:<*>{NumberOfAssignments:(int)0 "
    "MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[memory:<*>{TotalMemSize:(uint64)2048 "
    "SystemReserved:(uint64)512 Allocatable:(uint64)1536 Reserved:(uint64)512 Free:(uint64)1024}] "
    "Cells:([]int)[]}] Entries:(state.ContainerMemoryAssignments)map[pod:map[container1:"
    "[{NUMAAffinity:([]int)[0] Type:(v1.ResourceName)memory Size:(uint64)512}]]] "
    "Checksum:(checksum.Checksum)0}"
)
MEMORY_STATE = (
    '{"policyName":"static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":'
    '{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},'
    '"cells":[]}},"entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}}'
    ","
)


def test_memory_v1_rendering_is_gos() -> None:
    text = _render(
        memory_state.V1,
        ["", {}, {}, 0],
        MEMORY_STATE + '"checksum":0}',
        [("MemoryManagerCheckpointV1", "MemoryManagerCheckpoint")],
    )
    assert text == MEMORY_V1_TEXT
    assert fnv1a_32(MEMORY_V1_TEXT.encode()) == 4215593881  # upstream memory v1 vector


def test_memory_v2_pod_entries_render_as_struct_values() -> None:
    text = _render(
        memory_state.V2,
        ["", {}, {}, {}, 0],
        MEMORY_STATE
        + '"podEntries":{"pod":{"memoryBlocks":[{"numaAffinity":[0],"type":"memory","size":512}]}},'
        '"checksum":0}',
        [("MemoryManagerCheckpointV2", "MemoryManagerCheckpoint")],
    )
    expected = MEMORY_V1_TEXT.replace(
        " Checksum:",
        " PodEntries:(state.PodMemoryAssignments)map[pod:{MemoryBlocks:([]state.Block)"
        "[{NUMAAffinity:([]int)[0] Type:(v1.ResourceName)memory Size:(uint64)512}]}] Checksum:",
    )
    assert text == expected
    assert fnv1a_32(expected.encode()) == 1278640530  # upstream memory v2 vector


def test_pointers_nil_and_empty_and_key_order() -> None:
    doc = (
        '{"policyName":"p","machineState":{'
        '"10":{"numberOfAssignments":-3,"memoryMap":null,"cells":null},'
        '"2":{"numberOfAssignments":1,"memoryMap":{"memory":{"total":18446744073709551615,'
        '"systemReserved":0,"allocatable":1,"reserved":2,"free":3},"hugepages-1Gi":null},'
        '"cells":[2,10]},"-1":null},'
        '"entries":{"b":{"c":null,"a":[]},"a":null},"checksum":0}'
    )
    assert _render(memory_state.V1, ["", {}, {}, 0], doc) == (
        "(*state.MemoryManagerCheckpointV1){PolicyName:(string)p "
        "MachineState:(state.NUMANodeMap)map[-1:<nil> "
        "2:<*>{NumberOfAssignments:(int)1 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)"
        "map[hugepages-1Gi:<nil> memory:<*>{TotalMemSize:(uint64)18446744073709551615 "
        "SystemReserved:(uint64)0 Allocatable:(uint64)1 Reserved:(uint64)2 Free:(uint64)3}] "
        "Cells:([]int)[2 10]} "
        "10:<*>{NumberOfAssignments:(int)-3 "
        "MemoryMap:(map[v1.ResourceName]*state.MemoryTable)<nil> "
        "Cells:([]int)<nil>}] "
        "Entries:(state.ContainerMemoryAssignments)map[a:<nil> b:map[a:[] c:<nil>]] "
        "Checksum:(checksum.Checksum)0}"
    )


def test_nil_maps_at_the_top_and_a_missing_key() -> None:
    # A missing key leaves kubelet's pre-initialised empty map; null makes it nil.
    assert _render(memory_state.V1, ["", {}, {}, 0], '{"machineState":null}') == (
        "(*state.MemoryManagerCheckpointV1){PolicyName:(string) "
        "MachineState:(state.NUMANodeMap)<nil> Entries:(state.ContainerMemoryAssignments)map[] "
        "Checksum:(checksum.Checksum)0}"
    )


CPU_V3_TEXT = (
    "(*state.{name}){{PolicyName:(string)static DefaultCPUSet:(string)1-2 "
    "Entries:(map[string]map[string]string)map[pod1:map[container1:5-6 container2:3-4]] "
    "PodEntries:(state.PodCPUAssignments)map[pod2:{{CPUSet:(cpuset.CPUSet)"
    "{{elems:(map[int]struct {{}})map[7:{{}} 8:{{}} 9:{{}}]}}}}] Checksum:(checksum.Checksum)0}}"
)
CPU_V3_DOC = (
    '{"policyName":"static","defaultCpuSet":"1-2","entries":{"pod1":{"container1":"5-6",'
    '"container2":"3-4"}},"podEntries":{"pod2":{"cpuSet":"7-9"}},"checksum":0}'
)


@pytest.mark.parametrize(
    ("name", "renames", "checksum"),
    [
        ("CPUManagerCheckpoint", [("CPUManagerCheckpointV3", "CPUManagerCheckpoint")], 766259872),
        ("CPUManagerCheckpointV3", [], 2284712151),
    ],
)
def test_cpu_v3_pod_entries_render_the_cpuset_internals(
    name: str, renames: list[tuple[str, str]], checksum: int
) -> None:
    text = _render(cpu_state.V3, ["", "", {}, {}, 0], CPU_V3_DOC, renames)
    assert text == CPU_V3_TEXT.format(name=name)
    assert fnv1a_32(text.encode()) == checksum  # upstream v3 compatibility checksums


def test_cpu_v3_empty_and_null_pod_entries_parse_as_empty_sets() -> None:
    doc = (
        '{"policyName":"","defaultCpuSet":"","entries":{"p":{},"q":null},'
        '"podEntries":{"z":{},"a":{"cpuSet":"3,1-2"},"n":null},"checksum":0}'
    )
    empty = "{CPUSet:(cpuset.CPUSet){elems:(map[int]struct {})map[]}}"
    assert _render(cpu_state.V3, ["", "", {}, {}, 0], doc) == (
        "(*state.CPUManagerCheckpointV3){PolicyName:(string) DefaultCPUSet:(string) "
        "Entries:(map[string]map[string]string)map[p:map[] q:<nil>] "
        "PodEntries:(state.PodCPUAssignments)map[a:{CPUSet:(cpuset.CPUSet){elems:"
        f"(map[int]struct {{}})map[1:{{}} 2:{{}} 3:{{}}]}}}} n:{empty} z:{empty}] "
        "Checksum:(checksum.Checksum)0}"
    )


def test_cpu_v2_and_v1_texts_and_their_upstream_checksums() -> None:
    v2 = _render(
        cpu_state.V2,
        ["", "", {}, 0],
        '{"policyName":"none","defaultCpuSet":"1-3","entries":{"pod":{"container1":"4-6",'
        '"container2":"1-3"}}}',
        [("CPUManagerCheckpointV2", "CPUManagerCheckpoint")],
    )
    assert v2 == (
        "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)1-3 "
        "Entries:(map[string]map[string]string)map[pod:map[container1:4-6 container2:1-3]] "
        "Checksum:(checksum.Checksum)0}"
    )
    assert fnv1a_32(v2.encode()) == 3610638499  # upstream cpu v2 vector
    v1 = _render(
        cpu_state.V1,
        ["", "", {}, 0],
        '{"policyName":"none","defaultCpuSet":"1-3"}',
        [("CPUManagerCheckpointV1", "CPUManagerCheckpoint")],
    )
    assert v1 == (
        "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)1-3 "
        "Entries:(map[string]string)map[] Checksum:(checksum.Checksum)0}"
    )
    assert fnv1a_32(v1.encode()) == 1694838852  # upstream "v1 checksum" vector


def test_strings_are_raw_and_string_keys_sort_by_bytes() -> None:
    doc = (
        '{"policyName":"a b\\n\\"c\\"","defaultCpuSet":"",'
        '"entries":{"z":{},"Z":{},"é":{},"a":{"é":"1","E":"2"}},"checksum":0}'
    )
    assert _render(cpu_state.V2, ["", "", {}, 0], doc) == (
        '(*state.CPUManagerCheckpointV2){PolicyName:(string)a b\n"c" DefaultCPUSet:(string) '
        "Entries:(map[string]map[string]string)map[Z:map[] a:map[E:2 é:1] z:map[] é:map[]] "
        "Checksum:(checksum.Checksum)0}"
    )


def test_a_rename_changes_the_first_occurrence_only() -> None:
    doc = '{"policyName":"CPUManagerCheckpointV2","defaultCpuSet":"","checksum":0}'
    text = _render(
        cpu_state.V2,
        ["", "", {}, 0],
        doc,
        [("CPUManagerCheckpointV2", "CPUManagerCheckpoint")],
    )
    assert text.startswith(
        "(*state.CPUManagerCheckpoint){PolicyName:(string)CPUManagerCheckpointV2 "
    )


DRA_CLASSIC_TEXT = (
    "(*state.DRAManagerCheckpoint){Version:(string)v1 Entries:(state.ClaimInfoStateList)"
    "[{DriverName:(string)test-driver.cdi.k8s.io ClassName:(string)class-name "
    "ClaimUID:(types.UID)067798be-454e-4be4-9047-1aa06aea63f7 ClaimName:(string)example "
    "Namespace:(string)default "
    "PodUIDs:(sets.Set[string])map[139cdb46-f989-4f17-9561-ca10cfb509a6:{}] "
    "ResourceHandles:([]v1alpha2.ResourceHandle)[{DriverName:(string)test-driver.cdi.k8s.io "
    'Data:(string){"a": "b"} StructuredData:(*v1alpha2.StructuredResourceHandle)<nil>}] '
    "CDIDevices:(map[string][]string)map[test-driver.cdi.k8s.io:[example.com/example=cdi-example]]}]"
    " "
    "Checksum:(checksum.Checksum)0}"
)


def test_dra_v1_classic_text_and_nil_pointer_field() -> None:
    doc = (
        '{"version":"v1","entries":[{"DriverName":"test-driver.cdi.k8s.io","ClassName":"class-name",'
        ""
        '"ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"defaul'
        't",'
        '"PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"ResourceHandles":[{"driverName":'
        '"test-driver.cdi.k8s.io","data":"{\\"a\\": '
        '\\"b\\"}"}],"CDIDevices":{"test-driver.cdi.k8s.io":'
        '["example.com/example=cdi-example"]}}],"checksum":0}'
    )
    text = _render(dra_v1.V1_CLASSIC, ["v1", [], 0], doc)
    assert text == DRA_CLASSIC_TEXT
    assert fnv1a_32(text.encode()) == 113577689  # upstream DRA v1 vector


def test_dra_v1_nil_and_empty_members() -> None:
    doc = (
        '{"version":"v1","entries":[{"DriverName":"d","ClaimUID":"u","PodUIDs":null,'
        '"ResourceHandles":[],"CDIDevices":{"x":null,"b":[]}}],"checksum":0}'
    )
    assert _render(dra_v1.V1_CLASSIC, ["v1", [], 0], doc) == (
        "(*state.DRAManagerCheckpoint){Version:(string)v1 Entries:(state.ClaimInfoStateList)"
        "[{DriverName:(string)d ClassName:(string) ClaimUID:(types.UID)u ClaimName:(string) "
        "Namespace:(string) PodUIDs:(sets.Set[string])<nil> "
        "ResourceHandles:([]v1alpha2.ResourceHandle)[] CDIDevices:(map[string][]string)"
        "map[b:[] x:<nil>]}] Checksum:(checksum.Checksum)0}"
    )


def test_dra_v1_structured_text() -> None:
    doc = (
        '{"version":"v1","entries":[{"ClaimUID":"u","PodUIDs":{"b":{},"a":{}},"DriverState":'
        '{"d":{"Devices":null},"c":{"Devices":[{"PoolName":"p","DeviceName":"x",'
        '"RequestNames":[],"CDIDeviceIDs":null}]}}}],"checksum":0}'
    )
    assert _render(dra_v1.V1_STRUCTURED, ["v1", [], 0], doc) == (
        "(*state.DRAManagerCheckpoint){Version:(string)v1 Entries:(state.ClaimInfoStateList)"
        "[{ClaimUID:(types.UID)u ClaimName:(string) Namespace:(string) "
        "PodUIDs:(sets.Set[string])map[a:{} b:{}] DriverState:(map[string]state.DriverState)"
        "map[c:{Devices:([]state.Device)[{PoolName:(string)p DeviceName:(string)x "
        "RequestNames:([]string)[] CDIDeviceIDs:([]string)<nil>}]} "
        "d:{Devices:([]state.Device)<nil>}]}] Checksum:(checksum.Checksum)0}"
    )


def test_dra_v1_without_handles_renames_two_types() -> None:
    text = (
        "(*state.DRAManagerCheckpoint){Version:(string)v1 Entries:(state.ClaimInfoStateList)"
        "[{DriverName:(string)test-driver.cdi.k8s.io ClassName:(string)class-name "
        "ClaimUID:(types.UID)067798be-454e-4be4-9047-1aa06aea63f7 ClaimName:(string)example "
        "Namespace:(string)default "
        "PodUIDs:(sets.Set[string])map[139cdb46-f989-4f17-9561-ca10cfb509a6:{}] "
        "CDIDevices:(map[string][]string)map[test-driver.cdi.k8s.io:[example.com/example=cdi-example"
        "]]}] "
        "Checksum:(checksum.Checksum)0}"
    )
    assert fnv1a_32(text.encode()) == 153446146  # upstream vector written before handles
    claim = [
        "test-driver.cdi.k8s.io",
        "class-name",
        "067798be-454e-4be4-9047-1aa06aea63f7",
        "example",
        "default",
        {"139cdb46-f989-4f17-9561-ca10cfb509a6": []},
        None,
        {"test-driver.cdi.k8s.io": ["example.com/example=cdi-example"]},
    ]
    assert dra_v1._without_handles(["v1", [claim], 0]) == 153446146


def test_string_checksum_prefixes_the_go_type() -> None:
    assert spew.checksum_string("") == fnv1a_32(b"(string)")
    # upstream cpu v4 vector: dataChecksum of its data string
    assert spew.checksum_string('{"policyName":"none","defaultCPUSet":"4-6"}') == 657950972
