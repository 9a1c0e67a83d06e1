"""The kubelet-style baseline: in-memory maps plus a full checkpoint rewrite per mutation.

This is what kubelet's device manager does (kubelet-semantics.md §8.2, §8.5): after each
container allocation, ``toCheckpointData`` (every response marshalled again), the checksum and
JSON encoding (podstore's own ``dumps_checkpoint``, which reproduces kubelet's bytes), then
``FileStore.Write``: a temp file ``.<name>*`` in the same directory, write, fsync, close,
rename. Like kubelet it does *not* fsync the directory (``write_checkpoint_file`` does, which
would only make this baseline slower). Pod removal does not write (upstream neither).
"""

from __future__ import annotations

import base64
import json
import os
import tempfile

from bench.refmaps import PodDevicesMaps
from podstore import ContainerAllocateResponse
from podstore.checkpoint import dumps_checkpoint, read_checkpoint


def file_store_write(path: str, data: bytes) -> None:
    """kubelet's ``FileStore.Write``: temp file in the same directory, fsync, rename."""
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + name, dir=directory)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.rename(tmp, path)


class KubeletStyle:
    """podDevices maps whose every insert is followed by a full checkpoint write."""

    def __init__(self, path: str, registered: dict[str, list[str]]) -> None:
        self.path = path
        self.maps = PodDevicesMaps()
        self.registered = registered

    def write_checkpoint(self) -> None:
        data = dumps_checkpoint(self.maps.to_checkpoint_data(), self.registered)
        file_store_write(self.path, data)

    def insert(
        self,
        pod_uid: str,
        container_name: str,
        resource_name: str,
        devices: dict[int, list[str]],
        alloc_resp: ContainerAllocateResponse,
    ) -> None:
        self.maps.insert(pod_uid, container_name, resource_name, devices, alloc_resp)
        self.write_checkpoint()

    def delete(self, pod_uid: str) -> None:
        """UpdateAllocatedDevices: memory only, the next write persists it."""
        self.maps.delete([pod_uid])

    @classmethod
    def load(cls, path: str) -> KubeletStyle:
        """kubelet's startup: read, verify the checksum, fromCheckpointData, devices()."""
        cp = read_checkpoint(path)
        registered = {r: list(ids or ()) for r, ids in (cp.registered_devices or {}).items()}
        ks = cls(path, registered)
        ks.maps.from_checkpoint_data(cp.entries)
        ks.allocated = ks.maps.devices()
        return ks

    allocated: dict[str, set[str]] | None = None


def load_without_checksum(path: str) -> PodDevicesMaps:
    """The floor of reading a checkpoint: ``json.loads`` and the maps built from it (each
    response unmarshalled, as fromCheckpointData does), with no checksum and no checks."""
    with open(path, "rb") as f:
        data = json.loads(f.read())["Data"]
    maps = PodDevicesMaps()
    for e in data.get("PodDeviceEntries") or ():
        resp = ContainerAllocateResponse()
        resp.ParseFromString(base64.b64decode(e.get("AllocResp") or ""))
        ids = {int(k): v for k, v in (e.get("DeviceIDs") or {}).items()}
        maps.insert(e["PodUID"], e["ContainerName"], e["ResourceName"], ids, resp)
    return maps
