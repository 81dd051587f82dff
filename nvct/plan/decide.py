"""The one decision the shim, the hook and ``explain`` make for a container's request.

request -> wants a GPU? -> CDI devices or nvct's plan -> a ``Decision``: no GPU (with why), a
CDI order (what a CDI engine would do), a planned order, or refused (the error the container
is stopped with). Each frontend then only carries the decision out (the shim caches it, the
hook applies it, ``explain`` prints it), so a new branch is added here once, as NVIDIA's
toolkit picks its mode in one spec-modifier factory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from nvct.base.errors import NvctError
from nvct.config import Config
from nvct.host.arch import Arch
from nvct.host.inventory import Inventory
from nvct.plan.compose import LibraryDirs, Planned, cdi_refusal, plan_container
from nvct.plan.model import RootfsLayout
from nvct.request.parse import Request

if TYPE_CHECKING:
    from nvct.base.order import WorkOrder


class _Decided:
    """What every decision keeps: the request it was made for.

    Plain slotted classes, not dataclasses: the hook and an uncached create import this, and
    five frozen dataclasses cost ~2.3 ms to build there (their methods are compiled at import).
    """

    __slots__ = ("request",)

    def __init__(self, request: Request) -> None:
        self.request = request

    @property
    def ignored(self) -> list[str]:
        """NVIDIA inputs nvct left alone, and why."""
        return list(self.request.ignored)


class NoGpu(_Decided):
    """The container asks for no GPU; ``request.decisions`` say why."""

    __slots__ = ()


class CdiOrdered(_Decided):
    """CDI devices: the order applying their specs' edits, and the specs it was read from."""

    __slots__ = ("dirs", "order", "problems", "stamp")

    def __init__(
        self,
        request: Request,
        order: WorkOrder,
        dirs: list[str],
        stamp: str,
        problems: tuple[str, ...],
    ) -> None:
        super().__init__(request)
        self.order = order
        self.dirs = dirs
        self.stamp = stamp  # of ``dirs``, taken before reading them: a change is re-read
        self.problems = problems  # spec files that could not be used


class PlannedOrder(_Decided):
    """nvct's plan for the request, and its work order."""

    __slots__ = ("planned",)

    def __init__(self, request: Request, planned: Planned) -> None:
        super().__init__(request)
        self.planned = planned

    @property
    def ignored(self) -> list[str]:
        """NVIDIA inputs nvct left alone (the request's), then the plan's own notes."""
        return [*self.request.ignored, *self.planned.plan.notes]


class Refused(_Decided):
    """The request cannot be met: ``error`` is what stops the container."""

    __slots__ = ("error", "problems")

    def __init__(self, request: Request, error: NvctError, problems: tuple[str, ...] = ()) -> None:
        super().__init__(request)
        self.error = error
        self.problems = problems  # CDI spec files that could not be used, when CDI was asked


Decision = NoGpu | CdiOrdered | PlannedOrder | Refused


def decide(
    request: Request,
    config: Config,
    layout: Callable[[], RootfsLayout],
    *,
    library_dirs: LibraryDirs,
    cdi: bool = True,
    inventory: Callable[[], Inventory] | None = None,
    fingerprint: str | None = None,
    arch: Arch | None = None,
    enforce_requirements: bool = True,
) -> Decision:
    """What to do for ``request``. ``layout`` is asked only when a plan is made (the hook
    reads it in the rootfs); ``cdi`` false: the caller cannot carry out a CDI order (the
    hook), so CDI devices are refused. The rest is passed to ``plan_container``.
    """
    if not request.wants_gpu:
        return NoGpu(request)
    if request.visible == "cdi":
        if not cdi:
            return Refused(request, cdi_refusal(request))
        return _cdi(request, config)
    try:
        planned = plan_container(
            request,
            config,
            layout(),
            library_dirs=library_dirs,
            inventory=inventory() if inventory is not None else None,
            fingerprint=fingerprint,
            arch=arch,
            enforce_requirements=enforce_requirements,
        )
    except NvctError as err:
        return Refused(request, err)
    return PlannedOrder(request, planned)


def _cdi(request: Request, config: Config) -> CdiOrdered | Refused:
    from nvct.cdi.specs import load_cdi_specs
    from nvct.host.fingerprint import cdi_specs_stamp
    from nvct.plan.cdi_order import cdi_order

    dirs = list(config.cdi.spec_dirs)
    stamp = cdi_specs_stamp(dirs)  # before reading: a spec changed meanwhile is re-read
    specs = load_cdi_specs(dirs)
    try:
        order = cdi_order(request.devices, specs, config)
    except NvctError as err:
        return Refused(request, err, specs.problems)
    return CdiOrdered(request, order, dirs, stamp, specs.problems)
