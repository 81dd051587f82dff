"""Feature gates of the stand-in API server that change what it stores, as the real one's do.

``DRADeviceTaints`` (alpha in 1.33, off by default there): with it on, a ResourceSlice
device's ``taints`` are kept and each gets ``timeAdded`` where the writer gave none; with it
off, the server drops the field from every device without an error, so only reading the
slice back tells a driver its taints were not kept.
"""

from __future__ import annotations

from typing import Any

from integration.apiserver.store import Kind

DEFAULTS = {"DRADeviceTaints": True}
TIME_ADDED = "2026-01-01T00:00:00Z"


def admit(kind: Kind, obj: dict[str, Any], features: dict[str, bool]) -> dict[str, Any]:
    """``obj`` as the server stores it under ``features``."""
    if kind.resource != "resourceslices":
        return obj
    for device in obj.get("spec", {}).get("devices") or []:
        if not features.get("DRADeviceTaints", False):
            device.pop("taints", None)
            continue
        for taint in device.get("taints") or []:
            taint.setdefault("timeAdded", TIME_ADDED)
    return obj
