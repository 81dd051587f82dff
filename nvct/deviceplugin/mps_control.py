"""``nvct-cli mps-control``: the node's MPS control daemons, one per MPS-shared GPU, run and
kept running by a process of their own, so that they outlive the device plugin.

It reads the same config as the device plugin (``[device-plugin.sharing]``), starts each GPU's
daemon with its limits (or keeps one an earlier run left that answers with them; one with other
limits is replaced), restarts a dead one, and ``quit``s them all on SIGTERM. The plugin only asks
them for their limits (``nvct.node.mps.MpsProbe``). Where it runs: a DaemonSet of its own
(``deployments/mps-control.yaml``), as NVIDIA's mps-control-daemon; a restart of the plugin's
pod — the common case: a crash, an upgrade, a config change — then leaves every daemon and its
clients' work alone.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from nvct.base.errors import NvctError
from nvct.config import Config
from nvct.deviceplugin.watchers import Verdicts, Watcher
from nvct.node.health.state import Health, Transition
from nvct.node.mps import MpsDaemon, gpu_daemons
from nvct.node.mps_watch import MpsWatch, Supervised
from nvct.node.nogpu import wait_for_a_gpu
from nvct.node.sharing import SharingConfigError, plan_sharing

WATCH_S = 0.1
RELOAD_POLL_S = 1.0  # how often the config's files are looked at
RETIRE_S = 5.0  # a supervising step in flight ends before its daemons are judged

log = structlog.get_logger("nvct-mps-control")


def run(
    config: Config,
    stop: threading.Event | None = None,
    reread: Callable[[], Config | None] | None = None,
) -> int:
    """Run the daemons until SIGTERM/SIGINT (or ``stop``); 0 then, 1 when the driver cannot
    be read, 2 when the sharing rules do not fit this host.

    ``reread``, asked every second, gives the config read again when it changed (else None):
    it is applied without a restart. A GPU still shared with MPS under the same root keeps its
    daemon, clients and all (adopted, or its limits re-applied by a new one); the daemons of
    GPUs no longer shared quit; new ones start. A config that does not fit keeps the running
    daemons, said in one line."""
    from nvct.host.load import load_inventory

    if stop is None:
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    if not wait_for_a_gpu(Path(config.dev_root), stop):  # a node without GPUs: idle, no error
        return 0
    running: _Running | None = None
    try:
        while True:
            try:
                inventory = load_inventory(config, use_cache=False)
                plan = plan_sharing(config, inventory)
                daemons = gpu_daemons(MpsDaemon, config, inventory, plan.shares.values())
            except SharingConfigError as err:
                if running is None:
                    _error("config", err.one_line())
                    return 2
                refused(err.one_line())
            except NvctError as err:
                if running is None:
                    _error("driver", f"{err.one_line()} (driver-root {config.driver_root})")
                    return 1
                refused(err.one_line())
            else:
                running = _Running.start(daemons, stop, running)
            changed = _next_config(stop, reread)
            if changed is None:  # stopped
                return 0
            config = changed
    finally:
        if running is not None:
            running.stop()
            log.info("stopped")


def _next_config(
    stop: threading.Event, reread: Callable[[], Config | None] | None
) -> Config | None:
    """The changed config, once there is one; None when ``stop`` is set first."""
    while not stop.wait(RELOAD_POLL_S if reread is not None else None):
        changed = reread() if reread is not None else None
        if changed is not None:
            return changed
    return None


def _key(daemon: MpsDaemon) -> tuple[str, str, int, int]:
    return (daemon.paths.uuid, daemon.paths.pipe, daemon.pinned_memory_mib, daemon.threads)


@dataclass
class _Running:
    """The daemons of one config and the loop that supervises them."""

    keys: frozenset[tuple[str, str, int, int]]
    watch: MpsWatch | None = None
    loop: Watcher | None = None

    @classmethod
    def start(
        cls, daemons: list[MpsDaemon], stop: threading.Event, old: _Running | None
    ) -> _Running:
        """Supervise ``daemons``; ``old`` (the previous config's) is retired, its daemons
        quit where ``daemons`` has none of the same pipe (a kept one is adopted)."""
        keys = frozenset(_key(d) for d in daemons)
        if old is not None:
            if keys == old.keys:
                log.info("reload_unchanged")
                return old
            old.retire(keep={d.paths.pipe for d in daemons})
        if not daemons:
            log.info("no_mps_gpus", detail="no GPU is shared with strategy mps; nothing to run")
            return cls(keys)
        gpus = [d.paths.uuid for d in daemons]
        # A GPU's daemon is its own one "replica": the same supervision as the plugin's.
        health = Health(gpus, quiet=0, ignored_xids=())
        watch = MpsWatch([Supervised(d, [d.paths.uuid]) for d in daemons], health)
        log.info(
            "starting" if old is None else "reloaded",
            gpus=gpus,
            mps_root=daemons[0].paths.root,
        )
        # supervised: a step that raises is logged with its traceback and the loop goes on,
        # where ending it would quit every daemon and the work of every client
        loop = Watcher(
            "mps-control", watch.step, gpus, Verdicts(health), _unreported, stop, interval=WATCH_S
        )
        return cls(keys, watch, loop.start())

    def retire(self, keep: set[str]) -> None:
        """End the loop; quit the daemons whose pipe is not in ``keep``."""
        if self.loop is not None:
            self.loop.retired.set()
            if self.loop.thread is not None:
                self.loop.thread.join(RETIRE_S)
        if self.watch is None:
            return
        with self.watch.lock:
            self.watch.closed = True  # a late step restarts nothing
            for s in self.watch.supervised:
                if s.daemon.paths.pipe not in keep:
                    s.daemon.stop()
                    log.info("mps_daemon_stopped", gpu=s.daemon.paths.uuid)

    def stop(self) -> None:
        """Quit every daemon."""
        self.retire(keep=set())


def refused(why: str) -> None:
    """A config read again that cannot be applied: the running daemons stay."""
    _error("reload_refused", f"{why}; the running daemons stay")


def _error(event: str, message: str) -> None:
    """One JSON log line, and the same one line on stderr."""
    log.error(event, error=message)
    print(f"nvct-cli mps-control: error: {message}", file=sys.stderr, flush=True)


def _unreported(transitions: list[Transition]) -> None:
    """No kubelet hears of these: MpsWatch logs each daemon's death and restart itself."""
