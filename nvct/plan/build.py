"""The injection plan: (what a container asks for) x (what the host has).

``build_plan`` is pure. Every item carries the reason it is there, so ``nvct-cli list`` and
``nvct-cli explain`` print exactly what the hook and the shim will do.
"""

from __future__ import annotations

import posixpath

from nvct.base.errors import RequestError, RequirementError
from nvct.base.ldcache_format import FLAG_ELF_LIBC6
from nvct.config import Config
from nvct.host.arch import Arch
from nvct.host.components import MPS_BINARIES, expand_capabilities
from nvct.host.discover.xorg import GLX_LINK
from nvct.host.inventory import DeviceNode, DriverFile, Inventory
from nvct.plan.features import feature_devices
from nvct.plan.model import (
    IPC_OPTIONS,
    RO_OPTIONS,
    Mount,
    Plan,
    PlannedDevice,
    RequirementResult,
    RootfsLayout,
    Selected,
    Symlink,
)
from nvct.request.parse import Request
from nvct.request.requirements import Facts, evaluate


def select_devices(request: Request, inventory: Inventory) -> tuple[Selected, ...]:
    """Resolve the request's device tokens against the host's GPUs.

    Raises:
        RequestError: a token names no device; the message lists the devices that exist.
    """
    if request.visible in ("void", "none"):
        return ()
    if request.visible == "all":
        out: list[Selected] = []
        for gpu in inventory.gpus:
            if gpu.mig_enabled and gpu.migs:
                out.extend(Selected(gpu, mig, "all") for mig in gpu.migs)
            else:
                out.append(Selected(gpu, None, "all"))
        return tuple(out)
    selected: dict[tuple[str, str], Selected] = {}
    for token in request.devices:
        found = _lookup(token, inventory)
        if found is None:
            raise RequestError(
                f"unknown device {_shown(token)} in {request.source}",
                hint=f"this host has {_available(inventory)}",
            )
        key = (found.gpu.uuid, found.mig.uuid if found.mig else "")
        selected.setdefault(key, found)
    return tuple(selected.values())


def _lookup(token: str, inventory: Inventory) -> Selected | None:
    low = token.lower()
    for gpu in inventory.gpus:
        if low == gpu.uuid.lower() or (token.isdigit() and int(token) == gpu.index):
            return Selected(gpu, None, token)
        if _pci_matches(low, gpu.pci_bus_id):
            return Selected(gpu, None, token)
        for mig in gpu.migs:
            if low == mig.uuid.lower() or token == f"{gpu.index}:{mig.index}":
                return Selected(gpu, mig, token)
    return None


def _pci_matches(token: str, bus_id: str) -> bool:
    """PCI ids compare with the domain widened to NVML's 8 hex digits."""
    if ":" not in token or "." not in token:
        return False
    parts = token.split(":")
    if len(parts) == 2:  # bus:device.function without a domain
        parts = ["0", *parts]
    if len(parts) != 3:
        return False
    try:
        normalized = f"{int(parts[0], 16):08x}:{parts[1].zfill(2)}:{parts[2].zfill(4)}"
    except ValueError:
        return False
    return normalized == bus_id.lower()


def _shown(token: str) -> str:
    return repr(token if len(token) <= 48 else token[:48] + "...")


def _available(inventory: Inventory) -> str:
    if not inventory.gpus:
        return "no GPUs"
    items = []
    for gpu in inventory.gpus[:16]:
        items.append(f"{gpu.index} ({gpu.uuid})")
        items.extend(f"{gpu.index}:{m.index} ({m.uuid})" for m in gpu.migs)
    more = f" and {len(inventory.gpus) - 16} more" if len(inventory.gpus) > 16 else ""
    return ", ".join(items) + more


def check_requirements(
    request: Request, inventory: Inventory, selected: tuple[Selected, ...]
) -> tuple[RequirementResult, ...]:
    """Evaluate each requirement per selected GPU (per MIG parent), else once for the host."""
    gpus = list({s.gpu.uuid: s.gpu for s in selected}.values())
    facts = [
        Facts(
            cuda=inventory.cuda_version,
            driver=inventory.driver_version,
            arch=g.compute_capability,
            brand=g.brand,
            where=f"GPU {g.index}",
        )
        for g in gpus
    ] or [Facts(cuda=inventory.cuda_version, driver=inventory.driver_version)]
    results = []
    for req in request.requirements:
        for fact in facts:
            ok, detail = evaluate(req, fact)
            results.append(RequirementResult(req.source, req.expression, fact.where, ok, detail))
    return tuple(results)


def build_plan(
    request: Request,
    inventory: Inventory,
    config: Config,
    arch: Arch,
    layout: RootfsLayout | None = None,
    *,
    enforce_requirements: bool = True,
) -> Plan:
    """The plan for one container.

    Raises:
        RequestError: unknown device, or a device node the host lacks.
        RequirementError: an NVIDIA_REQUIRE_* constraint fails (when enforced).
    """
    if not request.wants_gpu:
        return Plan(request=request, driver_version=inventory.driver_version)
    layout = layout or RootfsLayout()
    selected = select_devices(request, inventory)
    results = check_requirements(request, inventory, selected)
    failed = [r for r in results if not r.satisfied]
    if failed and enforce_requirements:
        first = failed[0]
        raise RequirementError(
            f"unsatisfied condition {first.source}={first.expression!r} on {first.where}: "
            f"{first.detail}",
            hint="update the host driver, or use an image built for an older CUDA "
            "(or set NVIDIA_DISABLE_REQUIRE=true)",
        )
    caps = request.capabilities
    extra, notes, proc_entries = feature_devices(
        request.features, inventory, lambda token: _lookup(token, inventory)
    )
    devices = _devices(caps, inventory, selected, extra)
    mounts, symlinks, ldconfig_dirs, entries = _driver_files(
        caps, inventory, config, arch, layout, notes, imex=bool(request.features.imex_channels)
    )
    return Plan(
        request=request,
        driver_version=inventory.driver_version,
        selected=selected,
        devices=devices,
        mounts=mounts,
        symlinks=symlinks,
        ldconfig_dirs=ldconfig_dirs,
        ld_cache_entries=entries,
        requirements=results,
        notes=tuple(dict.fromkeys(notes)),
        proc_entries=tuple(dict.fromkeys(proc_entries)),
    )


def _devices(
    caps: frozenset[str],
    inventory: Inventory,
    selected: tuple[Selected, ...],
    extra: list[PlannedDevice],
) -> tuple[PlannedDevice, ...]:
    out: dict[str, PlannedDevice] = {}

    def add(node: DeviceNode | None, reason: str, name: str) -> None:
        if node is None:
            raise RequestError(
                f"device node {name} is missing under the dev root",
                hint="load the NVIDIA kernel modules (nvidia-modprobe) or fix dev-root",
            )
        out.setdefault(node.path, PlannedDevice(node, reason))

    add(inventory.control_node("nvidiactl"), "driver control device", "/dev/nvidiactl")
    if caps & {"compute", "video"}:
        for name in ("nvidia-uvm", "nvidia-uvm-tools"):
            node = inventory.control_node(name)
            if node is not None:  # optional, as in libnvidia-container
                out.setdefault(
                    node.path, PlannedDevice(node, "capability compute (unified memory)")
                )
    if "display" in caps:
        add(inventory.control_node("nvidia-modeset"), "capability display", "/dev/nvidia-modeset")
    for sel in selected:
        add(sel.gpu.node, f"{sel.label} ({sel.token})", f"/dev/nvidia{sel.gpu.minor}")
        if caps & {"graphics", "display"} and sel.mig is None:
            for drm in sel.gpu.drm:  # where the host has them (no display engine: none)
                out.setdefault(drm.path, PlannedDevice(drm, f"capability graphics ({sel.label})"))
        if sel.mig is not None:
            for cap in sel.mig.caps:
                add(cap, f"{sel.label} access ({sel.mig.uuid})", cap.path)
    for device in extra:
        out.setdefault(device.node.path, device)
    return tuple(out.values())


def _driver_files(
    caps: frozenset[str],
    inventory: Inventory,
    config: Config,
    arch: Arch,
    layout: RootfsLayout,
    notes: list[str],
    *,
    imex: bool = False,
) -> tuple[
    tuple[Mount, ...], tuple[Symlink, ...], tuple[str, ...], tuple[tuple[str, str, int], ...]
]:
    lib_caps = expand_capabilities(caps)
    lib_dir, lib32_dir = layout.lib_dir(arch), layout.lib32_dir(arch)
    version = inventory.driver_version
    mounts: list[Mount] = []
    links: dict[str, Symlink] = {}
    dirs: list[str] = []
    entries: dict[tuple[str, int], str] = {}

    for f in inventory.files:
        target: str | None = None
        options: tuple[str, ...] = RO_OPTIONS
        reason = f"capability {f.capability}"
        if f.kind in ("lib", "lib32"):
            if f.capability not in lib_caps or (f.kind == "lib32" and "compat32" not in caps):
                continue
            base = lib_dir if f.kind == "lib" else lib32_dir
            target = _library(f, base, arch, links, entries)
            if base not in dirs:
                dirs.append(base)
        elif f.kind == "bin":
            if f.capability not in caps and not (f.capability == "imex" and imex):
                continue
            if f.name in MPS_BINARIES and not config.inject.mps:
                notes.append(f"{f.name} not mounted: inject.mps is false")
                continue
            target = f"/usr/bin/{f.name}"
        elif f.kind == "ipc":
            enabled = {
                "persistenced": config.inject.persistenced,
                "fabricmanager": config.inject.fabricmanager,
                "mps": config.inject.mps,
            }[f.name]
            if f.capability not in caps:
                continue
            if not enabled:
                notes.append(f"{f.name} IPC ({f.host_path}) not mounted: inject.{f.name} is false")
                continue
            target = _container_path(inventory, f)
            options = IPC_OPTIONS
            reason = f"capability {f.capability} ({f.name} IPC)"
        elif f.kind == "firmware":
            if not config.inject.gsp_firmware:
                notes.append(f"GSP firmware {f.name} not mounted: inject.gsp-firmware is false")
                continue
            target = _container_path(inventory, f)
            reason = f"GSP firmware of driver {version}"
        elif f.kind == "config" and f.capability == "imex":
            if not imex:
                continue
            target, reason = (
                _container_path(inventory, f),
                "IMEX daemon config (NVIDIA_IMEX_CHANNELS)",
            )
        elif f.kind == "config":
            target, reason = _config(f, caps, inventory, links)
        if target is not None:
            mounts.append(Mount(f.host_path, target, f.kind, options, reason))

    _compat_links(caps, lib_dir, version, mounts, links, entries)
    cache = tuple((soname, path, flags) for (soname, flags), path in entries.items())
    return tuple(mounts), tuple(links.values()), tuple(dirs), cache


def _config(
    f: DriverFile, caps: frozenset[str], inventory: Inventory, links: dict[str, Symlink]
) -> tuple[str | None, str]:
    """Where a loader config file or Xorg module goes (None: not for these capabilities)."""
    if "graphics" not in caps and "display" not in caps:
        return None, ""
    target = _container_path(inventory, f)
    if f.capability != "display":
        return target, "capability graphics (loader config)"
    if "display" not in caps:  # Xorg modules: for an X server of the container's own
        return None, ""
    reason = "capability display (Xorg module)"
    name = posixpath.basename(target)
    if name.startswith(GLX_LINK + "."):
        link = f"{posixpath.dirname(target)}/{GLX_LINK}"
        links.setdefault(link, Symlink(link, name, reason))
    return target, reason


def _compat_links(
    caps: frozenset[str],
    lib_dir: str,
    version: str,
    mounts: list[Mount],
    links: dict[str, Symlink],
    entries: dict[tuple[str, int], str],
) -> None:
    """The links NVIDIA's toolkit adds beside the SONAMEs (libcuda.so, libGLX_indirect)."""
    lib_caps = expand_capabilities(caps)
    mounted = {posixpath.basename(m.target) for m in mounts}
    extra = (
        ("compute", lib_dir, "libcuda.so", "libcuda.so.1"),
        ("video", lib_dir, "libnvidia-opticalflow.so", "libnvidia-opticalflow.so.1"),
        ("graphics", lib_dir, "libGLX_indirect.so.0", f"libGLX_nvidia.so.{version}"),
    )
    for cap, base, name, target in extra:
        if cap in lib_caps and (target in mounted or f"{base}/{target}" in links):
            links.setdefault(
                f"{base}/{name}", Symlink(f"{base}/{name}", target, f"capability {cap}")
            )
            # ldconfig lists a link to a SONAME (libcuda.so -> libcuda.so.1) under its own
            # name; a link to the file itself (libGLX_indirect.so.0) adds nothing.
            linked = [flags for (_, flags), path in entries.items() if path == f"{base}/{target}"]
            for flags in linked:
                entries.setdefault((name, flags), f"{base}/{name}")
    # Mesa's libgbm loads <libdir>/gbm/<drm driver>_gbm.so: NVIDIA's backend is the allocator.
    allocator = "libnvidia-allocator.so.1"
    if "graphics" in lib_caps and f"{lib_dir}/{allocator}" in links:
        gbm = f"{lib_dir}/gbm/nvidia-drm_gbm.so"
        links.setdefault(gbm, Symlink(gbm, f"../{allocator}", "capability graphics (GBM backend)"))


def _library(
    f: DriverFile,
    base: str,
    arch: Arch,
    links: dict[str, Symlink],
    entries: dict[tuple[str, int], str],
) -> str:
    """Where library ``f`` goes under ``base``; records its SONAME link and its ld.so.cache
    entry (ldconfig's key is the SONAME, or the file name when there is none)."""
    name = posixpath.basename(f.host_path)
    sub = "vdpau/" if posixpath.basename(posixpath.dirname(f.host_path)) == "vdpau" else ""
    soname = f.soname or name
    flags = arch.ldcache_flags64 if f.kind == "lib" else (arch.ldcache_flags32 or 0)
    if not sub:  # ldconfig reads no subdirectory of its directories
        entries.setdefault((soname, flags | FLAG_ELF_LIBC6), f"{base}/{soname}")
    if soname != name:
        link = f"{base}/{sub}{soname}"
        links.setdefault(link, Symlink(link, name, f"SONAME of {f.name}"))
    return f"{base}/{sub}{name}"


def _container_path(inventory: Inventory, f: DriverFile) -> str:
    root = inventory.driver_root.rstrip("/")
    path = f.host_path
    return path[len(root) :] if root and path.startswith(root + "/") else path
