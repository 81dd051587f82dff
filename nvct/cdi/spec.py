"""A CDI spec (``nvidia.com/gpu``) rendered from the same plans the hook carries out.

The common edits are the plan for ``NVIDIA_VISIBLE_DEVICES=none`` (control device nodes,
libraries, binaries, IPC, firmware); each device's edits are the device nodes its own plan
adds on top. Symlinks and ldconfig, which a spec cannot express, become one createContainer
hook running ``python -I -m nvct.cdi.hook`` with an explicit environment (so nothing of the
container's reaches the interpreter). ``NVIDIA_VISIBLE_DEVICES=void`` in the common env keeps
a legacy hook (NVIDIA's or nvct's) from acting a second time.

Libraries go to the Debian multiarch directory (a spec is written before any image is known);
the hook's ldconfig run names that directory, so non-Debian images find them too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from nvct.base._site import module_argv
from nvct.base.errors import RequestError
from nvct.config import CAPABILITIES, Config
from nvct.host.arch import Arch
from nvct.host.inventory import DeviceNode, Inventory
from nvct.plan.compose import plan_container
from nvct.plan.model import Plan, RootfsLayout
from nvct.request.parse import parse_request

CDI_VERSION = "0.5.0"
KIND = "nvidia.com/gpu"
HOOK_MODULE = "nvct.cdi.hook"
HOOK_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
DRIVER_VERSION_ENV = "NVCT_CDI_DRIVER_VERSION"
STRATEGIES = ("index", "uuid", "both")


@dataclass(frozen=True, slots=True)
class CdiDevice:
    """One named device of the spec and the device nodes it adds to the common edits."""

    names: tuple[str, ...]
    nodes: tuple[DeviceNode, ...]


def capabilities_for(inventory: Inventory) -> tuple[str, ...]:
    """Every capability the host can serve (display needs nvidia-modeset)."""
    caps = list(CAPABILITIES)
    if inventory.control_node("nvidia-modeset") is None:
        caps.remove("display")
    return tuple(caps)


def _plan(
    visible: str, caps: Sequence[str], inventory: Inventory, config: Config, arch: Arch
) -> Plan:
    # The spec says what each device gives; which containers may have it is the engine's
    # business (and the device plugin's), not the request policy's.
    request = parse_request(
        {"NVIDIA_VISIBLE_DEVICES": visible, "NVIDIA_DRIVER_CAPABILITIES": ",".join(caps)},
        config=replace(config, only_allocated_gpus=False),
    )
    return plan_container(
        request,
        config,
        RootfsLayout(),
        library_dirs="none",
        inventory=inventory,
        arch=arch,
        enforce_requirements=False,
    ).plan


def devices(
    inventory: Inventory,
    config: Config,
    arch: Arch,
    caps: Sequence[str],
    common: Plan,
    strategy: str = "index",
) -> list[CdiDevice]:
    """One device per full GPU (or per MIG device of a MIG-enabled GPU)."""
    shared = {d.node.path for d in common.devices}
    out = []
    for gpu in inventory.gpus:
        targets = (
            [(f"{gpu.index}:{m.index}", m.uuid) for m in gpu.migs]
            if gpu.mig_enabled and gpu.migs
            else [(str(gpu.index), gpu.uuid)]
        )
        for index_name, uuid in targets:
            plan = _plan(index_name, caps, inventory, config, arch)
            nodes = tuple(d.node for d in plan.devices if d.node.path not in shared)
            names = {"index": (index_name,), "uuid": (uuid,), "both": (index_name, uuid)}
            out.append(CdiDevice(names[strategy], nodes))
    return out


def _node(node: DeviceNode) -> dict[str, Any]:
    return {
        "path": node.path,
        "hostPath": node.host_path,
        "type": "c",
        "major": node.major,
        "minor": node.minor,
    }


def hook_entry(plan: Plan, ldconfig: str, python: str = sys.executable) -> dict[str, Any] | None:
    """The createContainer hook for the plan's symlinks and ldconfig run (None: nothing to do)."""
    if not plan.symlinks and not plan.ldconfig_dirs:
        return None
    # The interpreter told where nvct lives (-I -S: nothing from the environment), so the hook
    # runs wherever this nvct is installed: the packages' private tree, a venv, pip.
    args = [python, *module_argv(HOOK_MODULE)[1:], "--ldconfig", ldconfig]
    for link in plan.symlinks:
        args += ["--symlink", f"{link.target}::{link.path}"]
    for directory in plan.ldconfig_dirs:
        args += ["--ldconfig-dir", directory]
    return {"hookName": "createContainer", "path": python, "args": args, "env": list(HOOK_ENV)}


def build_spec(
    inventory: Inventory,
    config: Config,
    arch: Arch,
    *,
    strategy: str = "index",
    python: str = sys.executable,
    kind: str = KIND,
    device_ids: Sequence[str] = (),
    mode: str = "devices",
) -> dict[str, Any]:
    """The whole CDI spec as a JSON-ready dict: one device per GPU (or MIG device), named by
    ``strategy``, only those ``device_ids`` names (index or UUID) when given, and ``all``;
    ``mode`` "management": one device ``all`` with every NVIDIA device node and MIG cap and the
    driver's utility files, for monitoring and operator containers.

    Raises:
        RequestError: a device node the plan needs is missing under the dev root, or a
            ``device_ids`` name matches no device.
    """
    if mode == "management":
        return _management_spec(inventory, config, arch, python, kind)
    caps = capabilities_for(inventory)
    common = _plan("none", caps, inventory, config, arch)
    named = devices(inventory, config, arch, caps, common, "both")
    if device_ids:
        wanted = set(device_ids)
        unknown = wanted - {n for d in named for n in d.names}
        if unknown:
            raise RequestError(
                f"--device-id {sorted(unknown)[0]!r} names no device of this host",
                hint="use GPU indices (0), MIG indices (0:1) or UUIDs from nvct-cli info",
            )
        named = [d for d in named if wanted & set(d.names)]
    pick = {"index": slice(0, 1), "uuid": slice(1, 2), "both": slice(0, 2)}[strategy]
    named = [CdiDevice(d.names[pick], d.nodes) for d in named]
    all_nodes: dict[str, DeviceNode] = {}
    spec_devices = []
    for device in named:
        for node in device.nodes:
            all_nodes.setdefault(node.path, node)
        spec_devices += [
            {"name": name, "containerEdits": {"deviceNodes": [_node(n) for n in device.nodes]}}
            for name in device.names
        ]
    if named:
        spec_devices.append(
            {
                "name": "all",
                "containerEdits": {"deviceNodes": [_node(n) for n in all_nodes.values()]},
            }
        )
    edits: dict[str, Any] = {
        "env": ["NVIDIA_VISIBLE_DEVICES=void", f"{DRIVER_VERSION_ENV}={inventory.driver_version}"],
        "deviceNodes": [_node(d.node) for d in common.devices],
        "mounts": [
            {"hostPath": m.source, "containerPath": m.target, "options": list(m.options)}
            for m in common.mounts
        ],
    }
    hook = hook_entry(common, str(config.ldconfig), python)
    if hook is not None:
        edits["hooks"] = [hook]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "devices": spec_devices,
        "containerEdits": edits,
    }


def _management_spec(
    inventory: Inventory, config: Config, arch: Arch, python: str, kind: str
) -> dict[str, Any]:
    """Every NVIDIA node and cap, and the driver's utility files (nvidia-smi, NVML)."""
    plan = _plan("all", ("utility",), inventory, config, arch)
    nodes: dict[str, DeviceNode] = {d.node.path: d.node for d in plan.devices}
    for node in inventory.control_nodes:
        nodes.setdefault(node.path, node)
    for gpu in inventory.gpus:
        if gpu.node is not None:
            nodes.setdefault(gpu.node.path, gpu.node)
        for mig in gpu.migs:
            for cap in mig.caps:
                nodes.setdefault(cap.path, cap)
    edits: dict[str, Any] = {
        "env": ["NVIDIA_VISIBLE_DEVICES=void", f"{DRIVER_VERSION_ENV}={inventory.driver_version}"],
        "mounts": [
            {"hostPath": m.source, "containerPath": m.target, "options": list(m.options)}
            for m in plan.mounts
        ],
    }
    hook = hook_entry(plan, str(config.ldconfig), python)
    if hook is not None:
        edits["hooks"] = [hook]
    device = {"name": "all", "containerEdits": {"deviceNodes": [_node(n) for n in nodes.values()]}}
    return {"cdiVersion": CDI_VERSION, "kind": kind, "devices": [device], "containerEdits": edits}


def driver_version(spec: dict[str, Any]) -> str | None:
    """The driver version a spec was generated for."""
    for item in (spec.get("containerEdits") or {}).get("env") or ():
        key, _, value = str(item).partition("=")
        if key == DRIVER_VERSION_ENV:
            return value
    return None


def device_names(spec: dict[str, Any]) -> list[str]:
    """Fully qualified device names (``nvidia.com/gpu=0``) of a spec."""
    kind = spec.get("kind")
    if not isinstance(kind, str):
        return []
    return [
        f"{kind}={d['name']}"
        for d in spec.get("devices") or ()
        if isinstance(d, dict) and isinstance(d.get("name"), str)
    ]


def to_json(spec: dict[str, Any]) -> str:
    """The spec as JSON text."""
    return json.dumps(spec, indent=2) + "\n"


def to_yaml(spec: Any) -> str:
    """The spec as YAML text (block style; every string JSON-quoted, which YAML accepts)."""
    return "---\n" + "".join(_yaml(spec, 0))


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(str(value))


def _yaml(value: Any, indent: int) -> Iterable[str]:
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            yield pad + "{}\n"
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                yield f"{pad}{json.dumps(str(key))}:\n"
                yield from _yaml(item, indent + 2)
            else:
                empty = "{}" if isinstance(item, dict) else "[]"
                shown = empty if isinstance(item, (dict, list)) else _scalar(item)
                yield f"{pad}{json.dumps(str(key))}: {shown}\n"
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)) and item:
                lines = list(_yaml(item, indent + 2))
                lines[0] = f"{pad}- {lines[0][indent + 2 :]}"
                yield from lines
            else:
                yield f"{pad}- {_scalar(item) if not isinstance(item, (dict, list)) else '[]'}\n"
    else:
        yield pad + _scalar(value) + "\n"
