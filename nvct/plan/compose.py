"""The one pipeline from a request to what carrying it out needs.

config + request + inventory -> ``build_plan`` -> library directories -> work order. The shim
and the hook (which carry the order out), ``explain`` and ``list`` (which show the plan as a
start would carry it out) and ``cdi generate`` (which renders it) all call ``plan_container``,
so a new step is added here once; the first three reach it through ``nvct.plan.decide``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from nvct.base.errors import RequestError
from nvct.config import Config
from nvct.host.arch import Arch, host_arch
from nvct.host.fingerprint import inventory_fingerprint
from nvct.host.inventory import Inventory
from nvct.host.load import load_inventory
from nvct.plan.build import build_plan
from nvct.plan.firmware_dir import with_firmware_dir
from nvct.plan.libdirs import with_library_dirs
from nvct.plan.model import Plan, RootfsLayout
from nvct.plan.workorder import from_plan
from nvct.request.parse import Request

if TYPE_CHECKING:
    from nvct.base.order import WorkOrder

# "create": make the library directories a start binds (shim, hook); "show": use those that
# exist or could be made, making none (list, explain); "none": one mount per file (CDI specs
# outlive nvct's cache).
LibraryDirs = Literal["create", "show", "none"]


@dataclass(frozen=True, slots=True)
class Planned:
    """A container's plan and the work order that carries it out."""

    plan: Plan
    order: WorkOrder
    fingerprint: str  # the driver's ("" when nothing needed it)


def plan_container(
    request: Request,
    config: Config,
    layout: RootfsLayout,
    *,
    library_dirs: LibraryDirs,
    inventory: Inventory | None = None,
    fingerprint: str | None = None,
    arch: Arch | None = None,
    enforce_requirements: bool = True,
) -> Planned:
    """Plan ``request`` on this host (``inventory``: the host's, loaded when not given;
    ``fingerprint``: the driver's, when the caller has it already). ``enforce_requirements``
    false: show the plan even where ``NVIDIA_REQUIRE_*`` fails (list, explain, CDI).

    Raises:
        NvctError: the request cannot be met (unknown device, failed requirement, no driver).
    """
    if request.visible == "cdi":
        raise cdi_refusal(request)
    if fingerprint is None and (inventory is None or library_dirs != "none"):
        fingerprint = inventory_fingerprint(config.driver_root, config.dev_root, config.proc_root)
    fingerprint = fingerprint or ""
    if inventory is None:
        inventory = load_inventory(config, fingerprint=fingerprint)
    plan = build_plan(
        request,
        inventory,
        config,
        arch or host_arch(),
        layout,
        enforce_requirements=enforce_requirements,
    )
    if library_dirs != "none":
        plan = with_library_dirs(plan, config, fingerprint, create=library_dirs == "create")
        if config.inject.library_mounts in ("directory", "directory-copies"):
            plan = with_firmware_dir(plan)
    return Planned(plan, from_plan(plan, config), fingerprint)


def cdi_refusal(request: Request) -> RequestError:
    """Why CDI devices get no plan: their specs say what the container gets."""
    return RequestError(
        f"CDI devices ({', '.join(request.devices)}) come from CDI specs, not nvct's plan",
        hint="run the container with nvct-runtime or an engine with CDI support "
        "(nvct-cli explain shows what they give)",
    )
