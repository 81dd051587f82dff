"""Device health as a state machine, judged by the node's one health policy
(``nvct.node.health.policy``).

A device goes ``Unhealthy`` with a reason on an event (an XID that is not ignored, a double-bit
ECC error, NVML answering GPU_IS_LOST) or when NVML's recovery-action field asks for something.
It returns to ``Healthy`` once NVML answers for it again, no event came for ``quiet`` seconds,
and, after an event whose catalogue action is a reset (or a reboot), NVML says the GPU was
reset. Such a hold is also written to the node's latch file (keyed by the device's UUID and the
boot id), so a restarted plugin starts with the GPU still Unhealthy; an operator's
``nvct-cli device-plugin-health clear`` releases it (``reload``).

A device can also be ``block``ed (its MPS control daemon died): Unhealthy until ``unblock``ed,
whatever NVML says; then Healthy at once unless NVML's own reasons still hold.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import structlog

from nvct.base.errors import NvctError
from nvct.node.health.latches import LatchFile
from nvct.node.health.policy import (
    RESET,
    SERVICE,
    TRANSIENT,
    Effect,
    GpuCondition,
    double_bit_ecc,
    holds,
    remap_failure,
    xid_effect,
)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
# NVIDIA's plugin ignores these XIDs: application errors, not the GPU's (13 graphics engine
# exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive cleanup,
# 68 video processor exception, 109 context switch timeout).
DEFAULT_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)

log = structlog.get_logger("nvct-device-plugin")


@dataclass(frozen=True, slots=True)
class Transition:
    """A device's health changed."""

    device: str
    health: str
    reason: str


@dataclass(frozen=True, slots=True)
class _Hold:
    hold: str
    reason: str
    since: float


class Health:
    """Every device's health; ``xid``/``ecc``/``answered``/``condition`` feed it, ``tick``
    ends quiet periods. ``uuids`` (device ID -> the UUID an event names) and ``latches`` make
    reset holds outlive the process."""

    def __init__(
        self,
        devices: Iterable[str],
        *,
        quiet: float,
        ignored_xids: Iterable[int],
        uuids: Mapping[str, str] | None = None,
        latches: LatchFile | None = None,
    ) -> None:
        self.quiet = quiet
        self.ignored = frozenset(ignored_xids)
        self.state = dict.fromkeys(devices, HEALTHY)
        self.reason: dict[str, str] = {}
        self.uuids = dict(uuids or {})
        self.latches = latches
        self._last_event: dict[str, float] = {}
        self._answers: dict[str, bool] = {}
        self._blocked: dict[str, str] = {}
        self._holds: dict[str, _Hold] = {}
        self._conditions: dict[str, GpuCondition] = {}
        self._asks: dict[str, str] = {}  # NVML's recovery action, while it asks for one
        self._stamp: tuple[int, int] | None = None  # the latch file as last read
        self._written: set[tuple[str, str]] = set()  # (UUID, hold) this process latched
        self._lock = threading.RLock()  # the NVML and the MPS watchers both report

    def xid(self, device: str, xid: int, now: float) -> Transition | None:
        """An XID error on ``device``."""
        effect = xid_effect(xid, self.ignored)
        return self._event(device, effect, now) if effect.counts else None

    def ecc(self, device: str, now: float) -> Transition | None:
        """A double-bit ECC error on ``device``."""
        return self._event(device, double_bit_ecc(), now)

    def answered(self, device: str, ok: bool, detail: str, now: float) -> Transition | None:
        """Whether NVML answered a query for ``device`` (``detail``: its error when not)."""
        self._answers[device] = ok
        if not ok:
            return self._fail(device, f"NVML does not answer: {detail}", now)
        return self.tick_one(device, now)

    def condition(self, device: str, condition: GpuCondition, now: float) -> Transition | None:
        """NVML's memory-health answers for ``device``'s GPU."""
        with self._lock:
            if device not in self.state:
                return None
            self._conditions[device] = condition
            if condition.remap_failure and not self._accepted(device):
                effect = remap_failure()
                if self._holds.get(device, _Hold("", "", 0)).hold != SERVICE:
                    return self._event(device, effect, now)
            asks = condition.asks()
            if asks:
                self._asks[device] = asks
                return self._set(device, UNHEALTHY, asks)
            self._asks.pop(device, None)
            return self.tick_one(device, now)

    def tick(self, now: float) -> list[Transition]:
        """Recoveries due by ``now``."""
        return [t for d in list(self.state) if (t := self.tick_one(d, now)) is not None]

    def tick_one(self, device: str, now: float) -> Transition | None:
        """``device`` recovers when it is unhealthy, answers, and nothing holds it any more."""
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

    def restore(self, now: float) -> list[Transition]:
        """Hold the devices the latch file names (a previous run latched them).

        Raises:
            NvctError: the latch file cannot be read.
        """
        if self.latches is None:
            return []
        self._stamp = self.latches.stamp()
        latched = self.latches.load()
        out = []
        with self._lock:
            for device, uuid in self.uuids.items():
                entry = latched.get(uuid)
                if entry is not None and device in self.state:
                    reason = f"latched: {entry.reason}"
                    self._holds[device] = _Hold(entry.hold, reason, now)
                    if (t := self._set(device, UNHEALTHY, reason)) is not None:
                        out.append(t)
        return out

    def reload(self, now: float) -> list[Transition]:
        """When the latch file changed: release the holds an operator cleared."""
        if self.latches is None:
            return []
        stamp = self.latches.stamp()
        if stamp == self._stamp:
            return []
        self._stamp = stamp
        try:
            latched = self.latches.load()
        except NvctError:
            return []  # a broken file releases nothing
        out = []
        with self._lock:
            self._written = {w for w in self._written if w[0] in latched}
            for device, hold in list(self._holds.items()):
                if hold.hold != TRANSIENT and self.uuids.get(device) not in latched:
                    del self._holds[device]
                    reason = "recovered: cleared by an operator"
                    self._last_event.pop(device, None)
                    if (t := self._recover(device, now, reason)) is not None:
                        out.append(t)
        return out

    def _accepted(self, device: str) -> bool:
        if self.latches is None:
            return False
        try:
            return self.uuids.get(device, device) in self.latches.accepted()
        except NvctError:
            return False

    def _event(self, device: str, effect: Effect, now: float) -> Transition | None:
        with self._lock:
            if device not in self.state:
                return None
            if effect.hold != TRANSIENT:
                held = self._holds.get(device)
                if held is None or held.hold == TRANSIENT or effect.hold == SERVICE:
                    self._holds[device] = _Hold(effect.hold, effect.reason, now)
                    self._latch(device, effect)
            return self._fail(device, effect.reason, now)

    def _latch(self, device: str, effect: Effect) -> None:
        if self.latches is None or device not in self.uuids:
            return
        written = (self.uuids[device], effect.hold)
        if written in self._written:
            return  # another replica of the same GPU wrote it: one file write per event
        try:
            self.latches.add(self.uuids[device], effect.reason, effect.hold)
            self._written.add(written)
        except (NvctError, OSError) as err:  # the hold still stands in this process
            log.warning("latch_not_written", device=device, error=str(err))

    def _recover(self, device: str, now: float, reason: str) -> Transition | None:
        with self._lock:
            if self.state.get(device) != UNHEALTHY or not self._answers.get(device, True):
                return None
            if device in self._blocked or device in self._asks:
                return None
            if now - self._last_event.get(device, -float("inf")) < self.quiet:
                return None
            held = self._holds.get(device)
            if held is not None:
                condition = self._conditions.get(device, GpuCondition())
                if holds(held.hold, held.since, now, quiet=self.quiet, condition=condition):
                    return self._set(device, UNHEALTHY, held.reason)  # why it stays
                del self._holds[device]
                if held.hold == RESET:
                    reason = "recovered: NVML says the GPU was reset (no recovery action, no "
                    reason += "row remap or retired page pending)"
                    self._release(device)
            return self._set(device, HEALTHY, reason)

    def _release(self, device: str) -> None:
        if self.latches is None or device not in self.uuids:
            return
        uuid = self.uuids[device]
        self._written = {w for w in self._written if w[0] != uuid}
        try:
            self.latches.release(uuid)
        except (NvctError, OSError) as err:
            log.warning("latch_not_released", device=device, error=str(err))

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
