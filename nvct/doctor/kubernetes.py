"""The Kubernetes node checks: kubelet.sock, nvct-device-plugin registered and serving (see
``k8s_plugin``), the RuntimeClass handler (``k8s_runtime``), the CDI spec the plugin names, a
``cdi-cri`` answer against containerd's CDI support (``k8s_cdi_cri``), and the MIG strategy
against the GPUs.

They run on a node that looks like a Kubernetes node (the kubelet's device-plugins directory
exists) or when asked (``--kubernetes``); elsewhere one SKIP says why. What the plugin advertises
is worked out by the plugin's own rule (``nvct.node.offer``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import socket
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from nvct.base.errors import ConfigError
from nvct.cdi.names import PLUGIN_KIND, PLUGIN_SPEC_NAME
from nvct.config import with_table
from nvct.doctor import k8s_cdi_cri, k8s_plugin, k8s_runtime
from nvct.doctor.cdi import drift_of, recorded_version
from nvct.doctor.context import DoctorContext
from nvct.doctor.result import CheckResult, failed, passed, skipped, warned
from nvct.node.devices import DeviceConfigError, Resource
from nvct.node.files import KUBELET_SOCKET
from nvct.node.guard import FIX as GUARD_FIX
from nvct.node.guard import envvar_without_guard_pass
from nvct.node.offer import offer
from nvct.node.status import SETTINGS, read_status

if TYPE_CHECKING:
    from nvct.host.inventory import Inventory

NAME = "kubernetes"
KUBELET = "kubelet-socket"
CDI_SPEC = "device-plugin-cdi-spec"
GUARD = "device-plugin-guard"
MIG = "mig-strategy"
NO_DRIVER = "the driver's GPUs are unknown (see the nvml check)"
CDI_STRATEGIES = ("cdi-cri", "cdi-annotations")
MIG_FIX = (
    'set [device-plugin] mig-strategy = "mixed" in config.toml (or "single" when every GPU '
    "is in MIG mode with one profile), then restart the plugin pod"
)


def check_kubernetes(ctx: DoctorContext) -> list[CheckResult]:
    """Every Kubernetes node check, or one SKIP when this is not a Kubernetes node."""
    directory = ctx.device_plugin_dir()
    if ctx.kubernetes is False:
        return [skipped(NAME, "not asked for (--no-kubernetes)")]
    if ctx.kubernetes is None and not directory.is_dir():
        return [
            skipped(
                NAME,
                f"not a Kubernetes node: no {directory} (the kubelet's device-plugins "
                "directory; --plugin-dir names another, --kubernetes checks anyway)",
            )
        ]
    inventory = ctx.inventory() if ctx.inventory is not None else None
    kubelet = check_kubelet_socket(directory)
    try:
        kubelet_mtime = (directory / KUBELET_SOCKET).stat().st_mtime
    except OSError:
        kubelet_mtime = None
    plugin = as_the_plugin_runs(ctx, directory)
    return [
        kubelet,
        *k8s_plugin.check_plugin(ctx, directory, kubelet_mtime),
        k8s_runtime.check_runtime_class(ctx),
        check_guard(plugin),
        check_cdi_spec(plugin, inventory),
        k8s_cdi_cri.check_cdi_cri(plugin),
        check_mig_strategy(plugin, inventory),
    ]


def as_the_plugin_runs(ctx: DoctorContext, directory: Path) -> DoctorContext:
    """``ctx`` with the ``[device-plugin]`` settings the running plugin recorded in its status
    file (from a pod, its ConfigMap's, not the node's config.toml); ``ctx`` where none are, or
    where they are not valid settings."""
    status, _ = read_status(directory)
    if status is None:
        return ctx
    recorded = {k: v for k, v in status.settings.items() if k in SETTINGS}
    if not recorded:
        return ctx
    try:
        config = with_table(ctx.config, "device-plugin", recorded, source=str(directory))
    except ConfigError:
        return ctx
    return dataclasses.replace(ctx, config=config)


def check_kubelet_socket(directory: Path) -> CheckResult:
    """kubelet.sock is a socket someone listens on (a connect, no gRPC)."""
    path = directory / KUBELET_SOCKET
    fix = (
        "start the kubelet (systemctl status kubelet), or name its device-plugins directory: "
        "[device-plugin] plugin-dir in config.toml or --plugin-dir"
    )
    try:
        info = path.lstat()
    except FileNotFoundError:
        return failed(KUBELET, f"no {path}: the kubelet is not running here", fix)
    except OSError as err:
        return failed(KUBELET, f"cannot stat {path}: {err.strerror}", fix)
    if not stat.S_ISSOCK(info.st_mode):
        return failed(KUBELET, f"{path} is not a socket", fix)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(str(path))
        except OSError as err:
            return failed(
                KUBELET,
                f"{path} is a socket nobody listens on ({err.strerror or err}): the kubelet "
                "is stopped",
                fix,
            )
    created = dt.datetime.fromtimestamp(info.st_mtime, dt.timezone.utc)
    return passed(
        KUBELET, f"{path}: the kubelet listens (socket created {created:%Y-%m-%d %H:%M:%S} UTC)"
    )


def advertised(ctx: DoctorContext, inventory: Inventory) -> tuple[Resource, ...]:
    """What the plugin advertises on these GPUs with the configured strategies.

    Raises:
        DeviceConfigError: the MIG strategy does not fit the GPUs.
    """
    # strict=False: the sharing check says why the rules do not fit; whole devices still count
    return offer(ctx.config, inventory, sysfs_root=ctx.sysfs_root, strict=False).resources()


def check_guard(ctx: DoctorContext) -> CheckResult:
    """The plugin's device-list strategy against this node's leak guard
    (``request.only-allocated-gpus``, which drops every ``NVIDIA_VISIBLE_DEVICES``)."""
    strategies = ctx.config.device_plugin.device_list_strategy
    where = ctx.config_file or "the node's config.toml"
    problem = envvar_without_guard_pass(strategies, ctx.config.request.only_allocated_gpus, where)
    if problem is not None:
        return failed(GUARD, problem, GUARD_FIX)
    state = "on" if ctx.config.request.only_allocated_gpus else "off"
    return passed(
        GUARD,
        f"request.only-allocated-gpus is {state}; the plugin answers "
        f"{', '.join(strategies)}, which nvct-runtime accepts",
    )


def check_cdi_spec(ctx: DoctorContext, inventory: Inventory | None) -> CheckResult:
    """With a CDI device-list strategy: the plugin's spec exists, parses, names every device
    the plugin advertises, and is what would be generated now."""
    strategies = ctx.config.device_plugin.device_list_strategy
    if not set(CDI_STRATEGIES) & set(strategies):
        return skipped(
            CDI_SPEC, f"device-list-strategy {','.join(strategies)} hands out no CDI device"
        )
    path = Path(ctx.config.device_plugin.cdi_spec_dir) / PLUGIN_SPEC_NAME
    fix = (
        f"restart the plugin pod (it writes {path} when it starts); the engine's CDI spec "
        "dirs must include [device-plugin] cdi-spec-dir"
    )
    from nvct.cdi.specs import load_spec_file

    read = [str(d) for d in ctx.cdi_dirs]
    if path.parent not in ctx.cdi_dirs:
        return failed(
            CDI_SPEC,
            f"the plugin writes its CDI spec to {path.parent}; the engines read {', '.join(read)}"
            ": the CDI names it answers resolve nowhere",
            'set [device-plugin] cdi-spec-dir = "/var/run/cdi" (read by containerd, CRI-O and '
            "nvct-runtime alike)",
        )
    if not path.exists():
        return failed(
            CDI_SPEC,
            f"no {path}: the plugin's answers name CDI devices no engine can resolve",
            fix,
        )
    try:
        spec = load_spec_file(path)
    except ValueError as err:
        return failed(CDI_SPEC, str(err), fix)
    if spec.get("kind") != PLUGIN_KIND:
        return failed(
            CDI_SPEC,
            f"{path} is of kind {spec.get('kind')}, the plugin's answers name {PLUGIN_KIND}: an "
            "older nvct-device-plugin wrote it, and it collides with the node's nvidia.com/gpu "
            "spec",
            fix,
        )
    if inventory is None:
        return warned(CDI_SPEC, f"{path} parses; {NO_DRIVER}, so it is not compared", "")
    try:
        devices = [d for r in advertised(ctx, inventory) for d in r.devices]
    except DeviceConfigError:
        return skipped(CDI_SPEC, f"{path}: the plugin cannot start (see {MIG})")
    names = {str(d.get("name")) for d in spec.get("devices") or () if isinstance(d, dict)}
    missing = [d.index for d in devices if d.uuid not in names and d.index not in names]
    if missing:
        return failed(
            CDI_SPEC,
            f"{path} names no device for GPU(s) {', '.join(missing[:8])}: pods given those "
            "get a CDI name the engine cannot resolve",
            fix,
        )
    version = recorded_version(spec)
    if version != inventory.driver_version:
        written = f"was written for driver {version}" if version else "records no driver version"
        return failed(
            CDI_SPEC,
            f"{path} {written}, the driver is {inventory.driver_version}: stale device nodes "
            "and libraries",
            fix,
        )
    # The plugin moves paths under host-driver-root and host-dev-root: not what `cdi generate`
    # writes here.
    moved = ctx.config.device_plugin.host_driver_root or ctx.config.device_plugin.host_dev_root
    drift = None if moved else drift_of(ctx, spec)
    if drift:
        return failed(CDI_SPEC, f"{path} is stale: {drift}", fix)
    return passed(
        CDI_SPEC,
        f"{path} names all {len(devices)} advertised device(s), driver {version}",
    )


def check_mig_strategy(ctx: DoctorContext, inventory: Inventory | None) -> CheckResult:
    """``[device-plugin] mig-strategy`` against the GPUs' MIG modes."""
    strategy = ctx.config.device_plugin.mig_strategy
    if inventory is None:
        return skipped(MIG, f"mig-strategy {strategy}: {NO_DRIVER}")
    try:
        found = advertised(ctx, inventory)
    except DeviceConfigError as err:
        return failed(
            MIG,
            f"mig-strategy {strategy}: {err.message}: nvct-device-plugin refuses to start",
            err.hint or MIG_FIX,
        )
    shown = {d.uuid for r in found for d in r.devices}
    in_mig = [g for g in inventory.gpus if g.mig_enabled]
    hidden = [g for g in in_mig if g.migs and not {m.uuid for m in g.migs} <= shown]
    empty = [g for g in in_mig if not g.migs]
    summary = ", ".join(f"{r.name} x{len(r.devices)}" for r in found) or "nothing"
    if hidden:
        count = sum(len(g.migs) for g in hidden)
        return warned(
            MIG,
            f"mig-strategy {strategy}: GPU(s) {', '.join(str(g.index) for g in hidden)} are "
            f"in MIG mode; their {count} MIG device(s) are not advertised (advertised: "
            f"{summary})",
            MIG_FIX,
        )
    if empty:
        return warned(
            MIG,
            f"GPU(s) {', '.join(str(g.index) for g in empty)} are in MIG mode with no MIG "
            "device: nothing of them is advertised",
            "create MIG devices (nvidia-smi mig -cgi <profiles> -C -i <gpu>) or turn MIG mode "
            "off (nvidia-smi -mig 0 -i <gpu>)",
        )
    if not in_mig:
        return passed(MIG, f"mig-strategy {strategy}: no GPU is in MIG mode; advertises {summary}")
    return passed(MIG, f"mig-strategy {strategy} fits the GPUs in MIG mode: advertises {summary}")
