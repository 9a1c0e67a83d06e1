"""``podstore run-options POD_UID CONTAINER``: the runtime settings kubelet would pass."""

from __future__ import annotations

from typing import Any

import click

from podstore.cli.common import complete_containers, complete_pods, not_found
from podstore.cli.context import Context
from podstore.cli.output import emit, output_option

COLUMNS = ["kind", "name", "value", "permissions", "read_only"]


@click.command("run-options")
@click.argument("pod_uid", shell_complete=complete_pods)
@click.argument("container", shell_complete=complete_containers)
@click.option(
    "--cdi-annotations",
    is_flag=True,
    help="Add the cdi.k8s.io/ annotation kubelet 1.28-1.31 generated.",
)
@click.option(
    "--no-cdi-devices", is_flag=True, help="Leave CDI devices out (kubelet 1.28-1.31, gate off)."
)
@output_option
@click.pass_obj
def run_options(
    ctx: Context,
    pod_uid: str,
    container: str,
    cdi_annotations: bool,
    no_cdi_devices: bool,
    output: str,
) -> None:
    """Show the merged envs, mounts, devices, annotations and CDI devices of a container.

    KIND is env, mount, device, annotation or cdi; NAME the env name, container path,
    annotation key or CDI name; VALUE the env or annotation value, or the host path.
    Conflicting settings are reported on stderr (the first one wins, as docs/api.md says).
    Exit status 1 if the pod or container is unknown.
    """
    store = ctx.store(readonly=True)
    opts = store.device_run_container_options(
        pod_uid, container, cdi_devices=not no_cdi_devices, cdi_annotations=cdi_annotations
    )
    if opts is None:
        not_found(f"container {container!r} of pod {pod_uid!r} not found")
    rows: list[dict[str, Any]] = []
    rows.extend({"kind": "env", "name": e.name, "value": e.value} for e in opts.envs)
    rows.extend(
        {
            "kind": "mount",
            "name": m.container_path,
            "value": m.host_path,
            "read_only": m.read_only,
        }
        for m in opts.mounts
    )
    rows.extend(
        {
            "kind": "device",
            "name": d.path_in_container,
            "value": d.path_on_host,
            "permissions": d.permissions,
        }
        for d in opts.devices
    )
    rows.extend({"kind": "annotation", "name": a.name, "value": a.value} for a in opts.annotations)
    rows.extend({"kind": "cdi", "name": c.name} for c in opts.cdi_devices)
    emit(rows, COLUMNS, output)
