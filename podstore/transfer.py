"""Moving state between a PodStore and kubelet checkpoint files (import and export)."""

from __future__ import annotations
