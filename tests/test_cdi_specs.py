"""CDI spec files as node facts: the reader (every cdiVersion from 0.3 to 1.x, JSON and YAML;
bad and partial specs reported and skipped, never fatal) and what ``podstore import-node``
keeps when a source cannot be read (a missing source never deletes what a present one wrote).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from harness.cli import podstore
from harness.physical import PhysicalNode, entry, response

from podstore import PodStore
from podstore.checkpoint import cdi_specs
from podstore.checkpoint.cdi_specs import parse_spec, read_cdi_specs

YAML_SPEC = """\
cdiVersion: "0.3.0"
kind: vendor.example/gpu
containerEdits:
  deviceNodes:
    - path: /dev/ctl
devices:
  - name: gpu0
    containerEdits:
      deviceNodes:
        - path: /dev/card0
  - name: gpu1
    containerEdits:
      deviceNodes:
        - path: /dev/in-container
          hostPath: /dev/card1
"""


def _json(devices: list[object], version: str = "1.0.0", **extra: object) -> str:
    return json.dumps({"cdiVersion": version, "kind": "v.example/c", "devices": devices, **extra})


def _dev(name: str, *paths: str) -> dict[str, object]:
    return {"name": name, "containerEdits": {"deviceNodes": [{"path": p} for p in paths]}}


def test_yaml_and_json_specs_of_every_version(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(YAML_SPEC)
    for version in ("0.5.0", "0.8.0", "1.0.0", "1.1.0"):
        (tmp_path / f"v{version}.json").write_text(
            _json([_dev(f"d{version[0]}{version[2]}", f"/dev/x{version}")], version)
        )
    (tmp_path / "README.md").write_text("not a spec: other names are not read")
    specs = read_cdi_specs([str(tmp_path)])
    assert specs.skipped == () and specs.unreadable == () and specs.absent == ()
    assert specs.devices[str(tmp_path / "a.yaml")] == {
        "vendor.example/gpu=gpu0": ("/dev/card0", "/dev/ctl"),
        "vendor.example/gpu=gpu1": ("/dev/card1", "/dev/ctl"),  # the host path, not the path
    }
    assert specs.devices[str(tmp_path / "v1.1.0.json")] == {"v.example/c=d11": ("/dev/x1.1.0",)}
    assert len(specs.devices) == 5


@pytest.mark.parametrize(
    ("text", "name", "why"),
    [
        ("{not json", "s.json", "not JSON"),
        ("a: [b", "s.yaml", "not YAML"),
        ("- a list", "s.yaml", "not a mapping"),
        (_json([], "0.2.0"), "s.json", "cdiVersion '0.2.0' is not 0.3 to 1.x"),
        (json.dumps({"kind": "v.example/c", "devices": []}), "s.json", "cdiVersion None"),
        (_json([]).replace("v.example/c", "v.example"), "s.json", "is not vendor/class"),
        (_json([]).replace('"devices": []', '"devices": {}'), "s.json", "devices is not a list"),
        (
            _json([], containerEdits={"deviceNodes": "/dev/x"}),
            "s.json",
            "deviceNodes is not a list",
        ),
    ],
)
def test_a_file_that_is_no_spec_is_refused_whole(text: str, name: str, why: str) -> None:
    with pytest.raises(ValueError, match="not JSON"):
        parse_spec(b"\xff{}", "s.json")  # not UTF-8
    with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(text.encode("utf-8"), name)


def test_a_partial_spec_keeps_its_good_devices_and_names_the_others() -> None:
    text = _json(
        [
            _dev("good", "/dev/g"),
            {"containerEdits": {}},  # no name
            _dev("bad name!", "/dev/b"),
            _dev("relative", "dev/r"),
            {"name": "nodes-not-a-list", "containerEdits": {"deviceNodes": {}}},
            _dev("good", "/dev/again"),
            {"name": "nodeless"},
        ]
    )
    devices, skipped = parse_spec(text.encode(), "p.json")
    assert devices == {"v.example/c=good": ("/dev/g",), "v.example/c=nodeless": ()}
    assert skipped == [
        "devices[1]: no valid name",
        "devices[2]: no valid name",
        "v.example/c=relative: deviceNodes[0] has no absolute path",
        "v.example/c=nodes-not-a-list: deviceNodes is not a list",
        "v.example/c=good: named again (the first is kept)",
    ]


def test_the_specs_own_nodes_go_only_with_a_device_that_has_nodes() -> None:
    common = {"deviceNodes": [{"path": "/dev/ctl"}]}
    text = _json([_dev("card", "/dev/card"), {"name": "bare"}], containerEdits=common)
    devices, skipped = parse_spec(text.encode(), "s.json")
    # Alone, the control node would make "bare" a part of every card of the spec.
    assert devices == {"v.example/c=card": ("/dev/card", "/dev/ctl"), "v.example/c=bare": ()}
    assert skipped == []


def test_an_oversized_file_is_no_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cdi_specs, "MAX_SPEC_BYTES", 64)
    (tmp_path / "big.json").write_text(_json([_dev("d", "/dev/" + "x" * 100)]))
    specs = read_cdi_specs([str(tmp_path)])
    assert specs.unreadable == (str(tmp_path / "big.json"),)
    assert specs.skipped == (f"{tmp_path / 'big.json'}: larger than 64 bytes",)


def test_a_name_in_two_files_is_kept_from_both_and_said(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(_json([_dev("d", "/dev/a")]))
    (tmp_path / "b.json").write_text(_json([_dev("d", "/dev/b")]))
    specs = read_cdi_specs([str(tmp_path)])
    assert len(specs.devices) == 2
    assert specs.skipped == (
        f"{tmp_path / 'b.json'}: v.example/c=d also in {tmp_path / 'a.json'} (both are kept)",
    )


# ---- podstore import-node ------------------------------------------------------------------


def _import(root: Path, kubelet: Path, *cdi: Path) -> tuple[str, str]:
    args = [a for d in cdi for a in ("--cdi-dir", str(d))]
    out = podstore(
        "--db", str(root / "s.db"), "import-node", str(kubelet), "--sysfs", str(root / "no-sys"),
        "--pod-logs", str(root / "no-logs"), *args, cwd=root,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout, out.stderr


def _stored(root: Path) -> dict[str, set[str]]:
    with PodStore.open(root / "s.db", readonly=True) as store:
        out: dict[str, set[str]] = {}
        for path, name, node in store.query("SELECT * FROM cdi_device_nodes").rows:
            out.setdefault(f"{Path(path).name}:{name}", set()).add(node)
        return out


@pytest.fixture
def kubelet(tmp_path: Path) -> Path:
    node = PhysicalNode(entries=[entry("a", ["d"], response(cdi=("v.example/c=d",)))])
    return node.write(tmp_path / "node")[0]


def test_bad_and_partial_specs_are_reported_on_stderr_and_skipped(
    tmp_path: Path, kubelet: Path
) -> None:
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (cdi / "bad.json").write_text("{")
    (cdi / "partial.yaml").write_text(YAML_SPEC.replace("/dev/card0", "card0"))
    (cdi / "good.json").write_text(_json([_dev("d", "/dev/d")]))
    stdout, stderr = _import(tmp_path, kubelet, cdi)
    assert "imported CDI specs: 2 devices, 2 spec files written, 0 removed" in stdout
    lines = stderr.splitlines()
    assert any(
        x.startswith(f"warning: CDI spec skipped: {cdi / 'bad.json'}: not JSON") for x in lines
    )
    assert (
        f"warning: CDI spec skipped: {cdi / 'partial.yaml'}: vendor.example/gpu=gpu0: "
        "deviceNodes[0] has no absolute path"
    ) in lines
    assert _stored(tmp_path) == {
        "good.json:v.example/c=d": {"/dev/d"},
        "partial.yaml:vendor.example/gpu=gpu1": {"/dev/card1", "/dev/ctl"},
    }
    with PodStore.open(tmp_path / "s.db", readonly=True) as store:
        ((physical_id, resolved),) = store.query(
            "SELECT physical_id, resolved FROM v_physical_devices"
        ).rows
    assert (physical_id, resolved) == ('["/dev/d"]', 1)


def test_a_missing_source_never_deletes_what_a_present_one_wrote(
    tmp_path: Path, kubelet: Path
) -> None:
    cdi, other = tmp_path / "cdi", tmp_path / "other"
    cdi.mkdir()
    other.mkdir()
    (cdi / "a.json").write_text(_json([_dev("d", "/dev/d")]))
    (cdi / "b.json").write_text(_json([_dev("e", "/dev/e")]))
    (other / "c.json").write_text(_json([_dev("f", "/dev/f")]))
    _import(tmp_path, kubelet, cdi, other)
    everything = _stored(tmp_path)
    assert len(everything) == 3

    # A directory that is not there keeps its rows; the other is read as it is.
    shutil.move(cdi, tmp_path / "moved")
    (other / "c.json").write_text(_json([_dev("f", "/dev/f2")]))
    stdout, _ = _import(tmp_path, kubelet, cdi, other)
    assert f"absent: CDI directory {cdi} (left as it was)" in stdout
    assert _stored(tmp_path) == {**everything, "c.json:v.example/c=f": {"/dev/f2"}}

    # A spec that cannot be read keeps what it gave; one that went takes its rows along.
    shutil.move(tmp_path / "moved", cdi)
    (cdi / "a.json").write_text("{")
    (cdi / "b.json").unlink()
    stdout, stderr = _import(tmp_path, kubelet, cdi, other)
    assert "1 removed" in stdout and "a.json: not JSON" in stderr
    assert set(_stored(tmp_path)) == {"a.json:v.example/c=d", "c.json:v.example/c=f"}

    # Present and empty is "no CDI devices".
    for f in cdi.iterdir():
        f.unlink()
    _import(tmp_path, kubelet, cdi, other)
    assert set(_stored(tmp_path)) == {"c.json:v.example/c=f"}

    # Unchanged specs write nothing.
    stdout, _ = _import(tmp_path, kubelet, cdi, other)
    assert "0 spec files written, 0 removed (unchanged)" in stdout
