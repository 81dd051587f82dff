"""A plan reduced to its work order: all that carrying it out needs, as plain JSON data.

The format and its types are the contract in ``nvct.base.order``; this is the plan's side.
"""

from __future__ import annotations

from nvct.host.components import DATACENTER_BRANDS
from nvct.store.cache import ORDER_VERSION

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from nvct.base.order import WorkOrder
    from nvct.config import Config
    from nvct.plan.model import Plan


def from_plan(plan: Plan, config: Config) -> WorkOrder:
    """The work order of a plan."""
    return {
        "v": ORDER_VERSION,
        "devices": [(d.node.path, d.node.major, d.node.minor, d.node.mode) for d in plan.devices],
        "mounts": [(m.source, m.target, list(m.options)) for m in plan.mounts],
        "symlinks": [(s.path, s.target) for s in plan.symlinks],
        "ldconfig": str(config.ldconfig),
        "ldconfig_dirs": list(plan.ldconfig_dirs),
        "ld_cache": list(plan.ld_cache_entries),
        "libdirs": [
            (d.host_dir, d.target, list(d.files), list(d.links), d.copies)
            for d in plan.library_dirs
        ],
        "binlinks": [(b.path, b.target, b.source, list(b.options)) for b in plan.binary_links],
        "log": (config.log.file, config.log.level),
        "gpus": [s.gpu.uuid if s.mig is None else s.mig.uuid for s in plan.selected],
        "capabilities": sorted(plan.request.capabilities),
        "proc_driver": (str(config.proc_root), proc_entries(plan))
        if config.inject.proc_driver != "off"
        else None,
        "proc_driver_in_runtime": config.inject.proc_driver == "always",
        "cuda_compat": cuda_compat(plan, config),
    }


def cuda_compat(plan: Plan, config: Config) -> tuple[str, bool] | None:
    """What the image's compat libcuda is checked against, when it is to be (compute, GPUs)."""
    if config.inject.cuda_compat == "off" or not plan.selected:
        return None
    if "compute" not in plan.request.capabilities and "video" not in plan.request.capabilities:
        return None
    brands = {s.gpu.brand.lower() for s in plan.selected}
    return plan.driver_version, brands <= DATACENTER_BRANDS


def proc_entries(plan: Plan) -> list[str]:
    """The /proc/driver/nvidia entries of the plan's GPUs (their ``gpus/<bus id>`` as the
    driver's procfs names it, and their MIG ``capabilities/gpu<minor>``), then the plan's own."""
    out: dict[str, None] = {}
    for s in plan.selected:
        domain, _, rest = s.gpu.pci_bus_id.partition(":")
        try:
            out[f"gpus/{int(domain, 16):04x}:{rest.lower()}"] = None
        except ValueError:
            continue
        out[f"capabilities/gpu{s.gpu.minor}"] = None
    out.update(dict.fromkeys(plan.proc_entries))
    return list(out)
