"""A GPU's health as the exporter reports it: NVML answering, NVML's recovery action and row
remapping, no XID that still holds the GPU, and the device plugin's own verdict where its
status file is on the node.

The same policy as nvct-device-plugin's (``nvct.node.health.policy``: ignored XIDs, the quiet
period, XIDs that hold a GPU until it was reset), so the gauge agrees with what the kubelet is
told. Where the plugin runs (its status file exists), it is the one that holds a GPU until a
reset: it keeps the hold across restarts and an operator's clear reaches it. The exporter then
counts its own XIDs for the quiet period only and shows the plugin's reason.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from nvct.base.errors import ConfigError, NvctError
from nvct.config import Config, with_table
from nvct.exporter.sample import Reading, XidSeen
from nvct.kubeapi.podresources.ids import DeviceMap
from nvct.node.health.latches import LatchFile
from nvct.node.health.policy import RESET, TRANSIENT, GpuCondition, holds, remap_failure, xid_effect
from nvct.node.status import read_status

NOT_REPORTED = GpuCondition()  # NVML said nothing about the GPU's memory health
# The plugin's settings that decide a GPU's health; the exporter follows them when recorded.
POLICY = ("quiet-period", "ignored-xids")


@dataclass(frozen=True, slots=True)
class PluginView:
    """What the device plugin's status file says: GPU UUID -> its reason for each GPU it marks
    Unhealthy (any device on it), and the XID policy it judges by (None: not recorded);
    ``present``: the plugin runs here; ``accepted``: UUIDs whose row-remapping failure an
    operator accepted (its latch file)."""

    verdicts: dict[str, str] = field(default_factory=dict)
    quiet_s: float | None = None
    ignored_xids: tuple[int, ...] | None = None
    present: bool = False
    accepted: frozenset[str] = frozenset()


def plugin_view(plugin_dir: Path, devices: DeviceMap) -> PluginView:
    """The plugin's view; empty when its file is absent or unreadable (no plugin here)."""
    status, _ = read_status(plugin_dir)
    if status is None:
        return PluginView()
    try:
        accepted = LatchFile(plugin_dir, "").accepted()
    except NvctError:
        accepted = frozenset()
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
        return PluginView(out, present=True, accepted=accepted)
    return PluginView(
        out,
        recorded.device_plugin.quiet_period if "quiet-period" in policy else None,
        recorded.device_plugin.ignored_xids if "ignored-xids" in policy else None,
        present=True,
        accepted=accepted,
    )


def verdict(
    reading: Reading,
    xids: XidSeen,
    plugin_reason: str,
    *,
    now: float,
    quiet_s: float,
    ignored_xids: Collection[int],
    condition: GpuCondition = NOT_REPORTED,
    plugin_holds: bool = False,
    accepted: bool = False,
) -> tuple[bool, str]:
    """(healthy, reason): NVML's error first, then NVML's recovery action or a row-remapping
    failure (unless an operator ``accepted`` it), then the XIDs that still hold the GPU, then
    the plugin's word. ``plugin_holds``: the plugin holds GPUs until reset, not the exporter."""
    if reading.error:
        return False, f"NVML: {reading.error}"
    if asks := condition.asks():
        return False, asks
    if condition.remap_failure and not accepted:
        return False, remap_failure().reason
    held = []
    for code, at in sorted(xids.seen_at.items()):
        effect = xid_effect(code, frozenset(ignored_xids))
        hold = TRANSIENT if plugin_holds and effect.hold == RESET else effect.hold
        if effect.counts and holds(hold, at, now, quiet=quiet_s, condition=condition):
            held.append(effect.reason)
    if held:
        return False, "; ".join(held)
    if plugin_reason:
        return False, plugin_reason
    return True, ""
