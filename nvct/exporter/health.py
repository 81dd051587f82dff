"""A GPU's health as the exporter reports it: NVML answering, no recent XID that matters, and
the device plugin's own verdict where its status file is on the node.

The same policy as nvct-device-plugin's (ignored XIDs, quiet period), so the gauge agrees with
what the kubelet is told.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from nvct.base.errors import ConfigError
from nvct.base.plugin_status import read_status
from nvct.config import Config, with_table
from nvct.exporter.sample import Reading, XidSeen
from nvct.podresources.ids import DeviceMap

# The plugin's settings that decide a GPU's health; the exporter follows them when recorded.
POLICY = ("quiet-period", "ignored-xids")


@dataclass(frozen=True, slots=True)
class PluginView:
    """What the device plugin's status file says: GPU UUID -> its reason for each GPU it marks
    Unhealthy (any device on it), and the XID policy it judges by (None: not recorded)."""

    verdicts: dict[str, str] = field(default_factory=dict)
    quiet_s: float | None = None
    ignored_xids: tuple[int, ...] | None = None


def plugin_view(plugin_dir: Path, devices: DeviceMap) -> PluginView:
    """The plugin's view; empty when its file is absent or unreadable (no plugin here)."""
    status, _ = read_status(plugin_dir)
    if status is None:
        return PluginView()
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
    policy = {k: status.settings[k] for k in POLICY if k in status.settings}
    try:
        # the same validation as a config file's: a bad value leaves the exporter's own
        recorded = with_table(Config(), "device-plugin", policy, source=str(plugin_dir))
    except ConfigError:
        return PluginView(out)
    return PluginView(
        out,
        recorded.dp_quiet_period if "quiet-period" in policy else None,
        recorded.dp_ignored_xids if "ignored-xids" in policy else None,
    )


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
