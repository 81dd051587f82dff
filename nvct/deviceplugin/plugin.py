"""nvct-device-plugin's daemon: every resource's gRPC endpoint, their registration with the
kubelet (again whenever the kubelet restarts), the devices' health loops and the status file.

What it advertises is the node's offer (``nvct.node.offer``); how it answers an allocation is
``allocate``; ``__main__`` is its command line.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import structlog

from nvct.base.atomic import write_atomic
from nvct.base.errors import NvctError
from nvct.cdi.names import PLUGIN_CLASS, PLUGIN_SPEC_NAME, PLUGIN_VENDOR
from nvct.config import Config
from nvct.config.declare import recorded
from nvct.deviceplugin.allocate import SharingPolicy
from nvct.deviceplugin.preferred import pcie_score
from nvct.deviceplugin.server import Endpoint, ResourceService
from nvct.deviceplugin.status import StatusWriter
from nvct.deviceplugin.watchers import Verdicts, Watcher, watchdog
from nvct.node.devices import DeviceConfigError, PluginDevice
from nvct.node.files import KUBELET_SOCKET, STATUS_FILE
from nvct.node.health.latches import LatchFile, boot_id
from nvct.node.health.state import Health, Transition
from nvct.node.mps_watch import MpsWatch
from nvct.node.offer import offer
from nvct.node.sharing import SharingPlan
from nvct.node.status import Devices
from nvct.node.topology import read_topology
from nvct.plan.cdi_spec import on_host

if TYPE_CHECKING:
    from nvct.host.inventory import DeviceNode, Inventory
    from nvct.node.health.nvml_watch import NvmlWatch

WATCH_S = 0.05
MPS_WATCH_S = 0.1
MPS_STUCK_S = 60.0  # each MPS GPU's probe may wait out a command's timeout (mps.py: 5 s)
RETRY_MAX_S = 5.0
RETIRE_S = 5.0  # a retired watcher's step in flight (a health step waits 0.2 s for events)
SUN_PATH_MAX = 107  # sockaddr_un's sun_path, less its NUL

log = structlog.get_logger("nvct-device-plugin")


def error(message: str) -> None:
    """Log an error, and say it on stderr as one line."""
    log.error("error", error=message)
    print(f"nvct-device-plugin: error: {message}", file=sys.stderr, flush=True)


class Plugin:
    """Every resource's endpoint, their registration and the devices' health."""

    def __init__(self, config: Config, stop: threading.Event) -> None:
        self.config = config
        self.stop = stop
        self.plugin_dir = Path(config.device_plugin.plugin_dir)
        self.halt = threading.Event()  # this plugin's watchers and watchdog end (a reload)
        self.running: list[Watcher] = []
        self.endpoints: list[Endpoint] = []
        self.watch: NvmlWatch | None = None
        self.mps: MpsWatch | None = None
        self.status = StatusWriter(self.plugin_dir / STATUS_FILE, self._settings())

    def start(self) -> bool:
        """Discover, start the MPS daemons, write the CDI spec, build the services; False when
        NVML failed (a GPU that does not answer for a moment included).

        Raises:
            SharingConfigError: the sharing rules do not fit this host's GPUs.
            DeviceConfigError: the GPUs cannot be advertised as configured.
        """
        from nvct.host.arch import host_arch
        from nvct.host.discover.libraries import driver_nvml_library
        from nvct.host.load import load_inventory
        from nvct.node.health.nvml_watch import NvmlWatch  # pynvml: when the plugin starts

        config = self.config
        try:
            inventory = load_inventory(config, use_cache=False)
            watch = NvmlWatch(driver_nvml_library(Path(config.driver_root), host_arch()))
        except NvctError as err:
            error(f"{err.one_line()} (driver-root {config.driver_root})")
            return False
        self.watch = watch
        try:
            self._build(inventory, watch)
        except watch.nvml.NVMLError as err:
            error(f"NVML failed setting up the devices: {err} (driver-root {config.driver_root})")
            self.close()
            return False
        return True

    def _build(self, inventory: Inventory, watch: NvmlWatch) -> None:
        config = self.config
        offered = offer(config, inventory)
        plan = offered.plan
        for warning in plan.warnings:
            log.warning("sharing_config", warning=warning)
        found = offered.resources()
        devices = [d for r in found for d in r.devices]
        self.health = Health(
            [d.id for d in devices],
            quiet=config.device_plugin.quiet_period,
            ignored_xids=config.device_plugin.ignored_xids,
            uuids={d.id: d.uuid for d in devices},
            latches=LatchFile(self.plugin_dir, boot_id(Path(config.proc_root))),
        )
        try:
            for t in self.health.restore(time.monotonic()):  # latched by an earlier run
                log.warning("health", device=t.device, health=t.health, reason=t.reason)
        except NvctError as err:
            log.warning("latches_not_restored", error=err.one_line())
        self.verdicts = Verdicts(self.health)
        self.mps = self._mps(plan, devices, inventory)
        names = self._cdi_spec(inventory)
        topology = read_topology(watch.nvml, devices)
        policy = SharingPolicy(
            fail_greater_than_one=config.device_plugin.sharing.fail_requests_greater_than_one,
            replicas_of_one_gpu=config.device_plugin.sharing.replicas_of_one_gpu,
            mps_root=config.device_plugin.sharing.mps_root,
        )
        nodes = device_nodes(inventory, config) if config.device_plugin.pass_device_specs else None
        for resource in found:
            service = ResourceService(
                resource,
                self.verdicts,
                strategies=config.device_plugin.device_list_strategy,
                id_strategy=config.device_plugin.device_id_strategy,
                cdi_names=names,
                links=topology.links,
                pcie=topology.pcie_closeness(pcie_score),
                sharing=policy,
                hidden=self.mps.hidden if self.mps else frozenset(),
                annotation_prefix=config.device_plugin.cdi_annotation_prefix,
                device_nodes=nodes,
            )
            endpoint = Endpoint(service, self.plugin_dir)
            if len(os.fsencode(endpoint.path)) > SUN_PATH_MAX:
                raise DeviceConfigError(
                    f"the socket of {resource.name}, {endpoint.path}, is longer than a Unix "
                    f"socket path may be ({SUN_PATH_MAX} bytes)",
                    hint="use a shorter plugin-dir or resource name",
                )
            self.endpoints.append(endpoint)
        if config.device_plugin.health_checks:
            watch.watch(devices)
            self._report(watch.first_look(self.health))  # before the first ListAndWatch
        else:
            log.warning("health_checks_off", detail="health-checks = false: every device "
                        "stays Healthy whatever NVML says")  # fmt: skip
        log.info(
            "devices",
            resources={r.name: [d.id for d in r.devices] for r in found},
            strategies=list(config.device_plugin.device_list_strategy),
        )
        if not found:
            log.warning("no_devices", detail="no GPU to advertise; waiting")

    def _mps(
        self, plan: SharingPlan, devices: list[PluginDevice], inventory: Inventory
    ) -> MpsWatch | None:
        """The MPS GPUs' daemons, asked before anything is advertised: their replicas are
        advertised Healthy once the daemon answers with the limits (``nvct-cli mps-control``
        runs them, so they outlive this process)."""
        from nvct.node.mps import MpsProbe, gpu_daemons
        from nvct.node.mps_watch import Supervised

        probes = gpu_daemons(MpsProbe, self.config, inventory, plan.shares.values())
        if not probes:
            return None
        supervised = [
            Supervised(p, [d.id for d in devices if d.uuid == p.paths.uuid], max_pause=1.0)
            for p in probes
        ]
        watch = MpsWatch(supervised, self.health)
        watch.step()
        return watch

    def watchers(self) -> list[Watcher]:
        """The supervised loops: NVML health for every device, the MPS daemons for their
        replicas."""
        devices = list(self.health.state)
        out = []
        if self.config.device_plugin.health_checks:
            health = Watcher(
                "health", self.health_step, devices, self.verdicts, self._report, self.stop,
                retired=self.halt,
            )  # fmt: skip
            out.append(health)
        if self.mps is not None:
            replicas = [r for s in self.mps.supervised for r in s.replicas]
            mps = Watcher(
                "mps", self.mps.step, replicas, self.verdicts, self._report, self.stop,
                retired=self.halt,
                interval=MPS_WATCH_S, stuck_after=MPS_STUCK_S,
            )  # fmt: skip
            out.append(mps)
        return out

    def run_watchers(self) -> None:
        """Start the watchers, and a watchdog over them, until this plugin is closed or
        retired."""
        self.running = [w.start() for w in self.watchers()]
        watchdog(self.running, self.halt)

    def _report(self, transitions: list[Transition]) -> None:
        for t in transitions:
            log.warning("health", device=t.device, health=t.health, reason=t.reason)
        if transitions:
            self.write_status()
            for endpoint in self.endpoints:
                endpoint.service.notify()

    def _cdi_spec(self, inventory: Inventory) -> frozenset[str]:
        """Write the CDI spec the answers name (before registering); its device names."""
        if not {"cdi-cri", "cdi-annotations"} & set(self.config.device_plugin.device_list_strategy):
            return frozenset()
        from nvct.cdi.specs import device_names
        from nvct.plan.cdi_spec import SpecOptions, kubelet_plugin_spec, to_json

        # Its own kind: the node's nvidia.com/gpu spec may sit in the same directory.
        options = SpecOptions(strategy="both", vendor=PLUGIN_VENDOR, cls=PLUGIN_CLASS)
        spec = kubelet_plugin_spec(inventory, self.config, options)
        path = Path(self.config.device_plugin.cdi_spec_dir) / PLUGIN_SPEC_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(str(path), to_json(spec).encode(), 0o644)
        log.info("cdi_spec_written", file=str(path))
        return frozenset(device_names(spec))

    def health_step(self) -> list[Transition]:
        """One slice of NVML's answers and events, the recoveries due, an operator's clear."""
        assert self.watch is not None  # noqa: S101 - watchers start after start()
        transitions = self.watch.step(self.health)
        transitions += self.health.tick(time.monotonic())
        return transitions + self.health.reload(time.monotonic())

    def write_status(self) -> None:
        """What ``nvct-cli device-plugin-status`` shows: each advertised device, its health
        and why (rewritten atomically on every change)."""
        self.status.write(self._status)

    def _status(self) -> Devices:
        return {
            e.service.resource.name: [
                {
                    "id": d.id,
                    "uuid": d.uuid,
                    "sharing": d.sharing,
                    "health": self.verdicts.get(d.id, "Healthy"),
                    "reason": self.verdicts.reason(d.id) if d.id in self.verdicts else "",
                }
                for d in e.service.resource.devices
            ]
            for e in self.endpoints
        }

    def _settings(self) -> dict[str, Any]:
        """The settings the status file records (doctor judges the node by them)."""
        return recorded(self.config.device_plugin)

    def serve(
        self, reload: Callable[[], bool] = lambda: False, registered: int | None = None
    ) -> int | None:
        """Serve and register every endpoint; again whenever the kubelet restarts; until stop,
        or until ``reload()`` says to, then kubelet.sock's inode when last registered.

        ``registered`` (a reload's): the endpoints already serving stay as they are; only
        those not serving (new or changed resources) are served and registered.
        """
        kubelet = self.plugin_dir / KUBELET_SOCKET
        pause = 0.1
        waiting_logged = False
        while not self.stop.is_set():
            if reload():
                return registered
            inode = _inode(kubelet)
            fresh = registered is None or inode != registered
            todo = self.endpoints if fresh else [e for e in self.endpoints if e.gone()]
            if not todo:
                self.stop.wait(WATCH_S)
                continue
            if inode is None:
                if not waiting_logged:
                    log.info("waiting_for_kubelet", socket=str(kubelet))
                    waiting_logged = True
                self.stop.wait(WATCH_S)
                continue
            try:
                for endpoint in todo:
                    endpoint.stop(grace=0)
                    endpoint.serve()
                    endpoint.register()
            except (grpc.RpcError, OSError) as err:
                # the kubelet's sweep of its directory races our unlink/bind/stat, a restarting
                # kubelet refuses: both pass, so try again rather than die
                detail = err.details() if isinstance(err, grpc.RpcError) else str(err)
                log.warning("register_failed", error=detail, retry_in_s=pause)
                registered = None
                self.stop.wait(pause)
                pause = min(pause * 2, RETRY_MAX_S)
                continue
            registered, pause, waiting_logged = inode, 0.1, False
            log.info(
                "registered",
                resources=[e.service.resource.name for e in todo],
                kubelet=str(kubelet),
            )
        return registered

    def adopt(self, old: Plugin) -> list[str]:
        """Take over ``old``'s running endpoints whose resource answers as this plugin's would
        (the kubelet keeps their registration and ListAndWatch stream), then retire ``old``:
        its watchers end, its other endpoints stop (their sockets go), its NVML is released.
        The MPS daemons are ``nvct-cli mps-control``'s and run on. The resources kept."""
        kept = []
        running = {e.service.resource.name: e for e in old.endpoints if e.server is not None}
        for i, endpoint in enumerate(self.endpoints):
            mine = endpoint.service
            theirs = running.get(mine.resource.name)
            if theirs is None or theirs.service.signature() != mine.signature():
                continue
            before = theirs.service.device_list()
            theirs.service.health, theirs.service.hidden = mine.health, mine.hidden
            if theirs.service.device_list() != before:  # the health this plugin found
                theirs.service.notify()
            self.endpoints[i] = theirs
            kept.append(mine.resource.name)
        old.halt.set()
        for watcher in old.running:  # a step in flight ends before its NVML is released
            if watcher.thread is not None:
                watcher.thread.join(RETIRE_S)
        for endpoint in old.endpoints:
            if endpoint not in self.endpoints:
                endpoint.stop(grace=0.5)
        old.endpoints = []
        if old.watch is not None:
            old.watch.close()
        return kept

    def close(self) -> None:
        """Stop serving, remove the sockets, quit the MPS daemons, release NVML."""
        self.halt.set()
        for endpoint in self.endpoints:
            endpoint.stop(grace=0.5)
        if self.mps is not None:
            self.mps.stop()
        if self.watch is not None:
            self.watch.close()


def device_nodes(inventory: Inventory, config: Config) -> dict[str, tuple[tuple[str, str], ...]]:
    """Each device's nodes by UUID as (host path, container path): its GPU's node, a MIG
    device's capabilities, and the control nodes the host has (NVIDIA's GetDevicePaths). Host
    paths as the host sees them, where ``host-dev-root`` (else ``host-driver-root``) says the
    plugin sees them elsewhere (NVIDIA's nvidiaDevRoot, which defaults to its driver root)."""
    host = config.device_plugin.host_dev_root or config.device_plugin.host_driver_root

    def pair(node: DeviceNode) -> tuple[str, str]:
        where = on_host(node.host_path, str(config.dev_root), host) if host else node.host_path
        return (where, node.path)

    control = tuple(pair(n) for n in inventory.control_nodes)
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    for gpu in inventory.gpus:
        own = (pair(gpu.node),) if gpu.node is not None else ()
        out[gpu.uuid] = (*own, *control)
        for mig in gpu.migs:
            out[mig.uuid] = (*own, *(pair(c) for c in mig.caps), *control)
    return out


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None
