"""The exporter process: discover the GPUs, open NVML, sample in the background, serve
``/metrics`` until SIGTERM or SIGINT."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from nvct.base.errors import NvctError
from nvct.config import Config
from nvct.exporter.collector import SampleCollector
from nvct.exporter.sample import GpuIdentity, MigIdentity
from nvct.exporter.sampler import Policy, Sampler
from nvct.kubeapi.cri.client import CriClient
from nvct.kubeapi.podresources.client import PodResourcesClient
from nvct.kubeapi.podresources.ids import DeviceMap, GpuIds
from nvct.node.devices import DeviceConfigError
from nvct.node.offer import offer

if TYPE_CHECKING:
    from nvct.host.inventory import Inventory

log = structlog.get_logger("nvct-exporter")


def report_error(message: str) -> None:
    """An error in the JSON log and as one line on stderr."""
    log.error("error", error=message)
    print(f"nvct-cli exporter: error: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Discovered:
    """The node's GPUs, as labels and as the device IDs that name them; the resources this
    node's ``[device-plugin]`` offers them as."""

    gpus: list[GpuIdentity]
    devices: DeviceMap
    offered: tuple[str, ...] = ()


def discover(config: Config) -> Discovered:
    """The GPUs of the driver root's inventory (fresh, not cached: a DaemonSet starts rarely).

    Raises:
        NvctError: discovery failed.
    """
    from nvct.host.load import load_inventory

    inventory = load_inventory(config, use_cache=False)
    gpus = [
        GpuIdentity(
            g.index,
            g.uuid,
            g.pci_bus_id,
            f"nvidia{g.minor}",
            g.name,
            tuple(MigIdentity(m.uuid, m.gpu_instance, m.profile) for m in g.migs),
        )
        for g in inventory.gpus
    ]
    ids = [
        GpuIds(g.uuid, g.index, tuple((m.uuid, m.index) for m in g.migs)) for g in inventory.gpus
    ]
    return Discovered(gpus, DeviceMap(ids), offered_resources(config, inventory))


def offered_resources(config: Config, inventory: Inventory) -> tuple[str, ...]:
    """The resources ``[device-plugin]`` offers on these GPUs (``nvct.node.offer``), so a pod
    holding a renamed one (``nvidia.com/gpu.shared``, a rule's own) is attributed before the
    plugin's status file names it, or where the plugin runs elsewhere; none where the plugin
    could not advertise them (a MIG strategy that does not fit)."""
    try:
        return tuple(r.name for r in offer(config, inventory, strict=False).resources())
    except DeviceConfigError:
        return ()


def hostname(config: Config) -> str:
    """The Hostname label: configured, else the DaemonSet's NODE_NAME, else the host name."""
    return config.exporter.hostname or os.environ.get("NODE_NAME", "") or socket.gethostname()


def driver_version(nvml: Any) -> str:
    """The DCGM_FI_DRIVER_VERSION label ("" where NVML does not say)."""
    try:
        version = nvml.nvmlSystemGetDriverVersion()
    except nvml.NVMLError:
        return ""
    return version.decode() if isinstance(version, bytes) else str(version)


def run(config: Config) -> int:
    """Serve until SIGTERM/SIGINT; 0 then, 1 when the GPUs or NVML cannot be read at start."""
    from nvct.host.arch import host_arch
    from nvct.host.discover.libraries import driver_nvml_library
    from nvct.host.discover.nvml import open_nvml

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        found = discover(config)
        nvml = open_nvml(driver_nvml_library(Path(config.driver_root), host_arch()))
    except NvctError as err:
        report_error(f"{err.one_line()} (driver-root {config.driver_root})")
        return 1
    client = (
        PodResourcesClient(config.exporter.pod_resources_socket)
        if config.exporter.kubernetes
        else None
    )
    policy = Policy(
        Path(config.device_plugin.plugin_dir),
        config.device_plugin.quiet_period,
        config.device_plugin.ignored_xids,
        (*config.exporter.extra_resources, *found.offered),
        config.exporter.xid_count_window,
    )
    cri = (
        CriClient(config.exporter.cri_socket)
        if config.exporter.kubernetes and config.exporter.per_pod_usage
        else None
    )
    try:
        sampler = Sampler(nvml, found.gpus, found.devices, client, policy, cri)
    except nvml.NVMLError as err:  # a GPU the inventory listed no longer answers for its UUID
        report_error(f"NVML cannot open the GPUs it listed: {err}")
        return 1
    if not sampler.xids.supported:
        log.warning("xid_events_unsupported", detail="XID metrics stay 0")
    from nvct.exporter.exposition import serve

    collector = SampleCollector(
        sampler.latest,
        hostname(config),
        kubernetes=config.exporter.kubernetes,
        driver_version=driver_version(nvml),
        xid_window_s=config.exporter.xid_count_window,
    )
    try:
        server = serve(config.exporter.address, config.exporter.port, collector.collect)
    except OSError as err:
        report_error(
            f"cannot listen on {config.exporter.address}:{config.exporter.port}: {err.strerror}"
        )
        return 1
    sampler.start(config.exporter.interval)
    log.info(
        "serving",
        address=config.exporter.address,
        port=server.server_port,
        interval_s=config.exporter.interval,
        gpus=[g.uuid for g in found.gpus],
        pod_resources=config.exporter.pod_resources_socket if config.exporter.kubernetes else None,
    )
    stop.wait()
    server.shutdown()
    sampler.stop()
    sampler.close()
    for closing in (client, cri):
        if closing is not None:
            closing.close()
    log.info("stopped")
    return 0
