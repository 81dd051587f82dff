"""Gather the host's driver facts into an ``Inventory`` (the edge that reads the host)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from nvct.base.errors import DiscoveryError
from nvct.host.arch import Arch, host_arch
from nvct.host.discover.devices import device_node, discover_control_nodes, mig_cap_node
from nvct.host.discover.drm import drm_nodes
from nvct.host.discover.egl import discover_platform_libraries
from nvct.host.discover.features import (
    discover_cap_minors,
    discover_feature_nodes,
    discover_imex_major,
)
from nvct.host.discover.files import (
    discover_binaries,
    discover_firmware,
    discover_graphics_configs,
    discover_ipcs,
)
from nvct.host.discover.libraries import discover_libraries, nvml_library
from nvct.host.discover.nvml import NvmlGpu, query_nvml
from nvct.host.discover.xorg import discover_xorg_modules
from nvct.host.inventory import Gpu, Inventory, MigDevice


def discover_inventory(
    driver_root: Path, dev_root: Path, proc_root: Path, arch: Arch | None = None
) -> Inventory:
    """Read everything nvct needs to know about the host's driver.

    Raises:
        DiscoveryError: no NVML under the driver root, or NVML fails.
    """
    arch = arch or host_arch()
    library = nvml_library(driver_root, arch)
    if library is None:
        raise DiscoveryError(
            f"no libnvidia-ml.so.1 in the ld.so.cache of driver root {driver_root}",
            hint="install the NVIDIA driver, or set driver-root to where it lives "
            "(e.g. /run/nvidia/driver)",
        )
    report = query_nvml(library)
    libs, warnings = discover_libraries(driver_root, report.driver_version, arch)
    configs = discover_graphics_configs(driver_root)
    platform, platform_warnings = discover_platform_libraries(
        driver_root, configs, arch, {f.host_path for f in libs}
    )
    warnings += platform_warnings
    binaries, binary_warnings = discover_binaries(driver_root, library)
    warnings += binary_warnings
    files = (
        libs
        + platform
        + binaries
        + discover_ipcs(driver_root)
        + discover_firmware(driver_root, report.driver_version)
        + configs
        + discover_xorg_modules(driver_root, report.driver_version)
    )
    return Inventory(
        driver_version=report.driver_version,
        cuda_version=report.cuda_version,
        driver_root=str(driver_root),
        gpus=tuple(_gpu(g, dev_root, proc_root) for g in report.gpus),
        control_nodes=discover_control_nodes(dev_root),
        files=files,
        warnings=warnings,
        feature_nodes=discover_feature_nodes(dev_root),
        cap_minors=discover_cap_minors(proc_root),
        imex_major=discover_imex_major(proc_root),
    )


def _gpu(gpu: NvmlGpu, dev_root: Path, proc_root: Path) -> Gpu:
    """NVML's facts plus the device nodes that grant access to the GPU and its MIG devices."""
    migs = []
    for mig in gpu.migs:
        caps = (
            mig_cap_node(dev_root, proc_root, gpu.minor, mig.gpu_instance, None),
            mig_cap_node(dev_root, proc_root, gpu.minor, mig.gpu_instance, mig.compute_instance),
        )
        migs.append(MigDevice(**asdict(mig), caps=tuple(c for c in caps if c is not None)))
    facts = {k: v for k, v in asdict(gpu).items() if k != "migs"}
    node = device_node(dev_root, f"/dev/nvidia{gpu.minor}")
    drm = drm_nodes(dev_root, gpu.pci_bus_id)
    return Gpu(**facts, migs=tuple(migs), node=node, drm=drm)
