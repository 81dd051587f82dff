"""A work order from CDI devices: what a CDI-enabled engine would do, done by nvct-runtime.

Engines without CDI support (docker 20.10, containerd before 1.7 without ``enable_cdi``, CRI-O
with it off) still get the devices a device plugin names (``cdi.k8s.io/*`` annotations) or an
image asks for (``NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0``). The CDI rules apply: each named
device's ``containerEdits`` plus, once per spec, the spec's own; device nodes (with their
cgroup rules), bind mounts, environment variables, OCI hooks and additional GIDs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nvct.base.errors import RequestError
from nvct.cdi.specs import CdiSpecs, node_numbers
from nvct.config import Config
from nvct.store.cache import ORDER_VERSION

if TYPE_CHECKING:
    from nvct.base.order import WorkOrder

HOOK_STAGES = (
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
)


def cdi_order(names: Sequence[str], specs: CdiSpecs, config: Config) -> WorkOrder:
    """The work order that gives a container the CDI devices ``names``.

    Raises:
        RequestError: a name is unknown, or an edit is one nvct cannot carry out.
    """
    devices = specs.resolve(names)
    edits: list[tuple[str, Any]] = []
    seen_specs: set[str] = set()
    for device in devices:
        if device.path not in seen_specs:
            seen_specs.add(device.path)
            edits.append((device.path, device.spec_edits))
        edits.append((device.name, device.edits))
    order: WorkOrder = {
        "v": ORDER_VERSION,
        "devices": [],
        "mounts": [],
        "symlinks": [],
        "ldconfig": str(config.ldconfig),
        "ldconfig_dirs": [],
        "ld_cache": [],
        "libdirs": [],
        "log": (config.log.file, config.log.level),
        "gpus": [d.name for d in devices],
        "capabilities": [],
        "proc_driver": None,  # the CDI spec says what the container gets
        "cuda_compat": None,
        "proc_driver_in_runtime": False,
        "env": [],
        "hooks": [],
        "additional_gids": [],
        "cdi": [(d.name, d.path) for d in devices],
    }
    for source, edit in edits:
        _add(order, source, edit)
    return order


def _add(order: WorkOrder, source: str, edits: Any) -> None:
    for unsupported in ("netDevices", "intelRdt"):
        if edits.get(unsupported):
            raise RequestError(
                f"{source}: CDI {unsupported} edits are not carried out by nvct-runtime",
                hint="use an engine with CDI support for this device",
            )
    for node in edits.get("deviceNodes") or ():
        kind, major, minor, mode = node_numbers(node)
        if kind != "c":
            raise RequestError(
                f"{source}: device node {node.get('path')} is not a character device",
                hint="nvct-runtime injects character devices only; use an engine with CDI",
            )
        order["devices"].append((str(node["path"]), major, minor, mode))
    for mount in edits.get("mounts") or ():
        options = [str(o) for o in mount.get("options") or ()]
        if mount.get("type", "bind") != "bind" and "bind" not in options:
            raise RequestError(
                f"{source}: mount {mount.get('containerPath')} of type {mount.get('type')!r}",
                hint="nvct-runtime carries out bind mounts only; use an engine with CDI",
            )
        order["mounts"].append((str(mount["hostPath"]), str(mount["containerPath"]), options))
    order["env"] += [str(e) for e in edits.get("env") or ()]
    for hook in edits.get("hooks") or ():
        stage = hook.get("hookName")
        if stage not in HOOK_STAGES:
            raise RequestError(f"{source}: unknown hook stage {stage!r}", hint="fix the CDI spec")
        entry = {k: hook[k] for k in ("path", "args", "env", "timeout") if k in hook}
        order["hooks"].append((str(stage), entry))
    order["additional_gids"] += [int(g) for g in edits.get("additionalGids") or ()]
