"""CDI annotations of kubelet 1.28–1.31 (kubelet-semantics §4.1), through the store and directly."""

from __future__ import annotations

import logging

import pytest
from harness.refmodel import ANNOTATION_NAME, CDI_NAME, resp
from hypothesis import given
from hypothesis import strategies as st

from podstore import Annotation, CDIDevice, PodStore
from podstore.pure import cdi

UID = "11111111-2222-3333-4444-555555555555"  # 36 characters, like a real pod UID


def annotations_of(store: PodStore, pod: str, container: str, **flags: bool) -> list[Annotation]:
    opts = store.device_run_container_options(pod, container, cdi_annotations=True, **flags)
    assert opts is not None
    return opts.annotations


def test_key_and_sorted_comma_joined_value(store: PodStore) -> None:
    store.insert(UID, "main", "r2", None, resp(cdi=["v.com/c=b", "v.com/c=a"]))
    store.insert(UID, "main", "r1", None, resp(cdi=["v.com/c=c", "v.com/c=a"]))
    assert annotations_of(store, UID, "main") == [
        Annotation(f"cdi.k8s.io/devicemanager_{UID}-main", "v.com/c=a,v.com/c=b,v.com/c=c")
    ]


def test_no_cdi_devices_means_no_annotation(store: PodStore) -> None:
    store.insert(UID, "main", "r", None, resp(envs={"A": "1"}))
    assert annotations_of(store, UID, "main") == []


def test_off_by_default(store: PodStore) -> None:
    store.insert(UID, "main", "r", None, resp(cdi=["v.com/c=a"]))
    opts = store.device_run_container_options(UID, "main")
    assert opts is not None
    assert opts.annotations == []
    assert opts.cdi_devices == [CDIDevice("v.com/c=a")]


def test_annotation_without_cdi_devices_field(store: PodStore) -> None:
    store.insert(UID, "main", "r", None, resp(cdi=["v.com/c=a"]))
    opts = store.device_run_container_options(UID, "main", cdi_devices=False, cdi_annotations=True)
    assert opts is not None
    assert opts.cdi_devices == []
    assert opts.annotations == [Annotation(f"cdi.k8s.io/devicemanager_{UID}-main", "v.com/c=a")]


@pytest.mark.parametrize(
    "container,made",
    [("a" * 12, True), ("a" * 13, False)],  # 14 + 36 + 1 + 12 = 63, the limit
)
def test_name_longer_than_63_characters_gives_no_annotation(
    store: PodStore, caplog: pytest.LogCaptureFixture, container: str, made: bool
) -> None:
    store.insert(UID, container, "r", None, resp(cdi=["v.com/c=a"]))
    with caplog.at_level(logging.WARNING, logger="podstore"):
        got = annotations_of(store, UID, container)
    assert bool(got) is made
    assert any("Failed to create CDI annotations" in r.getMessage() for r in caplog.records) is (
        not made
    )
    # The devices still reach the runtime through the CRI field.
    opts = store.device_run_container_options(UID, container, cdi_annotations=True)
    assert opts is not None
    assert opts.cdi_devices == [CDIDevice("v.com/c=a")]


@pytest.mark.parametrize("bad", ["unqualified", "v.com/c", "/v.com/c=a", "v.com/c=a b", "v/c="])
def test_an_invalid_cdi_name_gives_no_annotation(
    store: PodStore, caplog: pytest.LogCaptureFixture, bad: str
) -> None:
    store.insert(UID, "main", "r", None, resp(cdi=["v.com/c=ok", bad]))
    with caplog.at_level(logging.WARNING, logger="podstore"):
        assert annotations_of(store, UID, "main") == []
    assert any("Failed to create CDI annotations" in r.getMessage() for r in caplog.records)
    opts = store.device_run_container_options(UID, "main", cdi_annotations=True)
    assert opts is not None
    assert opts.cdi_devices == [CDIDevice("v.com/c=ok"), CDIDevice(bad)]


@pytest.mark.parametrize("name", ["a/b=c", "a/bb=c", "aa/b=c", "a/b=1"])
def test_one_character_vendor_or_class_does_not_crash(store: PodStore, name: str) -> None:
    # Upstream's validators panic here (slice bounds); a port judges first/last characters only.
    store.insert(UID, "main", "r", None, resp(cdi=[name]))
    assert annotations_of(store, UID, "main") == [
        Annotation(f"cdi.k8s.io/devicemanager_{UID}-main", name)
    ]


def test_slashes_in_the_claim_become_underscores(store: PodStore) -> None:
    store.insert("ns/pod", "c", "r", None, resp(cdi=["v.com/c=a"]))
    assert annotations_of(store, "ns/pod", "c") == [
        Annotation("cdi.k8s.io/devicemanager_ns_pod-c", "v.com/c=a")
    ]


def test_a_name_ending_in_a_dash_is_refused(store: PodStore) -> None:
    store.insert("p", "", "r", None, resp(cdi=["v.com/c=a"]))
    assert annotations_of(store, "p", "") == []


@pytest.mark.parametrize("value", ["plugin-value", "v.com/c=a"])
def test_a_plugin_annotation_with_the_same_key_wins(store: PodStore, value: str) -> None:
    key = f"cdi.k8s.io/devicemanager_{UID}-main"
    store.insert(UID, "main", "r", None, resp(cdi=["v.com/c=a"], annotations={key: value}))
    assert annotations_of(store, UID, "main") == [Annotation(key, value)]


# ---- the validators themselves --------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["a/b=c", "vendor.com/class=dev0", "v-1.x/c_2=d:e.f-g", "v/c=0", "V/C=Z", "a1/b2=c3"],
)
def test_valid_device_names(name: str) -> None:
    assert cdi.device_name_error(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/abs",
        "noequals",
        "v/c=",
        "=x",
        "vc=x",
        "/c=x",
        "v/=x",
        "1v/c=x",  # vendor must start with a letter
        "v./c=x",  # vendor must end alphanumeric
        "v/c.x=y",  # '.' is not allowed in a class
        "v/-c=x",
        "v/1c=x",
        "v/c-=x",
        "v/c=-x",
        "v/c=x-",
        "v/c=x y",
        "v/c/d=x",
        "v/c=a=b",
        "ü/c=x",
        "v/c=ü",
        "_/c=x",
        "v/_=x",
        "v/c=_",
    ],
)
def test_invalid_device_names(name: str) -> None:
    assert cdi.device_name_error(name) is not None


@given(st.text(alphabet="ab1._-:/=ü ", max_size=8))
def test_device_name_rules_match_the_grammar(name: str) -> None:
    assert (cdi.device_name_error(name) is None) == bool(CDI_NAME.fullmatch(name))


@given(st.text(alphabet="aZ9._-/ü", min_size=1, max_size=70))
def test_annotation_name_rules_match_the_grammar(name: str) -> None:
    want = len(name) <= 63 and bool(ANNOTATION_NAME.fullmatch(name))
    assert (cdi.annotation_name_error(name) is None) == want


def test_generate_annotations_directly() -> None:
    assert cdi.generate_annotations("p", "c", []) == []
    assert cdi.generate_annotations("p", "c", ["b.io/x=2", "a.io/x=1"]) == [
        ("cdi.k8s.io/devicemanager_p-c", "a.io/x=1,b.io/x=2")
    ]
