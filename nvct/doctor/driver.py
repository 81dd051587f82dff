"""The driver: NVML answers (always rediscovered), the driver root's ld.so.cache, the kernel
module version, and persistence mode on many-GPU hosts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from nvct.base.errors import DiscoveryError
from nvct.doctor.context import DoctorContext
from nvct.doctor.result import CheckResult, failed, passed, warned
from nvct.host.arch import Arch, host_arch
from nvct.host.discover.libraries import nvml_library
from nvct.host.discover.nvml import NvmlGpu, query_nvml
from nvct.host.discover.rootpath import resolve_in_root
from nvct.host.ldcache import read_ldcache

NVML = "nvml"
LDCACHE = "ldcache"
MODULE = "kernel-module"
PERSISTENCE = "persistence"
CHECKED_LIBRARIES = ("libnvidia-ml.so.1", "libcuda.so.1")
_MODULE_RE = re.compile(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9]+(?:\.[0-9]+)+)")


@dataclass(frozen=True, slots=True)
class DriverFacts:
    """What NVML said (empty when it failed), for the checks that need a driver version."""

    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: tuple[NvmlGpu, ...] = field(default=())
    module_version: str | None = None

    @property
    def version(self) -> str | None:
        """NVML's driver version, else the kernel module's."""
        return self.driver_version or self.module_version


def kernel_module_version(proc_root: Path) -> str | None:
    """The loaded nvidia module's version from ``<proc-root>/driver/nvidia/version``."""
    try:
        text = (proc_root / "driver/nvidia/version").read_text()
    except OSError:
        return None
    match = _MODULE_RE.search(text)
    return match.group(1) if match else None


def probe_nvml(ctx: DoctorContext, arch: Arch | None = None) -> tuple[DriverFacts, CheckResult]:
    """Load NVML from the driver root (in a forked helper) and ask for the driver."""
    root = ctx.config.driver_root
    module = kernel_module_version(ctx.config.proc_root)
    try:
        library = nvml_library(root, arch or host_arch())
    except DiscoveryError as err:
        return DriverFacts(module_version=module), failed(
            NVML, err.message, err.hint or f"regenerate it: ldconfig -r {root}"
        )
    if library is None:
        return DriverFacts(module_version=module), failed(
            NVML,
            f"the ld.so.cache of driver root {root} lists no 64-bit libnvidia-ml.so.1",
            "install the NVIDIA driver, or set driver-root (config.toml or --driver-root) to "
            "where it lives, e.g. /run/nvidia/driver",
        )
    try:
        report = query_nvml(library)
    except DiscoveryError as err:
        return DriverFacts(module_version=module), failed(
            NVML, err.message, err.hint or "check the driver with nvidia-smi"
        )
    facts = DriverFacts(report.driver_version, report.cuda_version, report.gpus, module)
    return facts, passed(
        NVML,
        f"NVML ({library}) reports driver {report.driver_version}, CUDA {report.cuda_version}, "
        f"{len(report.gpus)} GPU(s)",
    )


def check_kernel_module(ctx: DoctorContext, facts: DriverFacts) -> CheckResult:
    """The kernel module and the user-space driver are the same version."""
    where = ctx.config.proc_root / "driver/nvidia/version"
    if facts.module_version is None:
        return warned(
            MODULE,
            f"cannot read the nvidia kernel module version from {where}",
            "load the module (nvidia-modprobe, or modprobe nvidia); check proc-root",
        )
    if facts.driver_version and facts.driver_version != facts.module_version:
        return failed(
            MODULE,
            f"driver/library version mismatch: kernel module {facts.module_version}, "
            f"user-space driver (NVML) {facts.driver_version}",
            "reboot, or unload and reload the nvidia kernel modules after the driver upgrade",
        )
    return passed(MODULE, f"kernel module {facts.module_version} loaded")


def check_ldcache(ctx: DoctorContext, facts: DriverFacts, arch: Arch | None = None) -> CheckResult:
    """The driver root's ld.so.cache lists libnvidia-ml.so.1 and libcuda.so.1 of the driver."""
    arch = arch or host_arch()
    root = ctx.config.driver_root
    cache = root / "etc/ld.so.cache"
    fix = f"run ldconfig{'' if str(root) == '/' else f' -r {root}'} (reinstall the driver if "
    fix += "its libraries are gone)"
    try:
        entries = read_ldcache(cache)
    except DiscoveryError as err:
        return failed(LDCACHE, err.message, err.hint or fix)
    version = facts.version
    missing: list[str] = []
    stale: list[str] = []
    found: list[str] = []
    for soname in CHECKED_LIBRARIES:
        paths = [
            e.path
            for e in entries
            if e.soname == soname and e.is_elf and e.arch_flags == arch.ldcache_flags64
        ]
        resolved = [(p, resolve_in_root(root, p)) for p in paths]
        good = [p for p, real in resolved if real is not None and _is_version(real.name, version)]
        if not good:
            missing.append(soname if not paths else f"{soname} (only {', '.join(paths)})")
            continue
        found.append(f"{soname} -> {good[0]}")
        first, first_real = resolved[0]
        if first not in good and first_real is not None:
            stale.append(f"{soname} resolves first to {first} ({first_real.name})")
    if missing:
        want = f"of driver {version}" if version else "of the driver"
        return failed(LDCACHE, f"{cache} lists no {'; no '.join(missing)} {want}", fix)
    if stale:
        return warned(
            LDCACHE,
            f"{cache}: {'; '.join(stale)}, a leftover of another driver (nvct picks the "
            f"{version} one; host programs get the old one)",
            "remove the old driver's libraries and run ldconfig",
        )
    return passed(LDCACHE, f"{cache}: {'; '.join(found)}")


def _is_version(name: str, version: str | None) -> bool:
    return name.endswith(f".so.{version}") if version else ".so." in name


def check_persistence(ctx: DoctorContext, facts: DriverFacts) -> CheckResult:
    """Persistence mode on hosts with many GPUs (else every container start re-inits them)."""
    gpus = facts.gpus
    if not gpus:
        return passed(PERSISTENCE, "no GPUs reported: persistence mode not checked")
    off = [g.index for g in gpus if not g.persistence_mode]
    if not off:
        return passed(PERSISTENCE, f"persistence mode on for all {len(gpus)} GPU(s)")
    if len(gpus) >= ctx.many_gpus:
        return warned(
            PERSISTENCE,
            f"persistence mode is off on {len(off)} of {len(gpus)} GPUs "
            f"({', '.join(map(str, off))}): the driver initialises every GPU on each container "
            "start (slow starts, 'driver rpc error: timed out')",
            "run nvidia-persistenced (systemctl enable --now nvidia-persistenced), "
            "or: nvidia-smi -pm 1",
        )
    return passed(
        PERSISTENCE,
        f"persistence mode off on {len(off)} GPU(s); fine below {ctx.many_gpus} GPUs",
    )
