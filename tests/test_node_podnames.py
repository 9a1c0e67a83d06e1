"""Pod names read from fake pod log directories, junk included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podstore.checkpoint import PodName, read_pod_names
from podstore.checkpoint.podnames import parse_pod_log_dir


def test_kubelet_layout(tmp_path: Path) -> None:
    (tmp_path / "kube-system_coredns-5d78c9869d-abcde_0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b").mkdir()
    (tmp_path / "gpu-jobs_train.v2-0_11111111-2222-3333-4444-555555555555").mkdir()
    # A static pod's UID is a hash, not a UUID.
    (tmp_path / "kube-system_etcd-node-1_3c9f2a6d1b8e4f0a9c7d5e3b1a2f4c6d").mkdir()
    names = read_pod_names(tmp_path)
    assert names.pods == {
        "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b": PodName("kube-system", "coredns-5d78c9869d-abcde"),
        "11111111-2222-3333-4444-555555555555": PodName("gpu-jobs", "train.v2-0"),
        "3c9f2a6d1b8e4f0a9c7d5e3b1a2f4c6d": PodName("kube-system", "etcd-node-1"),
    }
    assert names.skipped == ()


def test_missing_directory_reads_as_no_names(tmp_path: Path) -> None:
    assert read_pod_names(tmp_path / "absent").pods == {}


@pytest.mark.parametrize(
    "name",
    [
        "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b",  # the pre-1.14 layout: UID only
        "ns_name",  # two parts
        "ns_na_me_uid",  # four parts (a name cannot hold "_")
        "_name_uid",
        "ns__uid",
        "ns_name_",
        "Upper_name_uid",  # namespaces are lowercase DNS labels
        "ns_Name_uid",
        "ns_-name_uid",
        "ns_name._uid",
        "ns_name_uid/x",
        "ns_name_u id",
        "n" * 64 + "_name_uid",  # a label is at most 63 characters
        "ns_" + "n" * 254 + "_uid",
        "ns_name_" + "u" * 129,
        "ns_nämé_uid",
    ],
)
def test_names_that_are_not_pod_log_directories(name: str) -> None:
    assert parse_pod_log_dir(name) is None


def test_junk_is_skipped_and_named(tmp_path: Path) -> None:
    (tmp_path / "default_web-0_aaaa").mkdir()
    (tmp_path / "default_web-1_aaaa").mkdir()  # the same UID again
    (tmp_path / "default_web-2_bbbb").write_text("a file")
    (tmp_path / "no-underscores").mkdir()
    (tmp_path / "default_link_cccc").symlink_to(tmp_path / "default_web-0_aaaa")
    (tmp_path / "default_dangling_dddd").symlink_to(tmp_path / "absent")
    os.mkdir(os.fsencode(tmp_path) + b"/bad\xff_name_uid")
    names = read_pod_names(tmp_path)
    assert names.pods == {"aaaa": PodName("default", "web-0"), "cccc": PodName("default", "link")}
    reasons = dict(s.split(": ", 1) for s in names.skipped)
    assert reasons == {
        "default_web-1_aaaa": "UID already named by default_web-0",
        "default_web-2_bbbb": "not a directory",
        "default_dangling_dddd": "not a directory",
        "no-underscores": "not NAMESPACE_NAME_UID",
        "bad\\udcff_name_uid": "not NAMESPACE_NAME_UID",
    }
