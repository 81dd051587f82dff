"""The supervised watcher loops: a step that raises is logged with its traceback, its devices
are Unhealthy with the reason while it is down, and the loop runs again."""

from __future__ import annotations

import threading

from structlog.testing import capture_logs

from integration.harness.processes import until
from nvct.deviceplugin.watchers import Verdicts, Watcher, watchdog
from nvct.node.health.state import DEFAULT_IGNORED_XIDS, HEALTHY, UNHEALTHY, Health, Transition


def test_a_crashed_step_marks_its_devices_and_the_loop_comes_back() -> None:
    health = Health(["a", "b", "c"], quiet=30, ignored_xids=DEFAULT_IGNORED_XIDS)
    verdicts = Verdicts(health)
    reported: list[Transition] = []
    faults = [OSError(5, "Input/output error"), ValueError("bad answer")]
    steps = 0

    def step() -> list[Transition]:
        nonlocal steps
        steps += 1
        if steps in (3, 4):  # two crashes in a row, after a good start
            raise faults[steps - 3]
        return []

    stop = threading.Event()
    watcher = Watcher("health", step, ["a", "b"], verdicts, reported.extend, stop, interval=0.01)
    with capture_logs() as logs:
        watcher.start()
        assert until(lambda: steps >= 3 and verdicts["a"] == UNHEALTHY, 5.0)
        assert verdicts["c"] == HEALTHY  # not this watcher's device
        reason = verdicts.reason("b")
        assert reason.startswith("health watcher crashed (OSError: [Errno 5]"), reason
        assert until(lambda: steps >= 6, 5.0)  # restarted after both crashes (0.1 s, then 0.2 s)
        stop.set()
        assert watcher.thread is not None
        watcher.thread.join(5)
    assert dict(verdicts) == {"a": HEALTHY, "b": HEALTHY, "c": HEALTHY}
    assert [(t.device, t.health) for t in reported] == [
        ("a", UNHEALTHY), ("b", UNHEALTHY),  # the first crash
        ("a", UNHEALTHY), ("b", UNHEALTHY),  # the second says its own reason
        ("a", HEALTHY), ("b", HEALTHY),  # running again
    ]  # fmt: skip
    assert "ValueError: bad answer" in reported[3].reason
    crashed = [e for e in logs if e["event"] == "watcher_crashed"]
    assert [e["crashes"] for e in crashed] == [1, 2]
    assert "Traceback (most recent call last)" in crashed[0]["traceback"]
    assert "in step" in crashed[0]["traceback"] and "OSError" in crashed[0]["traceback"]
    assert [e["retry_in_s"] for e in crashed] == [0.1, 0.2]
    assert [e["event"] for e in logs].count("watcher_restarted") == 1


def test_while_a_watcher_is_down_the_others_cannot_mark_its_devices_healthy() -> None:
    health = Health(["r0", "r1"], quiet=0, ignored_xids=())
    verdicts = Verdicts(health)
    health.block("r0", "MPS control daemon not started yet")
    assert verdicts.down("mps", ["r0", "r1"], "mps watcher crashed") == [
        Transition("r0", UNHEALTHY, "mps watcher crashed"),
        Transition("r1", UNHEALTHY, "mps watcher crashed"),
    ]
    back = health.unblock("r0", "daemon answers", now=1.0)
    assert back is not None and verdicts.effective([back]) == []  # masked: still down
    assert verdicts["r0"] == UNHEALTHY and verdicts.reason("r0") == "mps watcher crashed"
    assert verdicts.up("mps") == [
        Transition("r0", HEALTHY, "daemon answers"),
        Transition("r1", HEALTHY, ""),
    ]


def test_a_step_that_hangs_is_reported_with_its_stack_and_marks_its_devices() -> None:
    health = Health(["a", "b"], quiet=30, ignored_xids=())
    verdicts = Verdicts(health)
    reported: list[Transition] = []
    release, hung = threading.Event(), threading.Event()
    steps = 0

    def wait_in_the_driver() -> None:
        hung.set()
        release.wait(10)

    def step() -> list[Transition]:
        nonlocal steps
        steps += 1
        if steps == 2:
            wait_in_the_driver()
        return []

    stop = threading.Event()
    watcher = Watcher(
        "health", step, ["a"], verdicts, reported.extend, stop, interval=0.05, stuck_after=0.3
    )  # steps 50 ms apart: only the hanging one can take 0.3 s, even on a loaded machine
    with capture_logs() as logs:
        watcher.start()
        dog = watchdog([watcher], stop)
        assert hung.wait(5)
        assert verdicts["a"] == HEALTHY  # not yet: a slow step is not a stuck one
        assert until(lambda: verdicts["a"] == UNHEALTHY, 3)
        assert verdicts["b"] == HEALTHY
        assert verdicts.reason("a").startswith("health watcher stuck for ")
        release.set()
        assert until(lambda: verdicts["a"] == HEALTHY, 3)
        stop.set()
        assert watcher.thread is not None
        watcher.thread.join(5)
        dog.join(5)
    assert [(t.device, t.health) for t in reported] == [("a", UNHEALTHY), ("a", HEALTHY)]
    (stuck,) = [e for e in logs if e["event"] == "watcher_stuck"]
    assert "in wait_in_the_driver" in stuck["stack"] and stuck["seconds"] >= 0.3
    assert [e["event"] for e in logs].count("watcher_unstuck") == 1
