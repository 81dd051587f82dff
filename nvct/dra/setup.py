"""nvct-dra-plugin's start: discover the GPUs, render the node's CDI edits once, read the
checkpoint, take over the MPS daemons of the claims it names, connect to the API server, and
serve the kubelet's sockets."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import structlog

from nvct.config import Config
from nvct.dra.checkpoint import Checkpoint
from nvct.dra.claimspec import NodeSpec
from nvct.dra.computemode import ComputeModes
from nvct.dra.devices import dra_devices
from nvct.dra.driver import Driver
from nvct.dra.mps import ClaimDaemons
from nvct.dra.server import Sockets
from nvct.dra.timeslice import TimeSlices
from nvct.host.inventory import Inventory
from nvct.node.topology import Topology, read_topology

log = structlog.get_logger("nvct-dra-plugin")


@dataclass(frozen=True, slots=True)
class Settings:
    """Where the plugin meets the kubelet, the engine and the API server."""

    driver: str
    node: str  # also the pool name of the node's ResourceSlices
    registry_dir: Path
    plugins_dir: Path
    cdi_root: Path
    mps_root: Path  # a tmpfs: MPS claims' shm must not reach the disk
    sysfs_root: Path
    kubeconfig: str
    service_account_dir: str


def start(config: Config, settings: Settings, stop: threading.Event | None = None) -> Sockets:
    """Serving, registered as soon as the kubelet dials; the claims' MPS daemons supervised
    until ``stop``.

    Raises:
        NvctError: no driver, no nvct-cdi-hook, an unreadable checkpoint, or no API access.
        OSError: a socket cannot be bound.
    """
    from nvct.cdi.names import DRA_CLASS, DRA_VENDOR
    from nvct.host.load import load_inventory
    from nvct.kubeapi.client.access import ClusterAccess
    from nvct.kubeapi.client.claims import claim_reader
    from nvct.plan.cdi_spec import SpecOptions, kubelet_plugin_spec

    inventory = load_inventory(config, use_cache=False)
    links = topology(config, inventory)
    devices = dra_devices(
        inventory, sysfs_root=settings.sysfs_root, nvlinks=links.nvlinks, switches=links.switches
    )
    options = SpecOptions(strategy="uuid", vendor=DRA_VENDOR, cls=DRA_CLASS)
    # The device plugin's writer: the same edits, and host paths under host-driver-root.
    spec = kubelet_plugin_spec(inventory, config, options)
    checkpoint = Checkpoint(settings.plugins_dir / settings.driver)
    access = ClusterAccess(settings.kubeconfig, settings.service_account_dir)
    mps = claim_daemons(config, inventory, settings.mps_root)
    smi = nvidia_smi(config, inventory)
    for uid, prepared in checkpoint.claims.items():
        if prepared.mps is not None:
            mps.resume(uid, prepared.mps)
    threading.Thread(
        target=mps.run, args=(stop or threading.Event(),), name="mps", daemon=True
    ).start()
    driver = Driver(
        name=settings.driver, pool=settings.node, devices=devices,
        node_spec=NodeSpec.from_spec(spec), cdi_dir=settings.cdi_root, checkpoint=checkpoint,
        fetch=claim_reader(access), mps=mps, timeslices=TimeSlices(smi),
        modes=ComputeModes(smi),
    )  # fmt: skip
    log.info(
        "devices",
        devices=[d.name for d in devices],
        prepared=sorted(checkpoint.claims),
        cdi_root=str(settings.cdi_root),
    )
    sockets = Sockets(driver, settings.registry_dir, settings.plugins_dir)
    sockets.serve()
    return sockets


def claim_daemons(config: Config, inventory: Inventory, root: Path) -> ClaimDaemons:
    """The claims' MPS daemons, run with the host driver's ``nvidia-cuda-mps-control`` (a node
    without it still serves claims without MPS; MPS claims are refused saying so)."""
    from nvct.node.mps import mps_program
    from nvct.node.sharing import SharingConfigError

    try:
        program: tuple[Path, str] | str = mps_program(config, inventory)
    except SharingConfigError as err:
        program = err.one_line()
    return ClaimDaemons(root, program)


def nvidia_smi(config: Config, inventory: Inventory) -> tuple[Path, str] | str:
    """The host driver's nvidia-smi and the LD_LIBRARY_PATH it needs, for time-slice intervals
    and compute modes, or the one line saying why there is none (a node without it still
    serves claims that need neither; others are refused saying so)."""
    from nvct.node.driverbin import driver_binary, driver_library_path

    smi = driver_binary(inventory, "nvidia-smi")
    if smi is None:
        return f"no nvidia-smi under {config.driver_root}"
    return (smi, driver_library_path(config, inventory))


def topology(config: Config, inventory: Inventory) -> Topology:
    """NVLink links between the GPUs and the NVSwitches they reach, through NVML (none where
    NVML does not answer: the devices then have no NVLink domain, which only narrows what
    claims can match)."""
    from nvct.base.errors import NvctError
    from nvct.host.arch import host_arch
    from nvct.host.discover.libraries import driver_nvml_library
    from nvct.host.discover.nvml import open_nvml
    from nvct.node.devices import PluginDevice

    gpus = [
        PluginDevice(g.uuid, g.uuid, str(g.index), g.index, g.pci_bus_id, None, g.minor)
        for g in inventory.gpus
    ]
    try:
        nvml = open_nvml(driver_nvml_library(Path(config.driver_root), host_arch()))
    except (NvctError, OSError) as err:
        log.warning("no_topology", error=str(err))
        return Topology({}, {})
    try:
        return read_topology(nvml, gpus)
    finally:
        nvml.nvmlShutdown()
