"""The health state machine: events make a device unhealthy with a reason; it recovers once
NVML answers again for a quiet period (no latch, unlike NVIDIA's plugin)."""

from __future__ import annotations

from nvct.deviceplugin.health import DEFAULT_IGNORED_XIDS, HEALTHY, UNHEALTHY, Health


def machine() -> Health:
    return Health(["a", "b"], quiet=30, ignored_xids=DEFAULT_IGNORED_XIDS)


def test_an_ignored_xid_changes_nothing() -> None:
    h = machine()
    assert h.xid("a", 13, now=0) is None and h.state["a"] == HEALTHY


def test_an_xid_then_recovery_after_the_quiet_period() -> None:
    h = machine()
    t = h.xid("a", 79, now=0)
    assert t is not None and (t.health, t.reason) == (UNHEALTHY, "XID 79")
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
    h.ecc("a", now=0)
    h.xid("a", 48, now=20)
    assert h.tick(40) == [] and h.state["a"] == UNHEALTHY
    assert h.tick(50)[0].health == HEALTHY


def test_unknown_devices_are_ignored() -> None:
    assert machine().xid("zzz", 79, now=0) is None
