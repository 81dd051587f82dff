"""nvct-device-plugin on a Kubernetes node: each of its sockets answers GetDevicePluginOptions
(gRPC, v1beta1) within a short timeout and is newer than kubelet.sock, and its status file lists
healthy devices.

Why socket age means registration: a restarting kubelet deletes every plugin socket and creates
a new kubelet.sock; the plugin then serves on a new socket and registers again. A plugin socket
older than kubelet.sock therefore belongs to a plugin that has not registered with this kubelet.
gRPC is imported only when there is a socket to ask (the other checks do not pay for it).
"""

from __future__ import annotations

import datetime as dt
import stat
from pathlib import Path
from typing import Any

from nvct.doctor.context import DoctorContext
from nvct.doctor.result import CheckResult, failed, passed, skipped, warned
from nvct.node.files import SOCKET_PREFIX, SOCKET_SUFFIX, STATUS_FILE, socket_name
from nvct.node.status import read_status

SERVING = "device-plugin"
DEVICES = "device-plugin-devices"
POD = "-n nvct-system -l app.kubernetes.io/name=nvct-device-plugin"
RESTART = (
    f"restart the plugin pod of this node (kubectl delete pod {POD} "
    "--field-selector spec.nodeName=<node>) and read its log (kubectl logs <pod>)"
)
DEPLOY = "deploy it: kubectl apply -k deployments/ (its node selector must match this node)"


def plugin_sockets(directory: Path) -> list[Path]:
    """The ``nvidia-*.sock`` sockets in the device-plugins directory, by name."""
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return []
    out = []
    for entry in entries:
        if not (entry.name.startswith(SOCKET_PREFIX) and entry.name.endswith(SOCKET_SUFFIX)):
            continue
        try:
            if stat.S_ISSOCK(entry.lstat().st_mode):
                out.append(entry)
        except FileNotFoundError:
            continue
    return out


class NoGrpc(Exception):
    """grpc cannot be imported here, so no socket can be asked (the message says why)."""


def probe(path: Path, timeout: float) -> str | None:
    """None when the socket answers GetDevicePluginOptions within ``timeout`` s, else why not.

    Raises:
        NoGrpc: grpc or protobuf cannot be imported.
    """
    try:
        import grpc

        from nvct.kubeapi.deviceplugin import v1beta1_pb2 as api
        from nvct.kubeapi.deviceplugin import v1beta1_pb2_grpc as rpc
    except ImportError as err:
        from nvct.kubeapi.grpc_deps import grpc_unimportable

        raise NoGrpc(grpc_unimportable(err)) from err

    with grpc.insecure_channel(f"unix://{path}") as channel:
        stub = rpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.GetDevicePluginOptions(api.Empty(), timeout=timeout)
        except grpc.RpcError as err:
            details = (err.details() or "").splitlines() if hasattr(err, "details") else []
            return f"{err.code().name}: {details[0][:160] if details else err}"
    return None


def _when(mtime: float) -> str:
    return f"{dt.datetime.fromtimestamp(mtime, dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


def _socket_result(
    path: Path, resource: str, kubelet_mtime: float | None, timeout: float
) -> CheckResult:
    try:
        why = probe(path, timeout)
    except NoGrpc as err:
        return warned(SERVING, f"cannot ask {path} ({resource}) over gRPC: {err}", "")
    if why is not None:
        return failed(
            SERVING,
            f"{path} ({resource}) exists but does not answer GetDevicePluginOptions within "
            f"{timeout:g} s ({why}): nvct-device-plugin is stopped or hung",
            RESTART,
        )
    try:
        mtime = path.stat().st_mtime
    except OSError:
        mtime = None
    if kubelet_mtime is not None and mtime is not None and mtime < kubelet_mtime:
        return failed(
            SERVING,
            f"{path.name} ({resource}) answers, but is older than kubelet.sock (created "
            f"{_when(kubelet_mtime)}): the plugin has not re-registered since the kubelet "
            "restarted, so the kubelet does not advertise its devices",
            RESTART,
        )
    registered = ", newer than kubelet.sock" if kubelet_mtime is not None else ""
    return passed(SERVING, f"{path.name} ({resource}) answers GetDevicePluginOptions{registered}")


def check_plugin(
    ctx: DoctorContext, directory: Path, kubelet_mtime: float | None
) -> list[CheckResult]:
    """One result per plugin socket (and per resource whose socket is missing), then the
    devices the plugin reports."""
    sockets = plugin_sockets(directory)
    found, problem = read_status(directory)
    status = found.resources if found is not None else None
    resources = {socket_name(r): r for r in status or {}}
    results = [
        _socket_result(
            s, resources.get(s.name, "not in the status file"), kubelet_mtime, ctx.plugin_timeout
        )
        for s in sockets
    ]
    present = {s.name for s in sockets}
    for name, resource in sorted(resources.items()):
        if name not in present:
            results.append(
                failed(
                    SERVING,
                    f"no {directory / name}: nvct-device-plugin is not serving {resource} "
                    "(stopped, or it did not come back after the kubelet restarted)",
                    RESTART,
                )
            )
    if not sockets and status is None:
        results.append(
            failed(
                SERVING,
                f"no device plugin socket ({SOCKET_PREFIX}*{SOCKET_SUFFIX}) and no "
                f"{STATUS_FILE} in {directory}: nvct-device-plugin has not run on this node",
                DEPLOY,
            )
        )
    results += _devices(directory, status, problem, serving=bool(sockets))
    return results


def _devices(
    directory: Path,
    status: dict[str, list[dict[str, Any]]] | None,
    problem: str,
    *,
    serving: bool,
) -> list[CheckResult]:
    """PASS with the count per resource, or one WARN per Unhealthy device and its reason."""
    path = directory / STATUS_FILE
    if problem:
        return [warned(DEVICES, problem, RESTART)]
    if status is None:
        if not serving:
            return []  # the plugin has not run here: said above
        return [
            warned(
                DEVICES,
                f"no {path}: the plugin serving here is not nvct-device-plugin (NVIDIA's "
                "writes none), so its devices' health is unknown",
                "",
            )
        ]
    if not serving:
        try:
            written = f" (written {_when(path.stat().st_mtime)})"
        except OSError:  # removed since it was read
            written = ""
        return [skipped(DEVICES, f"{path}{written} is stale: no plugin serves")]
    if not any(status.values()):
        return [warned(DEVICES, f"{path}: nvct-device-plugin advertises no device", RESTART)]
    sick = [
        warned(
            DEVICES,
            f"{resource} device {d.get('id')} is {d.get('health')}"
            + (f": {d['reason']}" if d.get("reason") else ""),
            "pods cannot get it until it is Healthy again; see nvct-cli device-plugin-status "
            "and the driver's messages (dmesg | grep -i xid); one held until a reset or for "
            "service is listed by nvct-cli device-plugin-health (README: resetting a GPU that "
            "nvct holds; then nvct-cli device-plugin-health clear UUID)",
        )
        for resource, devices in sorted(status.items())
        for d in devices
        if d.get("health") != "Healthy"
    ]
    if sick:
        return sick
    counts = ", ".join(f"{r}: {len(d)} Healthy" for r, d in sorted(status.items()))
    return [passed(DEVICES, f"nvct-device-plugin advertises {counts}")]
