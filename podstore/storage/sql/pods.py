"""What a pod is, said once for every count and listing (``podstore status``, the ``podstore_pods``
gauge, ``podstore pods``): a UID holding device entries, a container's exclusive CPUs or memory
blocks, or DRA claims (a name alone is no pod, nor a pod-level CPU or memory entry).

The CPU, memory and DRA managers' pods are found through the unique indexes of ``pods`` and
``containers``, so a count costs no pass over the device entries.
"""

from __future__ import annotations

#: (pod_uid, container) of every CPU, memory and DRA holding (container NULL for a claim).
NODE_HOLDERS = """
    SELECT pod_uid, container FROM cpu_assignments
    WHERE pod_uid IS NOT NULL AND container IS NOT NULL
    UNION
    SELECT pod_uid, container FROM memory_assignments WHERE container IS NOT NULL
    UNION
    SELECT pod_uid, NULL FROM dra_claim_pods
"""

POD_COUNT = f"""
    SELECT (SELECT count(*) FROM pods) + count(DISTINCT n.pod_uid)
    FROM ({NODE_HOLDERS}) n
    WHERE NOT EXISTS (SELECT 1 FROM pods p WHERE p.uid = n.pod_uid)
"""

CONTAINER_COUNT = f"""
    SELECT (SELECT count(*) FROM containers) + count(*)
    FROM ({NODE_HOLDERS}) n
    WHERE n.container IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM pods p JOIN containers c ON c.pod_id = p.id
        WHERE p.uid = n.pod_uid AND c.name = n.container)
"""


def containers_of(pod: str) -> str:
    """A scalar sub-query: how many containers the pod ``pod`` (an SQL expression) has, of
    every manager."""
    return f"""(SELECT count(*) FROM (
        SELECT c.name FROM pods p JOIN containers c ON c.pod_id = p.id WHERE p.uid = {pod}
        UNION
        SELECT container FROM cpu_assignments WHERE pod_uid = {pod} AND container IS NOT NULL
        UNION
        SELECT container FROM memory_assignments WHERE pod_uid = {pod} AND container IS NOT NULL
    ))"""
