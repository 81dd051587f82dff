"""The health state machine: events make a device unhealthy with a reason; it recovers once
NVML answers again for a quiet period, and after an XID that needs a reset only once NVML says
the GPU was reset (or an operator clears it); such holds outlive the process."""

from __future__ import annotations

from pathlib import Path

from nvct.node.health.latches import LatchFile
from nvct.node.health.policy import GpuCondition
from nvct.node.health.state import DEFAULT_IGNORED_XIDS, HEALTHY, UNHEALTHY, Health

RESET_DONE = GpuCondition(recovery_action=0, remap_pending=False, remap_failure=False)


def machine() -> Health:
    return Health(["a", "b"], quiet=30, ignored_xids=DEFAULT_IGNORED_XIDS)


def test_an_ignored_xid_changes_nothing() -> None:
    h = machine()
    assert h.xid("a", 13, now=0) is None and h.state["a"] == HEALTHY


def test_an_xid_then_recovery_after_the_quiet_period() -> None:
    h = machine()
    t = h.xid("a", 94, now=0)  # contained ECC error: NVIDIA says restart the application
    reason = "XID 94 (ROBUST_CHANNEL_CONTAINED_ERROR): restart the application"
    assert t is not None and (t.health, t.reason) == (UNHEALTHY, reason)
    assert h.state == {"a": UNHEALTHY, "b": HEALTHY}
    assert h.tick(29.9) == []
    (back,) = h.tick(30.0)
    assert back.health == HEALTHY and "recovered" in back.reason


def test_a_lost_gpu_stays_unhealthy_while_it_does_not_answer() -> None:
    h = machine()
    t = h.answered("b", False, "GPU is lost", now=0)
    assert t is not None and "GPU is lost" in t.reason
    assert h.answered("b", False, "GPU is lost", now=40) is None  # no repeated transition
    assert h.tick(100) == []  # still not answering
    assert h.answered("b", True, "", now=60) is None  # answers, quiet period from 40
    back = h.answered("b", True, "", now=71)
    assert back is not None and back.health == HEALTHY


def test_a_new_event_restarts_the_quiet_period() -> None:
    h = machine()
    h.xid("a", 8, now=0)
    h.xid("a", 32, now=20)
    assert h.tick(40) == [] and h.state["a"] == UNHEALTHY
    assert h.tick(50)[0].health == HEALTHY


def test_unknown_devices_are_ignored() -> None:
    assert machine().xid("zzz", 79, now=0) is None


def test_an_xid_that_needs_a_reset_holds_until_nvml_says_it_was_reset() -> None:
    h = machine()
    t = h.xid("a", 48, now=0)
    assert t is not None
    assert t.reason == "XID 48 (ROBUST_CHANNEL_GPU_ECC_DBE): reset the GPU to remap the row"
    assert h.tick(1000) == []  # no recovery-action field: NVML cannot say it was reset
    assert h.condition("a", GpuCondition(recovery_action=1, remap_pending=True), 1000) is not None
    assert h.reason["a"] == "NVML recovery action: GPU reset"
    still = h.condition("a", GpuCondition(recovery_action=0, remap_pending=True), 1001)
    assert still is not None and (still.health, still.reason) == (UNHEALTHY, t.reason)
    assert h.tick(2000) == [] and h.state["a"] == UNHEALTHY  # a row remap is still pending
    back = h.condition("a", RESET_DONE, 2001)
    assert back is not None and back.health == HEALTHY and "was reset" in back.reason


def test_the_recovery_action_alone_makes_a_gpu_unhealthy_while_it_asks() -> None:
    h = machine()
    t = h.condition("b", GpuCondition(recovery_action=2), now=0)
    assert t is not None
    assert (t.health, t.reason) == (UNHEALTHY, "NVML recovery action: node reboot")
    assert h.tick(100) == []
    back = h.condition("b", RESET_DONE, now=101)
    assert back is not None and back.health == HEALTHY


def test_xid_109_follows_ignored_xids_and_the_catalogue() -> None:
    assert machine().xid("a", 109, now=0) is None  # NVIDIA's plugin's default: ignored
    h = Health(["a"], quiet=30, ignored_xids=(13,))
    assert h.xid("a", 109, now=0) is not None
    assert h.tick(500) == [] and "reset the GPU" in h.reason["a"]  # the catalogue: RESET_GPU


def test_a_double_bit_ecc_error_and_a_lost_gpu_need_a_reset() -> None:
    h = machine()
    h.ecc("a", now=0)
    h.xid("b", 79, now=0)  # fallen off the bus: NVIDIA says reboot the node
    assert "reboot the node" in h.reason["b"]
    assert h.tick(1000) == []
    assert {t.device for t in (h.condition(d, RESET_DONE, 1000) for d in "ab") if t} == {"a", "b"}


def latches(tmp_path: Path, boot: str = "boot-1") -> LatchFile:
    return LatchFile(tmp_path, boot)


def plugin_health(tmp_path: Path, boot: str = "boot-1") -> Health:
    return Health(
        ["GPU-a::0", "GPU-a::1", "GPU-b"],
        quiet=1,
        ignored_xids=DEFAULT_IGNORED_XIDS,
        uuids={"GPU-a::0": "GPU-a", "GPU-a::1": "GPU-a", "GPU-b": "GPU-b"},
        latches=latches(tmp_path, boot),
    )


def test_a_hold_survives_a_restart_in_the_same_boot_only(tmp_path: Path) -> None:
    first = plugin_health(tmp_path)
    first.xid("GPU-a::0", 95, now=0)
    first.xid("GPU-a::1", 95, now=0)
    first.xid("GPU-b", 94, now=0)  # an application's error: not latched
    assert set(latches(tmp_path).load()) == {"GPU-a"}
    again = plugin_health(tmp_path)  # the plugin restarted
    restored = again.restore(now=100)
    assert {t.device for t in restored} == {"GPU-a::0", "GPU-a::1"}
    assert again.reason["GPU-a::0"].startswith("latched: XID 95")
    assert again.state["GPU-b"] == HEALTHY
    assert again.tick(10_000) == []
    rebooted = plugin_health(tmp_path, boot="boot-2")
    assert rebooted.restore(now=0) == [] and set(rebooted.state.values()) == {HEALTHY}


def test_an_operator_clear_releases_the_hold(tmp_path: Path) -> None:
    h = plugin_health(tmp_path)
    h.xid("GPU-a::0", 119, now=0)  # GSP RPC timeout: reset the GPU
    assert h.reload(now=10) == []  # unchanged file: nothing to do
    removed = latches(tmp_path).remove("GPU-a")
    assert removed is not None and removed.reason.startswith("XID 119")
    (back,) = h.reload(now=11)
    assert (back.device, back.health, back.reason) == (
        "GPU-a::0",
        HEALTHY,
        "recovered: cleared by an operator",
    )


def test_nvml_saying_the_gpu_was_reset_releases_the_latch_file(tmp_path: Path) -> None:
    h = plugin_health(tmp_path)
    h.xid("GPU-b", 48, now=0)
    assert "GPU-b" in latches(tmp_path).load()
    assert h.condition("GPU-b", RESET_DONE, now=5) is not None
    assert latches(tmp_path).load() == {}


def test_a_remap_failure_stays_until_cleared_even_across_boots(tmp_path: Path) -> None:
    h = plugin_health(tmp_path)
    failed = GpuCondition(recovery_action=0, remap_failure=True)
    t = h.condition("GPU-b", failed, now=0)
    assert t is not None and t.reason == "row remapping failed: the GPU needs service"
    assert h.condition("GPU-b", failed, now=100) is None and h.state["GPU-b"] == UNHEALTHY
    rebooted = plugin_health(tmp_path, boot="boot-2")
    assert [t.device for t in rebooted.restore(now=0)] == ["GPU-b"]
    latches(tmp_path, "boot-2").remove("GPU-b")  # the operator accepts the GPU
    assert [t.health for t in rebooted.reload(now=1)] == [HEALTHY]
    assert rebooted.condition("GPU-b", failed, now=2) is None  # the same flag: accepted
    assert rebooted.state["GPU-b"] == HEALTHY


def test_a_remap_failure_after_a_reset_xid_makes_the_latch_a_service_hold(tmp_path: Path) -> None:
    h = plugin_health(tmp_path)
    h.xid("GPU-a::0", 48, now=0)
    h.xid("GPU-a::1", 48, now=0)  # the same GPU's other replica: already written
    assert latches(tmp_path).load()["GPU-a"].hold == "reset"
    h.condition("GPU-a::0", GpuCondition(recovery_action=0, remap_failure=True), now=1)
    entry = latches(tmp_path, "boot-2").load()["GPU-a"]  # kept in a later boot
    assert (entry.hold, entry.reason) == ("service", "row remapping failed: the GPU needs service")
