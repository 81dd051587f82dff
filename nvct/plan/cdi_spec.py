"""A CDI spec (``nvidia.com/gpu``) rendered from the same plans the hook carries out, as the
typed model of ``nvct.cdi.model`` (``build_spec`` returns its JSON-ready mapping).

The common edits are the plan for ``NVIDIA_VISIBLE_DEVICES=none`` (control device nodes,
libraries, binaries, IPC, firmware); each device's edits are the device nodes its own plan
adds on top. Symlinks and the ld.so.cache, which a spec cannot express, become one
createContainer hook (``hook_entry``; ldconfig's entries for the spec's libraries in its
environment, to merge into the image's cache) running the ``nvct-cdi-hook`` program of the
nvct that wrote the spec (``hook_program``: /usr/bin in the packages, the console script of a
pip install or venv), with an explicit environment (so nothing of the container's reaches
it). A program rather than ``python -m``, because only the program knows where its nvct is
(the packages' private tree is not on any interpreter's path). ``NVIDIA_VISIBLE_DEVICES=void``
in the common env keeps a legacy hook (NVIDIA's or nvct's) from acting a second time.

Libraries go to the Debian multiarch directory (a spec is written before any image is known);
the hook's ld.so.cache entries (or its ldconfig run) name that directory, so non-Debian images
find them too. By default each library is one mount, as in NVIDIA's specs. With a library root
(``cdi generate --library-mounts directory``) they are bound as one directory, as nvct-runtime
binds them (``nvct.plan.libdirs``): hard links made under the root, outside any cache (a spec
outlives a cache's cleaning), and seen at ``<libdir>/nvidia-driver``, which the hook lists in the
container's ld.so.conf.d. Each library mount costs a podman CDI start ~0.6 ms on the bench's VM
(bench/README.md); where hard links cannot be made the spec keeps one mount per library.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nvct.base.errors import RequestError
from nvct.base.oci import CDI_LD_CACHE_ENV
from nvct.cdi import model
from nvct.cdi.names import KIND as KIND_RE
from nvct.cdi.specs import DRIVER_VERSION_ENV, spec_env
from nvct.config import CAPABILITIES, Config
from nvct.host.arch import Arch
from nvct.host.inventory import DeviceNode, Inventory
from nvct.plan.compose import plan_container
from nvct.plan.model import Plan, RootfsLayout
from nvct.request.parse import operator_request

CDI_VERSION = "0.5.0"
KIND = "nvidia.com/gpu"
VENDOR = "nvidia.com"
MANAGEMENT_VENDOR = "management.nvidia.com"  # NVIDIA's management spec's kind
CLASS = "gpu"
HOOK_PROGRAM = "nvct-cdi-hook"
HOOK_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
STRATEGIES = ("index", "uuid", "both")
MODES = ("nvml", "management")
# Where a spec holds only some capabilities' files, its env says which: the container sees what
# it was given, and ``options_like`` reads it back (CDI 0.5.0 has no spec annotations).
CAPABILITIES_ENV = "NVCT_CDI_DRIVER_CAPABILITIES"


@dataclass(frozen=True, slots=True)
class SpecOptions:
    """What ``cdi generate`` was asked for (NVIDIA's defaults: both names, every device).

    ``vendor`` None is ``nvidia.com``, or ``management.nvidia.com`` in management mode (so a
    management spec and the GPU spec can sit side by side, as NVIDIA's do). ``library_root``
    "" mounts each library; a directory binds them as one directory made under it.
    ``capabilities`` () gives every capability the host can serve, as NVIDIA's spec does;
    named ones (``NVIDIA_DRIVER_CAPABILITIES``'s names) give only the files they need.
    """

    strategy: str = "both"
    vendor: str | None = None
    cls: str = CLASS
    device_ids: tuple[str, ...] = ()
    mode: str = "nvml"
    library_root: str = ""
    capabilities: tuple[str, ...] = ()

    def kind(self) -> str:
        """``vendor/class``.

        Raises:
            RequestError: not a valid CDI kind.
        """
        vendor = self.vendor or (MANAGEMENT_VENDOR if self.mode == "management" else VENDOR)
        kind = f"{vendor}/{self.cls}"
        if KIND_RE.match(kind) is None:
            raise RequestError(
                f"invalid CDI kind {kind!r} (from --vendor/--class)",
                hint="a vendor is a domain name (nvidia.com), a class a simple name (gpu)",
            )
        return kind


@dataclass(frozen=True, slots=True)
class CdiDevice:
    """One named device of the spec and the device nodes it adds to the common edits."""

    names: tuple[str, ...]
    nodes: tuple[DeviceNode, ...]


def capabilities_for(inventory: Inventory, wanted: Sequence[str] = ()) -> tuple[str, ...]:
    """Every capability the host can serve (display needs nvidia-modeset), or of them those
    ``wanted`` names.

    Raises:
        RequestError: ``wanted`` names a capability nvct does not know, or one this host
            cannot serve.
    """
    caps = list(CAPABILITIES)
    if inventory.control_node("nvidia-modeset") is None:
        caps.remove("display")
    for cap in wanted:
        if cap not in CAPABILITIES:
            raise RequestError(
                f"unknown driver capability {cap!r} (from --driver-capabilities)",
                hint=f"name some of {', '.join(CAPABILITIES)}, or leave the option out for all",
            )
        if cap not in caps:
            raise RequestError(
                f"driver capability {cap!r} needs /dev/nvidia-modeset, which this host lacks",
                hint="leave display out of --driver-capabilities",
            )
    return tuple(c for c in caps if c in wanted) if wanted else tuple(caps)


def _plan(
    visible: str, caps: Sequence[str], inventory: Inventory, config: Config, arch: Arch
) -> Plan:
    request = operator_request(
        {"NVIDIA_VISIBLE_DEVICES": visible, "NVIDIA_DRIVER_CAPABILITIES": ",".join(caps)},
        config,
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
    strategy: str = "both",
    device_ids: Sequence[str] = (),
) -> list[CdiDevice]:
    """One device per full GPU (or per MIG device of a MIG-enabled GPU); with ``device_ids``,
    only those named (by index, ``0:1``, or UUID).

    Raises:
        RequestError: a device id names no GPU or MIG device (the message lists those that exist).
    """
    shared = {d.node.path for d in common.devices}
    targets = [
        target
        for gpu in inventory.gpus
        for target in (
            [(f"{gpu.index}:{m.index}", m.uuid) for m in gpu.migs]
            if gpu.mig_enabled and gpu.migs
            else [(str(gpu.index), gpu.uuid)]
        )
    ]
    if device_ids:
        known = {name for target in targets for name in target}
        unknown = [d for d in device_ids if d not in known]
        if unknown:
            raise RequestError(
                f"--device-id {unknown[0]!r} names no device of the driver "
                f"(known: {', '.join(t[0] for t in targets) or 'none'})",
                hint="name a GPU by index (0), a MIG device by 0:1, or either by UUID",
            )
        targets = [t for t in targets if t[0] in device_ids or t[1] in device_ids]
    out = []
    for index_name, uuid in targets:
        plan = _plan(index_name, caps, inventory, config, arch)
        nodes = tuple(d.node for d in plan.devices if d.node.path not in shared)
        names = {"index": (index_name,), "uuid": (uuid,), "both": (index_name, uuid)}
        out.append(CdiDevice(names[strategy], nodes))
    return out


def spec_node(node: DeviceNode) -> model.DeviceNode:
    """A host device node as a spec's device node."""
    return model.DeviceNode(node.path, node.host_path, node.major, node.minor)


def hook_program(explicit: str | None = None) -> str:
    """Absolute path of the ``nvct-cdi-hook`` of this installation.

    Beside the running program (``/usr/bin/nvct-cli``, a venv's ``bin/nvct-cli``), then beside
    the interpreter (a venv's ``bin/python``), then ``PATH``.

    Raises:
        RequestError: not found, or ``explicit`` is not absolute.
    """
    if explicit:
        if not explicit.startswith("/"):
            raise RequestError(
                f"--hook-path {explicit!r} is not absolute", hint="give the absolute path"
            )
        return explicit
    for directory in (
        os.path.dirname(os.path.abspath(sys.argv[0])),
        os.path.dirname(sys.executable),
    ):
        candidate = os.path.join(directory, HOOK_PROGRAM)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(HOOK_PROGRAM)
    if found:
        return os.path.abspath(found)
    raise RequestError(
        f"cannot find {HOOK_PROGRAM} beside {sys.argv[0]} or {sys.executable}, or in PATH",
        hint="reinstall nvct (it installs nvct-cdi-hook), or pass --hook-path",
    )


def library_directories(plan: Plan, root: str, *, create: bool, problems: list[str]) -> Plan:
    """``plan`` with the libraries of each library directory bound as one directory of hard
    links under ``root`` (``create``: made now; else only those that exist whole). A
    directory that cannot be made keeps its libraries' mounts, and says why in ``problems``."""
    from nvct.plan.libdirs import group_libraries, library_groups
    from nvct.store.libdir import complete, ensure, host_dir

    groups = library_groups(plan)
    chosen: dict[str, str] = {}
    for base, _kind, files, links in groups:
        try:
            path = host_dir(root, files, links)
            if create:
                ensure(path, files, links)
        except OSError as err:
            problems.append(
                f"cannot make the directory for {base} under {root} ({err}): it "
                "keeps one mount per library"
            )
            continue
        if not create and not complete(path, files, links):
            continue
        chosen[base] = path
    return group_libraries(plan, groups, chosen)


def hook_entry(plan: Plan, ldconfig: str, hook: str) -> model.Hook | None:
    """The createContainer hook for the plan's symlinks and its ld.so.cache: ldconfig's
    entries in its environment, to merge into the image's cache, and the directories for an
    ldconfig run where they cannot be merged; the bound library directories for the
    container's ld.so.conf.d (None: nothing to do)."""
    if not plan.symlinks and not plan.ldconfig_dirs:
        return None
    args = [HOOK_PROGRAM, "--ldconfig", ldconfig]
    for link in plan.symlinks:
        args += ["--symlink", f"{link.target}::{link.path}"]
    for directory in plan.ldconfig_dirs:
        args += ["--ldconfig-dir", directory]
    for libdir in plan.library_dirs:
        args += ["--ld-conf", libdir.target]
    env: tuple[str, ...] = HOOK_ENV
    if plan.ldconfig_dirs and plan.ld_cache_entries:
        entries = json.dumps([list(e) for e in plan.ld_cache_entries], separators=(",", ":"))
        env = (*HOOK_ENV, f"{CDI_LD_CACHE_ENV}={entries}")
    return model.Hook("createContainer", hook, tuple(args), env)


def management_nodes(inventory: Inventory) -> list[DeviceNode]:
    """Every NVIDIA device node the driver has: control nodes, each GPU's, every MIG cap."""
    nodes: dict[str, DeviceNode] = {n.path: n for n in inventory.control_nodes}
    for gpu in inventory.gpus:
        if gpu.node is not None:
            nodes.setdefault(gpu.node.path, gpu.node)
        for mig in gpu.migs:
            nodes.update((c.path, c) for c in mig.caps if c.path not in nodes)
    return list(nodes.values())


def build_spec(
    inventory: Inventory,
    config: Config,
    arch: Arch,
    *,
    options: SpecOptions | None = None,
    strategy: str | None = None,
    hook: str,
    create: bool = True,
    problems: list[str] | None = None,
) -> dict[str, Any]:
    """The whole CDI spec, built as typed values (``nvct.cdi.model``) and returned as the
    JSON-ready mapping its file holds (``strategy`` overrides ``options.strategy``); ``hook``
    is the path of the nvct-cdi-hook program the spec runs (``hook_program``). With
    ``options.library_root``, the library directories are made (``create``) or taken where
    they exist whole; why one could not be made goes to ``problems``.

    In management mode the spec has one device, ``all``, with every NVIDIA device node (for
    monitoring and operator containers, like NVIDIA's management spec); the common edits are
    the same driver files as the GPU spec's.

    Raises:
        RequestError: a device node the plan needs is missing under the dev root, a device id
            names no device, or the kind is invalid.
    """
    options = options or SpecOptions()
    kind = options.kind()
    caps = capabilities_for(inventory, options.capabilities)
    common = _plan("none", caps, inventory, config, arch)
    if options.library_root:
        common = library_directories(
            common,
            options.library_root,
            create=create,
            problems=problems if problems is not None else [],
        )
    if options.mode == "management":
        shared = {d.node.path for d in common.devices}
        rest = tuple(n for n in management_nodes(inventory) if n.path not in shared)
        named = [CdiDevice(("all",), rest)]
    else:
        named = devices(
            inventory, config, arch, caps, common, strategy or options.strategy, options.device_ids
        )
    all_nodes: dict[str, DeviceNode] = {}
    spec_devices: list[model.Device] = []
    for device in named:
        for node in device.nodes:
            all_nodes.setdefault(node.path, node)
        edits = model.ContainerEdits(device_nodes=tuple(spec_node(n) for n in device.nodes))
        spec_devices += [model.Device(name, edits) for name in device.names]
    if named and options.mode != "management":
        every = tuple(spec_node(n) for n in all_nodes.values())
        spec_devices.append(model.Device("all", model.ContainerEdits(device_nodes=every)))
    entry = hook_entry(common, str(config.ldconfig), hook)
    some = (f"{CAPABILITIES_ENV}={','.join(caps)}",) if options.capabilities else ()
    edits = model.ContainerEdits(
        env=(
            "NVIDIA_VISIBLE_DEVICES=void",
            f"{DRIVER_VERSION_ENV}={inventory.driver_version}",
            *some,
        ),
        device_nodes=tuple(spec_node(d.node) for d in common.devices),
        mounts=tuple(model.Mount(m.source, m.target, tuple(m.options)) for m in common.mounts),
        hooks=(entry,) if entry is not None else None,
    )
    return model.Spec(CDI_VERSION, kind, tuple(spec_devices), edits).to_dict()


def on_host(value: Any, seen_as: str, host: str) -> Any:
    """``value`` with paths under ``seen_as`` (the driver root as the plugin sees it) moved
    under ``host`` (where the engine finds them)."""
    if isinstance(value, str) and (value == seen_as or value.startswith(seen_as.rstrip("/") + "/")):
        return os.path.normpath(os.path.join(host, os.path.relpath(value, seen_as)))
    if isinstance(value, list):
        return [on_host(v, seen_as, host) for v in value]
    if isinstance(value, dict):
        return {k: on_host(v, seen_as, host) for k, v in value.items()}
    return value


def kubelet_plugin_spec(
    inventory: Inventory, config: Config, options: SpecOptions
) -> dict[str, Any]:
    """The spec a kubelet plugin (the device plugin, the DRA plugin) renders for itself: the
    node's devices under ``options``' kind, with the paths the engine sees where the plugin
    sees the driver elsewhere (``[device-plugin] host-driver-root``: a containerized driver,
    NVIDIA's nvidiaDriverRoot).

    Raises:
        RequestError: as ``build_spec``; no nvct-cdi-hook to name.
    """
    from nvct.host.arch import host_arch

    spec = build_spec(inventory, config, host_arch(), options=options, hook=hook_program())
    return spec_on_host(spec, config)


def spec_on_host(spec: dict[str, Any], config: Config) -> dict[str, Any]:
    """The CDI spec with the host's paths where the plugin sees the node elsewhere: device
    nodes under ``host-dev-root`` (else ``host-driver-root``, as NVIDIA's nvidiaDevRoot defaults
    to its driver root), everything else under ``host-driver-root``. The engine, not the
    plugin, opens them."""
    dev_host = config.device_plugin.host_dev_root or config.device_plugin.host_driver_root
    driver_host = config.device_plugin.host_driver_root

    def moved(value: Any) -> Any:
        if isinstance(value, list):
            return [moved(v) for v in value]
        if not isinstance(value, dict):
            return on_host(value, str(config.driver_root), driver_host) if driver_host else value
        out = {k: moved(v) for k, v in value.items() if k != "deviceNodes"}
        if "deviceNodes" in value:  # a driver container's /dev is not the node's
            out["deviceNodes"] = [
                {**n, "hostPath": on_host(n["hostPath"], str(config.dev_root), dev_host)}
                if dev_host
                else n
                for n in value["deviceNodes"]
            ]
        return out

    result: dict[str, Any] = moved(spec)
    return result


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


def options_like(spec: Mapping[str, Any]) -> tuple[SpecOptions, str | None]:
    """The options a spec on disk was generated with, as far as it shows them (kind, device
    names, mode), and the hook path it names (None: no hook)."""
    kind = str(spec.get("kind") or KIND)
    vendor, _, cls = kind.partition("/")
    names = [str(d.get("name")) for d in spec.get("devices") or () if isinstance(d, dict)]
    named = [n for n in names if n != "all"]
    by_uuid = any(n.startswith(("GPU-", "MIG-")) for n in named)
    by_index = any(not n.startswith(("GPU-", "MIG-")) for n in named)
    strategy = "both" if by_uuid and by_index else "uuid" if by_uuid else "index"
    mode = "management" if names == ["all"] and vendor == MANAGEMENT_VENDOR else "nvml"
    edits = spec.get("containerEdits") or {}
    hooks = edits.get("hooks") or ()
    hook = next((str(h.get("path")) for h in hooks if isinstance(h, dict)), None)
    caps = tuple(c for c in (spec_env(spec, CAPABILITIES_ENV) or "").split(",") if c)
    root = library_root(edits)
    return SpecOptions(strategy, vendor, cls or CLASS, (), mode, root, caps), hook


def library_dir_mounts(edits: Mapping[str, Any], root: str) -> list[str]:
    """The host paths of a spec's mounts made under the library root ``root`` (none for "")."""
    under = root.rstrip("/") + "/"
    sources = [m.get("hostPath") for m in edits.get("mounts") or () if isinstance(m, dict)]
    return [s for s in sources if root and isinstance(s, str) and s.startswith(under)]


def library_root(edits: Mapping[str, Any]) -> str:
    """The root a spec's library directory was made under ("" when it mounts each file)."""
    from nvct.plan.model import LIBRARY_SUBDIR
    from nvct.store.libdir import SUBDIR

    for mount in edits.get("mounts") or ():
        if not isinstance(mount, dict):
            continue
        target, source = str(mount.get("containerPath")), str(mount.get("hostPath"))
        parent = os.path.dirname(source)
        if target.endswith(f"/{LIBRARY_SUBDIR}") and os.path.basename(parent) == SUBDIR:
            return os.path.dirname(parent)
    return ""
