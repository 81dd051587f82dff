"""The exporter's health verdict: NVML's error, recent XIDs outside the ignored list, and the
device plugin's status file."""

from __future__ import annotations

import json
from pathlib import Path

from nvct.exporter.health import PluginView, plugin_view, verdict
from nvct.exporter.sample import Reading, XidSeen
from nvct.kubeapi.podresources.ids import DeviceMap, GpuIds
from nvct.node.files import STATUS_FILE
from nvct.node.health.latches import LatchFile
from nvct.node.health.policy import GpuCondition
from nvct.node.status import status_bytes

DEVICES = DeviceMap([GpuIds("GPU-a", 0), GpuIds("GPU-b", 1, (("MIG-b1", 0),))])
IGNORED = (13, 31, 43, 45, 68, 109)
BUSY = Reading({"DCGM_FI_DEV_GPU_UTIL": 1})


def test_verdict_order_and_quiet_period() -> None:
    def judge(reading: Reading, xids: XidSeen, plugin: str = "", now: float = 100.0) -> tuple:
        return verdict(reading, xids, plugin, now=now, quiet_s=30, ignored_xids=IGNORED)

    ok = BUSY
    assert judge(ok, XidSeen()) == (True, "")
    assert judge(Reading(error="GPU is lost"), XidSeen()) == (False, "NVML: GPU is lost")
    recent = XidSeen(94, {94: 1}, {94: 90.0})
    app = "XID 94 (ROBUST_CHANNEL_CONTAINED_ERROR): restart the application"
    assert judge(ok, recent) == (False, app)
    assert judge(ok, recent, now=121.0) == (True, "")  # quiet for 30 s: healthy again
    assert judge(ok, XidSeen(13, {13: 5}, {13: 99.0})) == (True, "")  # an ignored XID
    assert judge(ok, XidSeen(), "device plugin: XID 79") == (False, "device plugin: XID 79")


def test_an_xid_that_needs_a_reset_holds_as_in_the_plugin() -> None:
    dbe = XidSeen(48, {48: 1}, {48: 0.0})
    reason = "XID 48 (ROBUST_CHANNEL_GPU_ECC_DBE): reset the GPU to remap the row"

    def judge(condition: GpuCondition, plugin_holds: bool = False) -> tuple[bool, str]:
        return verdict(
            BUSY, dbe, "", now=1000.0, quiet_s=30, ignored_xids=IGNORED,
            condition=condition, plugin_holds=plugin_holds,
        )  # fmt: skip

    assert judge(GpuCondition()) == (False, reason)  # NVML cannot say it was reset
    assert judge(GpuCondition(recovery_action=1)) == (False, "NVML recovery action: GPU reset")
    assert judge(GpuCondition(recovery_action=0, remap_pending=True)) == (False, reason)
    assert judge(GpuCondition(recovery_action=0, remap_pending=False)) == (True, "")
    # the plugin runs here: it holds (and its reason arrives through its status file)
    assert judge(GpuCondition(), plugin_holds=True) == (True, "")
    failed = GpuCondition(recovery_action=0, remap_failure=True)
    assert judge(failed) == (False, "row remapping failed: the GPU needs service")
    accepted = verdict(
        BUSY, XidSeen(), "", now=0, quiet_s=30, ignored_xids=IGNORED,
        condition=failed, accepted=True,
    )  # fmt: skip
    assert accepted == (True, "")


RESOURCES = {
    "nvidia.com/gpu": [
        {"id": "GPU-a", "uuid": "GPU-a", "health": "Healthy", "reason": ""},
    ],
    "nvidia.com/mig-1g.10gb": [
        {"id": "MIG-b1", "uuid": "MIG-b1", "health": "Unhealthy", "reason": "XID 79"}
    ],
}


def test_plugin_status_file(tmp_path: Path) -> None:
    assert plugin_view(tmp_path, DEVICES) == PluginView()  # no plugin on this node
    settings = {"mig-strategy": "mixed", "quiet-period": 5, "ignored-xids": [13, 48]}
    (tmp_path / STATUS_FILE).write_bytes(status_bytes(RESOURCES, settings))
    view = plugin_view(tmp_path, DEVICES)
    assert view.verdicts == {"GPU-b": "device plugin: XID 79"}
    assert (view.quiet_s, view.ignored_xids) == (5, (13, 48))  # the plugin's own XID policy
    LatchFile(tmp_path, "boot").add("GPU-b", "row remapping failed", "service")
    LatchFile(tmp_path, "boot").remove("GPU-b")  # an operator accepted it
    assert plugin_view(tmp_path, DEVICES).accepted == {"GPU-b"}
    (tmp_path / STATUS_FILE).write_text(json.dumps(RESOURCES))  # an older plugin's file
    older = PluginView({"GPU-b": "device plugin: XID 79"}, present=True, accepted={"GPU-b"})
    assert plugin_view(tmp_path, DEVICES) == older
    bad = {"ignored-xids": ["forty-eight"]}  # not a valid setting: the exporter's own policy
    (tmp_path / STATUS_FILE).write_bytes(status_bytes(RESOURCES, bad))
    assert plugin_view(tmp_path, DEVICES).ignored_xids is None
    (tmp_path / STATUS_FILE).write_text("{not json")
    assert plugin_view(tmp_path, DEVICES) == PluginView()
