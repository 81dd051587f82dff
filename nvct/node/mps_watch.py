"""The MPS GPUs' daemons, supervised: a GPU's replicas are advertised only once its daemon
answers with the limits applied, go Unhealthy when it dies, and Healthy again once it was
restarted and the limits re-applied.

Three users: ``nvct-cli mps-control`` supervises the daemons it runs (``MpsDaemon``, started and
restarted here, one "replica" per GPU); the device plugin supervises probes of them
(``MpsProbe``: starting one only asks the daemon for its limits), so its replicas follow what
the daemons answer without the plugin owning them; ``nvct-dra-plugin`` supervises its claims'
daemons, added at prepare and removed at unprepare (no replicas: a claim has no health)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from nvct.node.health.state import Health, Transition
from nvct.node.mps import PROBE_EVERY_S, MpsDaemon, MpsError

RETRY_MAX_S = 10.0
# A dead daemon is restarted no sooner: the device plugin, which asks each daemon every
# PROBE_EVERY_S, then hears of the death, and so does the kubelet.
RESTART_AFTER_S = 2 * PROBE_EVERY_S

log = structlog.get_logger("nvct-mps")


@dataclass
class Supervised:
    """A GPU's daemon and the replicas that follow it."""

    daemon: MpsDaemon
    replicas: Sequence[str]
    ready: bool = False
    retry_at: float = 0.0
    pause: float = 0.5
    max_pause: float = RETRY_MAX_S


class MpsWatch:
    """Every MPS GPU's daemon; ``hidden`` holds the replicas never advertised yet."""

    def __init__(self, supervised: Sequence[Supervised], health: Health) -> None:
        self.supervised = list(supervised)
        self.health = health
        self.hidden: set[str] = {r for s in supervised for r in s.replicas}
        self.lock = threading.Lock()
        self.closed = False  # stopped for good: a late step restarts nothing
        for s in supervised:
            for replica in s.replicas:
                health.block(replica, "MPS control daemon not started yet")

    def step(self, now: Callable[[], float] = time.monotonic) -> list[Transition]:
        """Notice dead daemons and (re)start those due; the health transitions."""
        out: list[Transition] = []
        with self.lock:
            for s in self.supervised if not self.closed else ():
                if s.ready and not s.daemon.alive():
                    pid = f" (pid {s.daemon.pid})" if s.daemon.pid is not None else ""
                    reason = f"MPS control daemon{pid} of {s.daemon.paths.uuid} died"
                    log.warning("mps_daemon_died", gpu=s.daemon.paths.uuid, pid=s.daemon.pid)
                    s.ready, s.retry_at, s.pause = False, now() + RESTART_AFTER_S, 0.5
                    # reported before the restart, which waits so that kubelet hears of it
                    out += [t for r in s.replicas if (t := self.health.block(r, reason))]
                elif not s.ready and now() >= s.retry_at:
                    out += self._start(s, now)
        return out

    def _start(self, s: Supervised, now: Callable[[], float]) -> list[Transition]:
        try:
            s.daemon.start()
        except MpsError as err:
            log.error("mps_daemon_failed", gpu=s.daemon.paths.uuid, error=err.one_line())
            s.retry_at, s.pause = now() + s.pause, min(s.pause * 2, s.max_pause)
            reason = f"MPS control daemon not ready: {err.one_line()}"
            return [t for r in s.replicas if (t := self.health.block(r, reason))]
        s.ready = True
        log.info(
            "mps_daemon_ready",
            gpu=s.daemon.paths.uuid,
            pid=s.daemon.pid,
            adopted=s.daemon.adopted,
            pinned_memory_mib=s.daemon.pinned_memory_mib,
            active_thread_percentage=s.daemon.threads,
        )
        reason = "MPS control daemon answers with the limits applied"
        out = [t for r in s.replicas if (t := self.health.unblock(r, reason, now()))]
        self.hidden.difference_update(s.replicas)
        return out

    def add(self, supervised: Supervised) -> None:
        """Supervise one more daemon, started (``ready``) or to be started by the next step."""
        with self.lock:
            self.supervised.append(supervised)

    def remove(self, daemon: MpsDaemon) -> None:
        """Stop supervising ``daemon`` (stopping it is the caller's)."""
        with self.lock:
            self.supervised = [s for s in self.supervised if s.daemon is not daemon]

    def stop(self) -> None:
        """``quit`` every daemon (SIGKILL after a grace period)."""
        with self.lock:
            self.closed = True
            for s in self.supervised:
                s.daemon.stop()
                s.ready = False
                log.info("mps_daemon_stopped", gpu=s.daemon.paths.uuid)
