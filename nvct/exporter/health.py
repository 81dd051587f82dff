"""A GPU's health as the exporter reports it: NVML answering, no recent XID that matters, and
the device plugin's own verdict where its status file is on the node.

The same policy as nvct-device-plugin's (ignored XIDs, quiet period), so the gauge agrees with
what the kubelet is told.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from nvct.base.plugin_status import read_status
from nvct.exporter.sample import Reading, XidSeen
from nvct.podresources.ids import DeviceMap


def plugin_verdicts(plugin_dir: Path, devices: DeviceMap) -> dict[str, str]:
    """GPU UUID → the plugin's reason for each GPU it marks Unhealthy (any device on it);
    empty when the file is absent or unreadable (no plugin on this node)."""
    status, _ = read_status(plugin_dir)
    if status is None:
        return {}
    out: dict[str, str] = {}
    for entries in status.resources.values():
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict) or entry.get("health") != "Unhealthy":
                continue
            gpu = devices.gpu_of(str(entry.get("uuid", ""))) or devices.gpu_of(
                str(entry.get("id", ""))
            )
            if gpu is not None:
                out.setdefault(gpu, f"device plugin: {entry.get('reason') or 'Unhealthy'}")
    return out


def verdict(
    reading: Reading,
    xids: XidSeen,
    plugin_reason: str,
    *,
    now: float,
    quiet_s: float,
    ignored_xids: Collection[int],
) -> tuple[bool, str]:
    """(healthy, reason): NVML's error first, then a recent XID, then the plugin's word."""
    if reading.error:
        return False, f"NVML: {reading.error}"
    recent = [c for c, at in xids.seen_at.items() if c not in ignored_xids and now - at < quiet_s]
    if recent:
        return False, "XID " + ", ".join(map(str, sorted(recent)))
    if plugin_reason:
        return False, plugin_reason
    return True, ""
