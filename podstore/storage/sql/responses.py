"""The SQL of the decoded response rows (``response_*``), written with each allocation."""

from __future__ import annotations

INSERT_ENV = "INSERT INTO response_envs (allocation_id, position, name, value) VALUES (?, ?, ?, ?)"
INSERT_MOUNT = """
    INSERT INTO response_mounts (allocation_id, position, container_path, host_path, read_only)
    VALUES (?, ?, ?, ?, ?)
"""
INSERT_DEVICE = """
    INSERT INTO response_devices (allocation_id, position, container_path, host_path,
                                  permissions)
    VALUES (?, ?, ?, ?, ?)
"""
INSERT_ANNOTATION = """
    INSERT INTO response_annotations (allocation_id, position, name, value) VALUES (?, ?, ?, ?)
"""
INSERT_CDI = "INSERT INTO response_cdi_devices (allocation_id, position, name) VALUES (?, ?, ?)"

# A replacing insert keeps the allocation row, so its old response rows go explicitly (a
# deleted allocation loses them by ON DELETE CASCADE).
CLEAR_ENVS = "DELETE FROM response_envs WHERE allocation_id = ?"
CLEAR_MOUNTS = "DELETE FROM response_mounts WHERE allocation_id = ?"
CLEAR_DEVICES = "DELETE FROM response_devices WHERE allocation_id = ?"
CLEAR_ANNOTATIONS = "DELETE FROM response_annotations WHERE allocation_id = ?"
CLEAR_CDI = "DELETE FROM response_cdi_devices WHERE allocation_id = ?"
CLEAR = (CLEAR_ENVS, CLEAR_MOUNTS, CLEAR_DEVICES, CLEAR_ANNOTATIONS, CLEAR_CDI)
