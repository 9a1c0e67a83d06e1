"""Statements over ``cdi_device_nodes`` (revision 0009): the CDI devices' host nodes."""

from __future__ import annotations

CDI_SPEC_ROWS = "SELECT spec_path, name, host_path FROM cdi_device_nodes"
CDI_DELETE_SPEC = "DELETE FROM cdi_device_nodes WHERE spec_path = ?"
CDI_INSERT = "INSERT INTO cdi_device_nodes (spec_path, name, host_path) VALUES (?, ?, ?)"
