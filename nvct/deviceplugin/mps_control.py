"""``nvct-cli mps-control``: the node's MPS control daemons, one per MPS-shared GPU, run and
kept running by a process of their own, so that they outlive the device plugin.

It reads the same config as the device plugin (``[device-plugin.sharing]``), starts each GPU's
daemon with its limits (or keeps one an earlier run left that answers with them; one with other
limits is replaced), restarts a dead one, and ``quit``s them all on SIGTERM. The plugin only asks
them for their limits (``nvct.deviceplugin.mps.MpsProbe``). Where it runs: a DaemonSet of its own
(``deployments/mps-control.yaml``), as NVIDIA's mps-control-daemon; a restart of the plugin's
pod — the common case: a crash, an upgrade, a config change — then leaves every daemon and its
clients' work alone.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import structlog

from nvct.base.errors import NvctError
from nvct.config import Config
from nvct.deviceplugin.mps import MpsDaemon, gpu_daemons
from nvct.deviceplugin.mps_watch import MpsWatch, Supervised
from nvct.deviceplugin.watchers import Verdicts, Watcher
from nvct.node.health.state import Health, Transition
from nvct.node.nogpu import wait_for_a_gpu
from nvct.node.sharing import SharingConfigError, plan_sharing

WATCH_S = 0.1

log = structlog.get_logger("nvct-mps-control")


def run(config: Config, stop: threading.Event | None = None) -> int:
    """Run the daemons until SIGTERM/SIGINT (or ``stop``); 0 then, 1 when the driver cannot
    be read, 2 when the sharing rules do not fit this host."""
    from nvct.host.load import load_inventory

    if stop is None:
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    if not wait_for_a_gpu(Path(config.dev_root), stop):  # a node without GPUs: idle, no error
        return 0
    try:
        inventory = load_inventory(config, use_cache=False)
        plan = plan_sharing(config, inventory)
        daemons = gpu_daemons(MpsDaemon, config, inventory, plan.shares.values())
    except SharingConfigError as err:
        _error("config", err.one_line())
        return 2
    except NvctError as err:
        _error("driver", f"{err.one_line()} (driver-root {config.driver_root})")
        return 1
    if not daemons:
        log.info("no_mps_gpus", detail="no GPU is shared with strategy mps; nothing to run")
        stop.wait()
        return 0
    gpus = [d.paths.uuid for d in daemons]
    # A GPU's daemon is its own one "replica": the same supervision as the plugin's replicas.
    health = Health(gpus, quiet=0, ignored_xids=())
    watch = MpsWatch([Supervised(d, [d.paths.uuid]) for d in daemons], health)
    log.info("starting", gpus=gpus, mps_root=config.device_plugin.sharing.mps_root)
    # supervised: a step that raises is logged with its traceback and the loop goes on, where
    # ending it would quit every daemon and the work of every client
    loop = Watcher(
        "mps-control", watch.step, gpus, Verdicts(health), _unreported, stop, interval=WATCH_S
    )
    try:
        loop.run()
    finally:
        watch.stop()
        log.info("stopped")
    return 0


def _error(event: str, message: str) -> None:
    """One JSON log line, and the same one line on stderr."""
    log.error(event, error=message)
    print(f"nvct-cli mps-control: error: {message}", file=sys.stderr, flush=True)


def _unreported(transitions: list[Transition]) -> None:
    """No kubelet hears of these: MpsWatch logs each daemon's death and restart itself."""
