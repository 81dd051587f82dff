"""nvct-dra-plugin's API side, started beside the kubelet's sockets: the node's ResourceSlices
(``publish.Publisher``) and the health feed that taints their devices (``health.HealthFeed``),
each on a thread of its own until ``stop``.

Neither ends the plugin: claims the scheduler already allocated here are still prepared while
the API server refuses the slices (the error is said once, on stderr and in the log, naming
the RBAC rule to add), and without NVML the devices are published without health. Reset holds
are latched beside the plugin's checkpoint (``<plugins-dir>/<driver>/nvct-health``), so a
restarted plugin keeps a GPU that needs a reset tainted, as the device plugin does.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import structlog

from nvct.base.errors import NvctError
from nvct.config import Config
from nvct.dra.devices import DraDevice
from nvct.dra.health import HealthFeed
from nvct.dra.publish import Publisher
from nvct.kubeapi.client.access import ClusterAccess
from nvct.node.health.latches import LatchFile, boot_id

log = structlog.get_logger("nvct-dra-plugin")


def _said(what: str, err: NvctError) -> None:
    log.error(what, error=err.one_line())
    print(f"nvct-dra-plugin: error: {what}: {err.one_line()}", file=sys.stderr, flush=True)


def start_publishing(
    config: Config,
    access: ClusterAccess,
    *,
    node: str,
    driver: str,
    devices: Sequence[DraDevice],
    state_dir: Path,
    stop: threading.Event,
) -> Publisher:
    """The publisher, running; ``state_dir`` is the plugin's own directory (the latches').

    Raises:
        KubeApiError: the client configuration cannot be read.
    """
    publisher = Publisher(
        access.connect(), node, driver, server=access.server(), token_file=access.token_file
    )
    entries = [d.slice_entry() for d in devices]

    def publish() -> None:
        try:
            publisher.run(entries, stop)
        except NvctError as err:
            _said("ResourceSlices not published", err)

    latches = LatchFile(state_dir, boot_id(Path(config.proc_root)))
    feed = HealthFeed(publisher, devices, config, latches=latches)

    def watch_health() -> None:
        try:
            feed.run(stop)
        except NvctError as err:
            _said("no device health (the slices' devices stay untainted)", err)

    for target, name in ((publish, "resourceslices"), (watch_health, "health")):
        threading.Thread(target=target, name=name, daemon=True).start()
    return publisher
