"""Device health as a state machine, not a latch.

A device goes ``Unhealthy`` with a reason on an event (an XID that is not ignored, a double-bit
ECC error, NVML answering GPU_IS_LOST); it returns to ``Healthy`` once NVML answers for it again
and no event came for ``quiet`` seconds. NVIDIA's plugin keeps a GPU unhealthy until it is
restarted; kubelet itself has no latch (a device sent Healthy again counts again).

A device can also be ``block``ed (its MPS control daemon died): Unhealthy until ``unblock``ed,
whatever NVML says; then Healthy at once unless NVML's own reasons still hold.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
# NVIDIA's plugin ignores these XIDs: application errors, not the GPU's (13 graphics engine
# exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive cleanup,
# 68 video processor exception, 109 context switch timeout).
DEFAULT_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)


@dataclass(frozen=True, slots=True)
class Transition:
    """A device's health changed."""

    device: str
    health: str
    reason: str


class Health:
    """Every device's health; ``event``/``answered`` feed it, ``tick`` ends quiet periods."""

    def __init__(
        self, devices: Iterable[str], *, quiet: float, ignored_xids: Iterable[int]
    ) -> None:
        self.quiet = quiet
        self.ignored = frozenset(ignored_xids)
        self.state = dict.fromkeys(devices, HEALTHY)
        self.reason: dict[str, str] = {}
        self._last_event: dict[str, float] = {}
        self._answers: dict[str, bool] = {}
        self._blocked: dict[str, str] = {}
        self._lock = threading.RLock()  # the NVML and the MPS watchers both report

    def xid(self, device: str, xid: int, now: float) -> Transition | None:
        """An XID error on ``device``."""
        if xid in self.ignored:
            return None
        return self._fail(device, f"XID {xid}", now)

    def ecc(self, device: str, now: float) -> Transition | None:
        """A double-bit ECC error on ``device``."""
        return self._fail(device, "double-bit ECC error", now)

    def answered(self, device: str, ok: bool, detail: str, now: float) -> Transition | None:
        """Whether NVML answered a query for ``device`` (``detail``: its error when not)."""
        self._answers[device] = ok
        if not ok:
            return self._fail(device, f"NVML does not answer: {detail}", now)
        return self.tick_one(device, now)

    def tick(self, now: float) -> list[Transition]:
        """Recoveries due by ``now``."""
        return [t for d in list(self.state) if (t := self.tick_one(d, now)) is not None]

    def tick_one(self, device: str, now: float) -> Transition | None:
        """``device`` recovers when it is unhealthy, answers, and the quiet period passed."""
        reason = f"recovered: NVML answers and no error for {self.quiet:g} s"
        return self._recover(device, now, reason)

    def block(self, device: str, reason: str) -> Transition | None:
        """``device`` is Unhealthy for ``reason`` until ``unblock``."""
        with self._lock:
            if device not in self.state:
                return None
            self._blocked[device] = reason
            return self._set(device, UNHEALTHY, reason)

    def unblock(self, device: str, reason: str, now: float) -> Transition | None:
        """What blocked ``device`` is over (``reason`` says how)."""
        with self._lock:
            self._blocked.pop(device, None)
            return self._recover(device, now, reason)

    def _recover(self, device: str, now: float, reason: str) -> Transition | None:
        with self._lock:
            if self.state.get(device) != UNHEALTHY or not self._answers.get(device, True):
                return None
            if device in self._blocked:
                return None
            if now - self._last_event.get(device, -float("inf")) < self.quiet:
                return None
            return self._set(device, HEALTHY, reason)

    def _fail(self, device: str, reason: str, now: float) -> Transition | None:
        with self._lock:
            if device not in self.state:
                return None
            self._last_event[device] = now
            return self._set(device, UNHEALTHY, reason)

    def _set(self, device: str, health: str, reason: str) -> Transition | None:
        if self.state[device] == health and self.reason.get(device) == reason:
            return None
        self.state[device] = health
        self.reason[device] = reason
        return Transition(device, health, reason)
