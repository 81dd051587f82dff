"""The plan's vocabulary: frozen values for what a container gets, each with its reason.

``nvct.plan.build`` makes a ``Plan``; ``nvct.plan.workorder`` reduces it to the JSON the shim
and the hook carry out; ``nvct.plan.render`` and ``nvct.plan.explain`` show it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nvct.host.arch import Arch
from nvct.host.inventory import DeviceNode, Gpu, MigDevice
from nvct.request.parse import Request

# Where a container sees the driver's libraries when they are bound as one directory: a
# subdirectory of the directory they would otherwise be mounted in one by one.
LIBRARY_SUBDIR = "nvidia-driver"
RO_OPTIONS = ("bind", "ro", "nosuid", "nodev", "private")
IPC_OPTIONS = ("bind", "rw", "nosuid", "nodev", "noexec", "private")


@dataclass(frozen=True, slots=True)
class Selected:
    """A GPU (or MIG device of it) the request selected, with the token that named it."""

    gpu: Gpu
    mig: MigDevice | None
    token: str

    @property
    def label(self) -> str:
        """GPU 1 / MIG 0:1, for reasons and logs."""
        if self.mig is None:
            return f"GPU {self.gpu.index}"
        return f"MIG {self.gpu.index}:{self.mig.index}"


@dataclass(frozen=True, slots=True)
class PlannedDevice:
    """A device node to create in the container and allow in its device cgroup."""

    node: DeviceNode
    reason: str


@dataclass(frozen=True, slots=True)
class Mount:
    """A bind mount from the host into the container."""

    source: str
    target: str
    kind: str
    options: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Symlink:
    """A symlink to create in the container (``path`` -> ``target``, relative target)."""

    path: str
    target: str
    reason: str


Pairs = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class BinaryLink:
    """A driver binary seen as a symlink into its library directory instead of a bind mount
    of its own (``inject.binaries = "links"``): ``path`` -> ``target``, the hard link (or copy)
    of ``source`` the directory holds. Where the image has a file of its own at ``path``,
    ``source`` is bound there instead, as with ``"mounts"``."""

    path: str
    target: str
    source: str
    options: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class LibraryDir:
    """The driver's libraries of one container directory (``base``), bound as one directory.

    ``host_dir`` holds hard links of ``files`` (host path, name) and the ``links`` (name,
    target) among them (``nvct.store.libdir`` prepares it); the container sees it at
    ``target`` (``base``/nvidia-driver), listed in its ld.so.cache and ld.so.conf.d.
    """

    base: str
    target: str
    host_dir: str
    kind: str  # lib or lib32, as the libraries' own mounts
    files: Pairs
    links: Pairs
    copies: bool = False  # host_dir holds copies of the files (nvct.store.libcopies)


@dataclass(frozen=True, slots=True)
class RequirementResult:
    """One requirement checked against one GPU (or the host when no GPU was selected)."""

    source: str
    expression: str
    where: str
    satisfied: bool
    detail: str


@dataclass(frozen=True, slots=True)
class RootfsLayout:
    """What the plan needs to know about the container image's filesystem."""

    debian: bool = True  # /etc/debian_version exists: use the multiarch lib dir

    def lib_dir(self, arch: Arch) -> str:
        """Where 64-bit driver libraries go."""
        return f"/usr/lib/{arch.multiarch64}" if self.debian else "/usr/lib64"

    def lib32_dir(self, arch: Arch) -> str:
        """Where 32-bit driver libraries go."""
        if self.debian and arch.multiarch32:
            return f"/usr/lib/{arch.multiarch32}"
        return "/usr/lib"


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything nvct will do to one container."""

    request: Request
    driver_version: str
    selected: tuple[Selected, ...] = ()
    devices: tuple[PlannedDevice, ...] = ()
    mounts: tuple[Mount, ...] = ()
    symlinks: tuple[Symlink, ...] = ()
    ldconfig_dirs: tuple[str, ...] = ()
    # (SONAME, container path, ld.so.cache flags) of each library in ``ldconfig_dirs``: the
    # entries ldconfig adds for them (``nvct.base.ldcache_format.add_entries``).
    ld_cache_entries: tuple[tuple[str, str, int], ...] = ()
    requirements: tuple[RequirementResult, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=())
    library_dirs: tuple[LibraryDir, ...] = ()
    binary_links: tuple[BinaryLink, ...] = ()
    # What the host has and the request would bring that the plan leaves out, and why (a
    # feature switched off in the config, a device asked for that the host lacks).
    notes: tuple[str, ...] = ()
    # Entries of /proc/driver/nvidia (relative) the container sees besides its GPUs' own.
    proc_entries: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        """True when there is nothing to do."""
        return not (self.devices or self.mounts or self.symlinks or self.binary_links)
