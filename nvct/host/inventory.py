"""The host's NVIDIA driver as facts: a plain, serialisable value.

``Inventory`` is what discovery (``nvct.host.discover``) produces and what the plan builder
consumes. It is cached on disk as JSON (``nvct.store.cache``), so it round-trips through
``to_dict`` / ``from_dict`` exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceNode:
    """A character device: where it is on the host and where it goes in a container."""

    path: str  # path inside the container, e.g. /dev/nvidia0
    host_path: str  # path on the host (under the dev root)
    major: int
    minor: int
    mode: int = 0o666


@dataclass(frozen=True, slots=True, kw_only=True)
class MigAttributes:
    """A MIG device's nvmlDeviceGetAttributes_v2 (GFD's MIG labels); all 0 where NVML does
    not answer (a real MIG device has at least one slice)."""

    multiprocessors: int = 0
    slices_gi: int = 0
    slices_ci: int = 0
    engines_copy: int = 0
    engines_decoder: int = 0
    engines_encoder: int = 0
    engines_jpeg: int = 0
    engines_ofa: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class MigDevice(MigAttributes):
    """A MIG device: a GPU instance + compute instance of a parent GPU."""

    index: int  # position among the parent's MIG devices (the "<gpu>:<mig>" form)
    uuid: str
    gpu_instance: int
    compute_instance: int
    profile: str
    memory_mib: int
    caps: tuple[DeviceNode, ...] = ()  # /dev/nvidia-caps/nvidia-cap<N> for the GI and CI


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    """A physical GPU as NVML reports it."""

    index: int
    minor: int
    uuid: str
    pci_bus_id: str  # NVML form, 00000000:3B:00.0
    name: str
    brand: str
    architecture: str
    compute_capability: str  # "9.0"
    memory_mib: int
    persistence_mode: bool = False
    mig_enabled: bool = False
    mig_capable: bool = False  # NVML answers its MIG mode (nvmlDeviceGetMigMode succeeds)
    virtualization_mode: int = 0  # nvmlDeviceGetVirtualizationMode: 0 none, 2 vGPU guest...
    fabric_clique: str = ""  # "<cluster UUID>.<clique ID>" on a completed NVLink fabric
    migs: tuple[MigDevice, ...] = ()
    node: DeviceNode | None = None
    drm: tuple[DeviceNode, ...] = ()  # /dev/dri card and render nodes (graphics, display)


@dataclass(frozen=True, slots=True, kw_only=True)
class DriverFile:
    """A file of the driver (library, binary, IPC socket, firmware, config) on the host."""

    host_path: str
    kind: str  # lib | lib32 | bin | ipc | firmware | config
    capability: str  # the capability that asks for it ("utility", ...)
    name: str  # library prefix or binary name (for reasons and filters)
    soname: str = ""  # libraries only


@dataclass(frozen=True, slots=True, kw_only=True)
class Inventory:
    """Everything nvct knows about the host's driver, GPUs and device nodes."""

    driver_version: str
    cuda_version: str  # "12.4"
    driver_root: str
    gpus: tuple[Gpu, ...]
    control_nodes: tuple[DeviceNode, ...]  # nvidiactl, nvidia-uvm, nvidia-uvm-tools, modeset
    files: tuple[DriverFile, ...]
    warnings: tuple[str, ...] = field(default=())
    # Optional features (nvct.host.discover.features): their nodes that exist, the MIG
    # capability minors procfs lists, the IMEX channel major (None: module not loaded).
    feature_nodes: tuple[DeviceNode, ...] = ()
    cap_minors: tuple[tuple[str, int], ...] = ()
    imex_major: int | None = None

    def control_node(self, name: str) -> DeviceNode | None:
        """The control node whose container path is /dev/<name>, if the host has it."""
        for node in self.control_nodes:
            if node.path == f"/dev/{name}":
                return node
        return None

    def files_of(self, kind: str) -> tuple[DriverFile, ...]:
        """Driver files of one kind, in discovery order."""
        return tuple(f for f in self.files if f.kind == kind)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Inventory:
        """The inverse of to_dict."""

        def node(d: dict[str, Any] | None) -> DeviceNode | None:
            return None if d is None else DeviceNode(**d)

        gpus = tuple(
            Gpu(
                **{k: v for k, v in g.items() if k not in ("migs", "node", "drm")},
                migs=tuple(
                    MigDevice(
                        **{k: v for k, v in m.items() if k != "caps"},
                        caps=tuple(DeviceNode(**c) for c in m["caps"]),
                    )
                    for m in g["migs"]
                ),
                node=node(g["node"]),
                drm=tuple(DeviceNode(**d) for d in g.get("drm", ())),
            )
            for g in data["gpus"]
        )
        return cls(
            driver_version=data["driver_version"],
            cuda_version=data["cuda_version"],
            driver_root=data["driver_root"],
            gpus=gpus,
            control_nodes=tuple(DeviceNode(**c) for c in data["control_nodes"]),
            files=tuple(DriverFile(**f) for f in data["files"]),
            warnings=tuple(data.get("warnings", ())),
            feature_nodes=tuple(DeviceNode(**n) for n in data.get("feature_nodes", ())),
            cap_minors=tuple((str(n), int(m)) for n, m in data.get("cap_minors", ())),
            imex_major=data.get("imex_major"),
        )
