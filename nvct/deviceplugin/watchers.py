"""The plugin's watcher loops (NVML health, MPS probes), each on its own thread, supervised.

A loop that raises is a bug or a driver surprise, and it must not end in silence with its
devices left Healthy: the crash is logged with its traceback, the devices it watches go
Unhealthy with the reason, and the loop is restarted after a growing pause (0.1 s to 5 s).
Its devices follow the health state machine again once a restarted step completes. A step
that does not return (a driver call that hangs) is the same silence: after ``stuck_after``
seconds the watchdog logs where it waits (the thread's stack) and marks its devices until the
step returns.

Restarting in the process, rather than exiting for the DaemonSet to restart the pod: the
kubelet keeps hearing about every device (Unhealthy, with the reason in the status file), and
there is no CrashLoopBackOff delay. ``nvct-cli mps-control`` runs its loop the same way: ending
it would quit every MPS daemon and its clients' work.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable, Collection, Iterator, Mapping

import structlog

from nvct.node.health.state import UNHEALTHY, Health, Transition

RESTART_MIN_S = 0.1
RESTART_MAX_S = 5.0
# A health step waits 0.2 s for events and asks each GPU a few questions, but may also
# initialise NVML again after a GPU was lost: seconds on a large node without persistence mode.
STUCK_S = 30.0
WATCHDOG_S = 0.5

log = structlog.get_logger("nvct-device-plugin")


class Verdicts(Mapping[str, str]):
    """Each device's health as the kubelet is told it: the health state machine's, or
    Unhealthy while a watcher of the device is down."""

    def __init__(self, health: Health) -> None:
        self.health = health
        self._down: dict[str, dict[str, str]] = {}  # watcher -> device -> why
        self._lock = threading.Lock()

    def __getitem__(self, device: str) -> str:
        state = self.health.state[device]
        return UNHEALTHY if self._why_down(device) else state

    def __iter__(self) -> Iterator[str]:
        return iter(self.health.state)

    def __len__(self) -> int:
        return len(self.health.state)

    def reason(self, device: str) -> str:
        """Why the device has its health ("" when nothing was said)."""
        return self._why_down(device) or self.health.reason.get(device, "")

    def _why_down(self, device: str) -> str:
        for devices in list(self._down.values()):
            if device in devices:
                return devices[device]
        return ""

    def down(self, watcher: str, devices: Collection[str], reason: str) -> list[Transition]:
        """``watcher`` stopped: its devices are Unhealthy for ``reason``; what changed."""
        with self._lock:
            before = self._snapshot(devices)
            self._down[watcher] = dict.fromkeys(devices, reason)
            return self._changes(before)

    def up(self, watcher: str) -> list[Transition]:
        """``watcher`` runs again: its devices follow the health state machine; what changed."""
        with self._lock:
            devices = list(self._down.get(watcher, ()))
            before = self._snapshot(devices)
            self._down.pop(watcher, None)
            return self._changes(before)

    def effective(self, transitions: list[Transition]) -> list[Transition]:
        """The state machine's transitions that reach the kubelet (not masked by a watcher
        that is down)."""
        known = self.health.state
        return [t for t in transitions if t.device not in known or self[t.device] == t.health]

    def _snapshot(self, devices: Collection[str]) -> dict[str, tuple[str, str]]:
        return {d: (self[d], self.reason(d)) for d in devices if d in self.health.state}

    def _changes(self, before: dict[str, tuple[str, str]]) -> list[Transition]:
        out = []
        for device, (health, reason) in before.items():
            now = (self[device], self.reason(device))
            if now != (health, reason):
                out.append(Transition(device, *now))
        return out


class Watcher:
    """One loop: ``step`` again and again (``interval`` apart) until ``stop`` (the process
    ends) or ``retired`` (its plugin was replaced by a reload); its transitions go to
    ``report``."""

    def __init__(
        self,
        name: str,
        step: Callable[[], list[Transition]],
        devices: Collection[str],
        verdicts: Verdicts,
        report: Callable[[list[Transition]], None],
        stop: threading.Event,
        *,
        interval: float = 0.0,
        stuck_after: float = STUCK_S,
        retired: threading.Event | None = None,
    ) -> None:
        self.name = name
        self.step = step
        self.devices = tuple(devices)
        self.verdicts = verdicts
        self.report = report
        self.stop = stop
        self.retired = retired or threading.Event()
        self.interval = interval
        self.stuck_after = stuck_after
        self.crashes = 0
        self.thread: threading.Thread | None = None
        self._busy_since: float | None = None  # when the running step began
        self._stuck = False
        self._lock = threading.Lock()  # the step's end and the watchdog's verdict, in order

    def start(self) -> Watcher:
        """Run the loop on a daemon thread."""
        self.thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        self.thread.start()
        return self

    def run(self) -> None:
        """The supervised loop (the thread's target)."""
        pause = RESTART_MIN_S
        down = False
        while not (self.stop.is_set() or self.retired.is_set()):
            if self.interval and self.stop.wait(self.interval):
                return
            self._busy_since = time.monotonic()
            try:
                transitions = self.step()
            except Exception as err:  # any crash: log it, mark its devices, restart
                down = True
                self._ended()
                self._crashed(err, pause)
                if self.stop.wait(pause):
                    return
                pause = min(pause * 2, RESTART_MAX_S)
                continue
            if self._ended() or down:
                if down:
                    log.info("watcher_restarted", watcher=self.name, crashes=self.crashes)
                down, pause = False, RESTART_MIN_S
                transitions = [*self.verdicts.up(self.name), *transitions]
            self.report(self.verdicts.effective(transitions))

    def _ended(self) -> bool:
        """The step returned; whether the watchdog had marked it stuck."""
        with self._lock:
            self._busy_since, stuck, self._stuck = None, self._stuck, False
        if stuck:
            log.info("watcher_unstuck", watcher=self.name)
        return stuck

    def check(self, now: float) -> None:
        """The watchdog's look: a step running longer than ``stuck_after`` marks the devices."""
        with self._lock:
            began = self._busy_since
            if began is None or self._stuck or now - began < self.stuck_after:
                return
            self._stuck = True
            waited = now - began
            reason = f"{self.name} watcher stuck for {waited:.0f} s (a driver call that hangs?)"
            transitions = self.verdicts.down(self.name, self.devices, reason)
        frame = sys._current_frames().get(self.thread.ident or 0) if self.thread else None
        stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
        log.error("watcher_stuck", watcher=self.name, seconds=round(waited, 1), stack=stack)
        self.report(transitions)

    def _crashed(self, err: Exception, pause: float) -> None:
        self.crashes += 1
        reason = f"{self.name} watcher crashed ({type(err).__name__}: {err}); restarting"
        log.error(
            "watcher_crashed",
            watcher=self.name,
            error=repr(err),
            crashes=self.crashes,
            retry_in_s=pause,
            traceback="".join(traceback.format_exception(err)),
        )
        self.report(self.verdicts.down(self.name, self.devices, reason))


def watchdog(watchers: Collection[Watcher], stop: threading.Event) -> threading.Thread:
    """A daemon thread that looks at every watcher each ``WATCHDOG_S`` until ``stop``."""

    def run() -> None:
        while not stop.wait(WATCHDOG_S):
            for w in watchers:
                w.check(time.monotonic())

    thread = threading.Thread(target=run, name="watchdog", daemon=True)
    thread.start()
    return thread
