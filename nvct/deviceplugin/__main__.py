"""``nvct-device-plugin``: GPUs as Kubernetes extended resources (kubelet device plugin API).

Settings come from the ``[device-plugin]`` table of nvct's config.toml; flags override them.
Logs are JSON lines on stdout (the pod's log); errors also go to stderr as one line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import click
import grpc
import structlog

from nvct.base.atomic import write_atomic
from nvct.base.defaults import config_path
from nvct.base.errors import NvctError
from nvct.base.log import configure_stdout_structlog
from nvct.base.plugin_files import (
    CDI_CLASS,
    CDI_SPEC_NAME,
    CDI_VENDOR,
    KUBELET_SOCKET,
    STATUS_FILE,
)
from nvct.base.plugin_status import SETTINGS
from nvct.config import Config, load_config, setting_field
from nvct.deviceplugin.allocate import STRATEGIES, SharingPolicy
from nvct.deviceplugin.devices import (
    ID_STRATEGIES,
    MIG_STRATEGIES,
    DeviceConfigError,
    PluginDevice,
    resources,
)
from nvct.deviceplugin.guard import FIX as GUARD_FIX
from nvct.deviceplugin.guard import envvar_without_guard_pass, node_guard
from nvct.deviceplugin.health import Health
from nvct.deviceplugin.mps_watch import MpsWatch
from nvct.deviceplugin.preferred import pcie_score
from nvct.deviceplugin.server import Endpoint, ResourceService
from nvct.deviceplugin.status import StatusWriter
from nvct.deviceplugin.topology import read_topology
from nvct.deviceplugin.watchers import Verdicts, Watcher, watchdog
from nvct.host.health.latches import LatchFile, boot_id
from nvct.host.sharing import SharingConfigError, plan_sharing

WATCH_S = 0.05
MPS_WATCH_S = 0.1
MPS_STUCK_S = 60.0  # each MPS GPU's probe may wait out a command's timeout (mps.py: 5 s)
RETRY_MAX_S = 5.0
INIT_RETRY_MIN_S = 0.5
INIT_RETRY_S = 5.0
SUN_PATH_MAX = 107  # sockaddr_un's sun_path, less its NUL

log = structlog.get_logger("nvct-device-plugin")


def _logging() -> None:
    configure_stdout_structlog()


def _error(message: str) -> None:
    log.error("error", error=message)
    print(f"nvct-device-plugin: error: {message}", file=sys.stderr, flush=True)


class Plugin:
    """Every resource's endpoint, their registration and the devices' health."""

    def __init__(self, config: Config, stop: threading.Event) -> None:
        self.config = config
        self.stop = stop
        self.plugin_dir = Path(config.dp_plugin_dir)
        self.endpoints: list[Endpoint] = []
        self.watch: Any = None
        self.mps: MpsWatch | None = None
        self.status = StatusWriter(self.plugin_dir / STATUS_FILE, self._settings())

    def start(self) -> bool:
        """Discover, start the MPS daemons, write the CDI spec, build the services; False when
        NVML failed (a GPU that does not answer for a moment included).

        Raises:
            SharingConfigError: the sharing rules do not fit this host's GPUs.
            DeviceConfigError: the GPUs cannot be advertised as configured.
        """
        from nvct.deviceplugin.nvml_watch import NvmlWatch
        from nvct.host.arch import host_arch
        from nvct.host.discover.libraries import driver_nvml_library
        from nvct.host.load import load_inventory

        config = self.config
        try:
            inventory = load_inventory(config, use_cache=False)
            self.watch = NvmlWatch(driver_nvml_library(Path(config.driver_root), host_arch()))
        except NvctError as err:
            _error(f"{err.one_line()} (driver-root {config.driver_root})")
            return False
        try:
            self._build(inventory)
        except self.watch.nvml.NVMLError as err:
            _error(f"NVML failed setting up the devices: {err} (driver-root {config.driver_root})")
            self.close()
            return False
        return True

    def _build(self, inventory: Any) -> None:
        config = self.config
        plan = plan_sharing(config, inventory)
        for warning in plan.warnings:
            log.warning("sharing_config", warning=warning)
        found = resources(
            inventory,
            mig_strategy=config.dp_mig_strategy,
            sysfs_root=Path(config.dp_sysfs_root),
            plan=plan,
        )
        devices = [d for r in found for d in r.devices]
        self.health = Health(
            [d.id for d in devices],
            quiet=config.dp_quiet_period,
            ignored_xids=config.dp_ignored_xids,
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
        topology = read_topology(self.watch.nvml, devices)
        policy = SharingPolicy(
            fail_greater_than_one=config.dp_sharing_fail_greater_than_one,
            replicas_of_one_gpu=config.dp_sharing_replicas_of_one_gpu,
            mps_root=config.dp_mps_root,
        )
        for resource in found:
            service = ResourceService(
                resource,
                self.verdicts,
                strategies=config.dp_device_list_strategy,
                id_strategy=config.dp_device_id_strategy,
                cdi_names=names,
                links=topology.links,
                pcie=topology.pcie_closeness(pcie_score),
                sharing=policy,
                hidden=self.mps.hidden if self.mps else frozenset(),
            )
            endpoint = Endpoint(service, self.plugin_dir)
            if len(os.fsencode(endpoint.path)) > SUN_PATH_MAX:
                raise DeviceConfigError(
                    f"the socket of {resource.name}, {endpoint.path}, is longer than a Unix "
                    f"socket path may be ({SUN_PATH_MAX} bytes)",
                    hint="use a shorter plugin-dir or resource name",
                )
            self.endpoints.append(endpoint)
        self.watch.watch(devices)
        self._report(self.watch.first_look(self.health))  # before the first ListAndWatch
        log.info(
            "devices",
            resources={r.name: [d.id for d in r.devices] for r in found},
            strategies=list(config.dp_device_list_strategy),
        )
        if not found:
            log.warning("no_devices", detail="no GPU to advertise; waiting")

    def _mps(self, plan: Any, devices: list[PluginDevice], inventory: Any) -> MpsWatch | None:
        """The MPS GPUs' daemons, asked before anything is advertised: their replicas are
        advertised Healthy once the daemon answers with the limits (``nvct-cli mps-control``
        runs them, so they outlive this process)."""
        from nvct.deviceplugin.mps import MpsProbe, gpu_daemons
        from nvct.deviceplugin.mps_watch import Supervised

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
        out = [Watcher("health", self.health_step, devices, self.verdicts, self._report, self.stop)]
        if self.mps is not None:
            replicas = [r for s in self.mps.supervised for r in s.replicas]
            mps = Watcher(
                "mps", self.mps.step, replicas, self.verdicts, self._report, self.stop,
                interval=MPS_WATCH_S, stuck_after=MPS_STUCK_S,
            )  # fmt: skip
            out.append(mps)
        return out

    def _report(self, transitions: list[Any]) -> None:
        for t in transitions:
            log.warning("health", device=t.device, health=t.health, reason=t.reason)
        if transitions:
            self.write_status()
            for endpoint in self.endpoints:
                endpoint.service.notify()

    def _cdi_spec(self, inventory: Any) -> frozenset[str]:
        """Write the CDI spec the answers name (before registering); its device names."""
        if not {"cdi-cri", "cdi-annotations"} & set(self.config.dp_device_list_strategy):
            return frozenset()
        from nvct.cdi.specs import device_names
        from nvct.host.arch import host_arch
        from nvct.plan.cdi_spec import SpecOptions, build_spec, hook_program, to_json

        # Its own kind: the node's nvidia.com/gpu spec may sit in the same directory.
        options = SpecOptions(strategy="both", vendor=CDI_VENDOR, cls=CDI_CLASS)
        spec = build_spec(inventory, self.config, host_arch(), options=options, hook=hook_program())
        if self.config.dp_host_driver_root:
            spec = _on_host(spec, str(self.config.driver_root), self.config.dp_host_driver_root)
        path = Path(self.config.dp_cdi_spec_dir) / CDI_SPEC_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(str(path), to_json(spec).encode(), 0o644)
        log.info("cdi_spec_written", file=str(path))
        return frozenset(device_names(spec))

    def health_step(self) -> list[Any]:
        """One slice of NVML's answers and events, the recoveries due, an operator's clear."""
        transitions: list[Any] = self.watch.step(self.health)
        transitions += self.health.tick(time.monotonic())
        return transitions + self.health.reload(time.monotonic())

    def write_status(self) -> None:
        """What ``nvct-cli device-plugin-status`` shows: each advertised device, its health
        and why (rewritten atomically on every change)."""
        self.status.write(self._status)

    def _status(self) -> dict[str, list[dict[str, Any]]]:
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
        return {key: getattr(self.config, setting_field("device-plugin", key)) for key in SETTINGS}

    def serve(self) -> None:
        """Serve and register every endpoint; again whenever the kubelet restarts."""
        kubelet = self.plugin_dir / KUBELET_SOCKET
        registered: int | None = None  # kubelet.sock's inode when registered
        pause = 0.1
        waiting_logged = False
        while not self.stop.is_set():
            inode = _inode(kubelet)
            fresh = registered is None or inode != registered
            if not fresh and not any(e.gone() for e in self.endpoints):
                self.stop.wait(WATCH_S)
                continue
            if inode is None:
                if not waiting_logged:
                    log.info("waiting_for_kubelet", socket=str(kubelet))
                    waiting_logged = True
                self.stop.wait(WATCH_S)
                continue
            try:
                for endpoint in self.endpoints:
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
                resources=[e.service.resource.name for e in self.endpoints],
                kubelet=str(kubelet),
            )

    def close(self) -> None:
        """Stop serving, remove the sockets, quit the MPS daemons, release NVML."""
        for endpoint in self.endpoints:
            endpoint.stop(grace=0.5)
        if self.mps is not None:
            self.mps.stop()
        if self.watch is not None:
            self.watch.close()


def _on_host(value: Any, seen_as: str, host: str) -> Any:
    """``value`` with paths under ``seen_as`` (the driver root as the plugin sees it) moved
    under ``host`` (where the engine finds them)."""
    if isinstance(value, str) and (value == seen_as or value.startswith(seen_as.rstrip("/") + "/")):
        return os.path.normpath(os.path.join(host, os.path.relpath(value, seen_as)))
    if isinstance(value, list):
        return [_on_host(v, seen_as, host) for v in value]
    if isinstance(value, dict):
        return {k: _on_host(v, seen_as, host) for k, v in value.items()}
    return value


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def run(config: Config) -> int:
    """The plugin until SIGTERM/SIGINT; exit 0 then, 1 when NVML fails with fail-on-init."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    plugin = Plugin(config, stop)
    pause = INIT_RETRY_MIN_S
    try:
        while not plugin.start():
            if config.dp_fail_on_init_error:
                return 1
            log.info("init_retry", retry_in_s=pause)
            if stop.wait(pause):
                return 0
            pause = min(pause * 2, INIT_RETRY_S)
            plugin = Plugin(config, stop)
    except (SharingConfigError, DeviceConfigError) as err:  # the config, not the host
        _error(err.one_line())
        plugin.close()
        return 2
    except NvctError as err:  # the install (e.g. no nvct-cdi-hook for the CDI spec)
        _error(err.one_line())
        plugin.close()
        return 1
    for name in plugin.status.sweep():
        log.info("stale_temp_removed", file=name)
    plugin.write_status()
    watchers = [w.start() for w in plugin.watchers()]
    watchdog(watchers, stop)
    try:
        plugin.serve()
    except Exception as err:  # a bug: said, with its traceback; the DaemonSet restarts us
        log.error("serve_crashed", error=repr(err), traceback=traceback.format_exc())
        _error(f"the serve loop crashed: {err!r}")
        return 1
    finally:
        plugin.close()
        log.info("stopped")
    return 0


@click.command("nvct-device-plugin")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="nvct config.toml")
@click.option("--driver-root", type=click.Path(file_okay=False, path_type=Path))
@click.option("--dev-root", type=click.Path(file_okay=False, path_type=Path))
@click.option("--proc-root", type=click.Path(file_okay=False, path_type=Path))
@click.option("--mig-strategy", type=click.Choice(MIG_STRATEGIES))
@click.option("--device-id-strategy", type=click.Choice(ID_STRATEGIES))
@click.option(
    "--device-list-strategy",
    help=f"Comma list of {', '.join(STRATEGIES)}.",
)
@click.option("--plugin-dir", type=click.Path(file_okay=False))
@click.option("--cdi-spec-dir", type=click.Path(file_okay=False))
@click.option("--sysfs-root", type=click.Path(file_okay=False))
@click.option("--fail-on-init-error/--no-fail-on-init-error", default=None)
@click.option("--quiet-period", type=click.FloatRange(min=0))
@click.option(
    "--mps-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where each MPS daemon's pipe, log and shm directories go.",
)
def cli(config_file: str | None, **flags: Any) -> int:
    """Advertise the node's GPUs to the kubelet and answer its allocations."""
    _logging()
    try:
        config = load_config(config_file)
    except NvctError as err:
        _error(err.one_line())
        return 2
    overrides: dict[str, Any] = {}
    for name in ("driver_root", "dev_root", "proc_root"):
        if flags[name] is not None:
            overrides[name] = flags[name].absolute()
    for name in ("mig_strategy", "device_id_strategy", "plugin_dir", "cdi_spec_dir"):
        if flags[name] is not None:
            overrides[f"dp_{name}"] = flags[name]
    for name in ("sysfs_root", "fail_on_init_error", "quiet_period"):
        if flags[name] is not None:
            overrides[f"dp_{name}"] = flags[name]
    if flags["mps_root"] is not None:  # containers mount from it: never relative
        overrides["dp_mps_root"] = str(flags["mps_root"].absolute())
    if flags["device_list_strategy"]:
        chosen = tuple(s.strip() for s in flags["device_list_strategy"].split(",") if s.strip())
        bad = [s for s in chosen if s not in STRATEGIES]
        if bad or not chosen:
            _error(
                f"--device-list-strategy {flags['device_list_strategy']!r}: "
                f"use one or more of {', '.join(STRATEGIES)}"
            )
            return 2
        overrides["dp_device_list_strategy"] = chosen
    config = dataclasses.replace(config, **overrides)
    log.info("starting", settings=json.loads(json.dumps(_settings(config), default=str)))
    try:
        _check_guard(config, config_path(config_file)[0])
    except NvctError as err:
        _error(err.one_line())
        return 2
    return run(config)


def _check_guard(config: Config, own_file: str) -> None:
    """Say, at start, when the node's leak guard drops every answer this plugin gives.

    Raises:
        ConfigError: runtime-config names an invalid config.
    """
    guarded, where = node_guard(config, own_file)
    problem = envvar_without_guard_pass(config.dp_device_list_strategy, guarded, where)
    if problem is not None:
        log.error("envvar_ignored_by_guard", problem=problem, fix=GUARD_FIX)
        print(f"nvct-device-plugin: error: {problem} (fix: {GUARD_FIX})", file=sys.stderr)


def _settings(config: Config) -> dict[str, Any]:
    shown = [f.name for f in dataclasses.fields(config) if f.name.startswith(("dp_", "driver"))]
    return {name: getattr(config, name) for name in shown}


def main() -> int:
    """Console-script entry."""
    try:
        return int(cli.main(standalone_mode=False) or 0)
    except click.ClickException as err:
        err.show()
        return 2


if __name__ == "__main__":
    sys.exit(main())
