"""What a simulated NVIDIA driver installation contains: GPUs, MIG devices, versions.

Everything here is a plain value; `build.py` turns a `SimDriverSpec` into files. UUIDs,
serial numbers and bus ids are derived from fixed seeds so tests can assert exact values.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

# NVML's nvmlBrandType_t, keyed by the names libnvidia-container prints (`nvidia-container-cli
# info`) and the `brand` requirement compares against (case-insensitively).
BRANDS: dict[str, int] = {
    "Unknown": 0,
    "Quadro": 1,
    "Tesla": 2,
    "NVS": 3,
    "Grid": 4,
    "GeForce": 5,
    "Titan": 6,
    "NvidiaVApps": 7,
    "NvidiaVPC": 8,
    "NvidiaVCS": 9,
    "NvidiaVWS": 10,
    "NvidiaCloudGaming": 11,
    "QuadroRTX": 12,
    "NvidiaRTX": 13,
    "Nvidia": 14,
    "GeForceRTX": 15,
    "TitanRTX": 16,
}

# NVML's nvmlDeviceArchitecture_t.
ARCHITECTURES: dict[str, int] = {
    "Kepler": 2,
    "Maxwell": 3,
    "Pascal": 4,
    "Volta": 5,
    "Turing": 6,
    "Ampere": 7,
    "Ada": 8,
    "Hopper": 9,
    "Blackwell": 10,
}

# PCI device ids (NVML's pciDeviceId: device << 16 | vendor) and board part numbers of the
# models the presets use; unknown models get a generic id.
_MODELS: dict[str, tuple[int, int, str]] = {
    # name: (pciDeviceId, pciSubSystemId, board part number)
    "NVIDIA H100 80GB HBM3": (0x233010DE, 0x16C110DE, "692-2G520-0200-000"),
    "NVIDIA A100-SXM4-80GB": (0x20B210DE, 0x147F10DE, "692-2G506-0210-002"),
    "NVIDIA A100-SXM4-40GB": (0x20B010DE, 0x134F10DE, "692-2G506-0200-002"),
    "NVIDIA H100 PCIe": (0x233110DE, 0x162610DE, "900-21010-0000-000"),
    "NVIDIA L40S": (0x26B910DE, 0x185110DE, "900-2G133-0080-000"),
    "Tesla T4": (0x1EB810DE, 0x12A210DE, "900-2G183-0000-001"),
}
_GENERIC_MODEL = (0x000010DE, 0x000010DE, "000-00000-0000-000")

# NVML's event type bits (nvmlEventType*) the simulated driver can deliver.
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID = 0x8
ECC_GPU_EVENTS = EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC | EVENT_XID
VGPU_GUEST = 2  # NVML_GPU_VIRTUALIZATION_MODE_VGPU: a VM given a vGPU

# MIG capability device-file minors, as /proc/driver/nvidia-caps/mig-minors numbers them:
# config 1, monitor 2, then per GPU (32 max) 15 GPU instances x (1 access + 8 compute instances).
MIG_CONFIG_MINOR = 1
MIG_MONITOR_MINOR = 2
MAX_GPUS = 32
MAX_GPU_INSTANCES = 15
MAX_COMPUTE_INSTANCES = 8
_MINORS_PER_GI = 1 + MAX_COMPUTE_INSTANCES
_MINORS_PER_GPU = MAX_GPU_INSTANCES * _MINORS_PER_GI


def gi_cap_minor(gpu_minor: int, gi: int) -> int:
    """Minor of /dev/nvidia-caps/nvidia-cap<N> for `gpu<minor>/gi<gi>/access`."""
    return 3 + gpu_minor * _MINORS_PER_GPU + gi * _MINORS_PER_GI


def ci_cap_minor(gpu_minor: int, gi: int, ci: int) -> int:
    """Minor of /dev/nvidia-caps/nvidia-cap<N> for `gpu<minor>/gi<gi>/ci<ci>/access`."""
    return gi_cap_minor(gpu_minor, gi) + 1 + ci


def deterministic_uuid(prefix: str, seed: str) -> str:
    """`<prefix>-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` derived from `seed` (NVML's UUID shape)."""
    h = hashlib.sha256(seed.encode()).hexdigest()
    return f"{prefix}-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def parse_bus_id(bus_id: str) -> tuple[int, int, int, int]:
    """(domain, bus, device, function) of `DDDDDDDD:BB:DD.F` (any domain width)."""
    dom, bus, rest = bus_id.split(":")
    dev, fn = rest.split(".")
    return int(dom, 16), int(bus, 16), int(dev, 16), int(fn, 16)


@dataclass(frozen=True)
class MigAttributes:
    """What nvmlDeviceGetAttributes_v2 answers for a MIG device (its compute instance spans
    its GPU instance, so both slice counts are the profile's)."""

    multiprocessors: int
    copy: int
    decoder: int
    encoder: int
    jpeg: int
    ofa: int
    slices: int


# The GPU instance profiles' attributes (SMs, copy engines, NVDEC, NVENC, JPEG, OFA, slices), as
# `nvidia-smi mig -lgip` lists them (its SM/DEC/ENC and CE/JPEG/OFA columns) and NVIDIA's MIG user
# guide tables them (engines per profile; the guide gives SMs as a fraction only):
# https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html
# A100-SXM4-80GB's (the guide names them after A100-40GB's 1g.5gb ... 7g.40gb, memory doubled).
A100_80GB_PROFILES = {
    "1g.10gb": MigAttributes(14, 1, 0, 0, 0, 0, 1),
    "1g.10gb+me": MigAttributes(14, 1, 1, 0, 1, 1, 1),  # the one 1g with the media engines
    "1g.20gb": MigAttributes(14, 1, 1, 0, 0, 0, 1),
    "2g.20gb": MigAttributes(28, 2, 1, 0, 0, 0, 2),
    "3g.40gb": MigAttributes(42, 3, 2, 0, 0, 0, 3),
    "4g.40gb": MigAttributes(56, 4, 2, 0, 0, 0, 4),
    "7g.80gb": MigAttributes(98, 7, 5, 0, 1, 1, 7),
}
# H100 80GB's (Hopper: more SMs per slice, a JPEG engine with every NVDEC, no NVENC; the whole
# GPU has 8 copy engines where its seven 1g slices have one each); the h100x2-550-mig preset
# uses 3g.40gb, 2g.20gb and 1g.10gb.
H100_80GB_PROFILES = {
    "1g.10gb": MigAttributes(16, 1, 1, 0, 1, 0, 1),
    "1g.10gb+me": MigAttributes(16, 1, 1, 0, 1, 1, 1),
    "1g.20gb": MigAttributes(26, 1, 1, 0, 1, 0, 1),
    "2g.20gb": MigAttributes(32, 2, 2, 0, 2, 0, 2),
    "3g.40gb": MigAttributes(60, 3, 3, 0, 3, 0, 3),
    "4g.40gb": MigAttributes(64, 4, 4, 0, 4, 0, 4),
    "7g.80gb": MigAttributes(132, 8, 7, 0, 7, 1, 7),
}


@dataclass(frozen=True)
class SimMig:
    """One MIG device: a GPU instance with one compute instance."""

    gi: int
    ci: int
    uuid: str
    profile: str
    memory_mib: int
    gi_cap_minor: int
    ci_cap_minor: int
    attributes: MigAttributes


@dataclass(frozen=True)
class SimGpu:
    minor: int
    uuid: str
    pci_bus_id: str
    name: str
    brand: str
    architecture: str
    compute_capability: tuple[int, int]
    memory_mib: int
    migs: tuple[SimMig, ...] = ()
    # Topology (see README "Topology"): NUMA node as sysfs reports it (-1: none), the PCIe
    # switch the GPU sits behind (-1: directly on a root port) and its host bridge; and per
    # NVLink, the PCI bus ID (NVML form) of the device at its other end: a GPU or an NVSwitch.
    numa_node: int = -1
    pci_switch: int = -1
    host_bridge: int = 0
    nvlinks: tuple[str, ...] = ()
    # What nvmlDeviceGetSupportedEventTypes answers: ECC events only where ECC is on (GeForce,
    # RTX and ECC-off GPUs have XIDs only); 0 = no events at all (NOT_SUPPORTED).
    supported_events: int = ECC_GPU_EVENTS
    # nvmlDeviceGetVirtualizationMode: 0 none (bare metal), 1 pass-through, 2 vGPU guest, 3 host.
    virtualization_mode: int = 0
    # A vGPU guest's GPU (mode 2): the host's vGPU manager (version, branch, at most 10 ASCII
    # characters each) that its PCI config space reports in NVIDIA's vGPU capability.
    vgpu_host: tuple[str, str] | None = None
    # nvmlDeviceGetGpuFabricInfo of a GPU on an NVLink fabric (GB200 NVL): its cluster UUID and
    # clique ID, registration completed; None: NOT_SUPPORTED, as on HGX H100/A100.
    fabric: tuple[str, int] | None = None
    # The PCI class sysfs reports: 3D controller (data-centre parts), 0x030000 a VGA controller.
    pci_class: int = 0x030200

    @property
    def row_remapping(self) -> bool:
        """HBM data-centre GPUs (A100/H100 class) remap rows; the others answer NOT_SUPPORTED."""
        return self.mig_capable and bool(self.supported_events & EVENT_DOUBLE_BIT_ECC)

    @property
    def memory_temperature(self) -> bool:
        """HBM parts report their memory's temperature (NVML_FI_DEV_MEMORY_TEMP); GDDR parts
        answer NOT_SUPPORTED."""
        return self.row_remapping

    @property
    def gpm(self) -> bool:
        """GPU performance monitoring (nvmlGpm*, the DCGM_FI_PROF_* source): Hopper and newer."""
        return self.compute_capability[0] >= 9

    @property
    def page_retirement(self) -> bool:
        """ECC GPUs without row remapping retire pages instead (T4, V100)."""
        return bool(self.supported_events & EVENT_DOUBLE_BIT_ECC) and not self.row_remapping

    @property
    def mig_enabled(self) -> bool:
        return bool(self.migs)

    @property
    def mig_capable(self) -> bool:
        """A100/A30 (sm_80) and Hopper or newer data-centre parts support MIG."""
        return self.compute_capability == (8, 0) or self.compute_capability[0] >= 9

    @property
    def proc_bus_id(self) -> str:
        """Directory name under /proc/driver/nvidia/gpus/: 16-bit domain, lower case."""
        dom, bus, dev, fn = parse_bus_id(self.pci_bus_id)
        return f"{dom:04x}:{bus:02x}:{dev:02x}.{fn:x}"

    @property
    def pci_device_id(self) -> int:
        return _MODELS.get(self.name, _GENERIC_MODEL)[0]

    @property
    def pci_subsystem_id(self) -> int:
        return _MODELS.get(self.name, _GENERIC_MODEL)[1]

    @property
    def board_part_number(self) -> str:
        return _MODELS.get(self.name, _GENERIC_MODEL)[2]

    @property
    def serial(self) -> str:
        digits = int(hashlib.sha256(self.uuid.encode()).hexdigest(), 16) % 10**10
        return f"132{digits:010d}"

    def mig_name(self, mig: SimMig) -> str:
        """What NVML's nvmlDeviceGetName returns for a MIG device of this GPU."""
        return f"{self.name} MIG {mig.profile}"


@dataclass(frozen=True)
class SimDriverSpec:
    driver_version: str
    cuda_version: str
    gpus: tuple[SimGpu, ...]
    # Name the spec was made from (informational; not part of the identity hash).
    label: str = field(default="", compare=False)

    @property
    def cuda_version_int(self) -> int:
        """nvmlSystemGetCudaDriverVersion's value: 12.4 -> 12040."""
        major, _, minor = self.cuda_version.partition(".")
        return int(major) * 1000 + int(minor or 0) * 10

    @property
    def driver_major(self) -> int:
        return int(self.driver_version.split(".")[0])

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d.pop("label", None)
        return d

    def identity(self) -> str:
        """Stable hash of everything that ends up in the built files."""
        blob = json.dumps(self.to_json(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def validate(self) -> None:
        seen_minors: set[int] = set()
        seen_uuids: set[str] = set()
        for gpu in self.gpus:
            if gpu.minor in seen_minors or not 0 <= gpu.minor < MAX_GPUS:
                raise ValueError(f"GPU minor {gpu.minor} is duplicated or out of range")
            seen_minors.add(gpu.minor)
            if gpu.brand not in BRANDS:
                raise ValueError(f"unknown brand {gpu.brand!r}; use one of {sorted(BRANDS)}")
            if gpu.architecture not in ARCHITECTURES:
                raise ValueError(f"unknown architecture {gpu.architecture!r}")
            parse_bus_id(gpu.pci_bus_id)
            for remote in gpu.nvlinks:
                parse_bus_id(remote)
            if (gpu.vgpu_host is not None) != (gpu.virtualization_mode == VGPU_GUEST):
                raise ValueError(f"GPU minor {gpu.minor}: a vGPU guest needs vgpu_host, no other")
            if gpu.vgpu_host and not all(len(v) <= 10 and v.isascii() for v in gpu.vgpu_host):
                raise ValueError(f"GPU minor {gpu.minor}: vgpu_host values are 10 ASCII bytes")
            if gpu.migs and not gpu.mig_capable:
                raise ValueError(f"{gpu.name} (minor {gpu.minor}) does not support MIG")
            for uuid in (gpu.uuid, *(m.uuid for m in gpu.migs)):
                if uuid in seen_uuids:
                    raise ValueError(f"UUID {uuid} is duplicated")
                seen_uuids.add(uuid)
            for mig in gpu.migs:
                want = (gi_cap_minor(gpu.minor, mig.gi), ci_cap_minor(gpu.minor, mig.gi, mig.ci))
                if (mig.gi_cap_minor, mig.ci_cap_minor) != want:
                    raise ValueError(
                        f"MIG gi{mig.gi}/ci{mig.ci} of GPU minor {gpu.minor}: cap minors "
                        f"{(mig.gi_cap_minor, mig.ci_cap_minor)} != {want} (see mig_device())"
                    )


def mig_device(
    gpu_minor: int,
    gi: int,
    ci: int,
    profile: str,
    memory_mib: int,
    seed: str,
    profiles: dict[str, MigAttributes] = A100_80GB_PROFILES,
) -> SimMig:
    """A SimMig whose UUID and cap minors are derived like the real driver would number them,
    with the attributes of ``profile`` among ``profiles`` (A100-80GB's by default)."""
    return SimMig(
        attributes=profiles[profile],
        gi=gi,
        ci=ci,
        uuid=deterministic_uuid("MIG", f"{seed}/gpu{gpu_minor}/gi{gi}/ci{ci}"),
        profile=profile,
        memory_mib=memory_mib,
        gi_cap_minor=gi_cap_minor(gpu_minor, gi),
        ci_cap_minor=ci_cap_minor(gpu_minor, gi, ci),
    )


def _h100x4() -> SimDriverSpec:
    return _h100("h100x4-550", ("18", "3B", "86", "AF"))


def _h100x8() -> SimDriverSpec:
    return _h100("h100x8-550", ("18", "2A", "3B", "5D", "9A", "AB", "BA", "DB"))


def _h100(
    label: str, buses: tuple[str, ...], migs: dict[int, tuple[SimMig, ...]] | None = None
) -> SimDriverSpec:
    gpus = tuple(
        SimGpu(
            minor=i,
            uuid=deterministic_uuid("GPU", f"{label}/gpu{i}"),
            pci_bus_id=f"00000000:{bus}:00.0",
            name="NVIDIA H100 80GB HBM3",
            brand="Nvidia",
            architecture="Hopper",
            compute_capability=(9, 0),
            memory_mib=81559,
            migs=(migs or {}).get(i, ()),
        )
        for i, bus in enumerate(buses)
    )
    return SimDriverSpec("550.54.15", "12.4", gpus, label=label)


def _h100x2_mig() -> SimDriverSpec:
    """Two HGX H100s, GPU 0 in MIG mode (3g.40gb, 2g.20gb, 1g.10gb), GPU 1 whole: Hopper has
    GPM, per GPU instance too (nvmlGpmMigSampleGet)."""
    seed = "h100x2-550-mig"
    migs = (
        mig_device(0, 2, 0, "3g.40gb", 40448, seed, H100_80GB_PROFILES),
        mig_device(0, 3, 0, "2g.20gb", 20096, seed, H100_80GB_PROFILES),
        mig_device(0, 9, 0, "1g.10gb", 9984, seed, H100_80GB_PROFILES),
    )
    return _h100(seed, ("18", "2A"), {0: migs})


def _a100x8_mig() -> SimDriverSpec:
    seed = "a100x8-570-mig"
    buses = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")
    migs: dict[int, tuple[SimMig, ...]] = {
        0: (
            mig_device(0, 1, 0, "3g.40gb", 40192, seed),
            mig_device(0, 5, 0, "2g.20gb", 19968, seed),
            mig_device(0, 13, 0, "1g.10gb", 9856, seed),
        ),
        1: (
            mig_device(1, 1, 0, "4g.40gb", 40192, seed),
            mig_device(1, 2, 0, "3g.40gb", 40192, seed),
        ),
    }
    gpus = tuple(
        SimGpu(
            minor=i,
            uuid=deterministic_uuid("GPU", f"{seed}/gpu{i}"),
            pci_bus_id=f"00000000:{bus}:00.0",
            name="NVIDIA A100-SXM4-80GB",
            brand="Nvidia",
            architecture="Ampere",
            compute_capability=(8, 0),
            memory_mib=81920,
            migs=migs.get(i, ()),
        )
        for i, bus in enumerate(buses)
    )
    return SimDriverSpec("570.86.15", "12.8", gpus, label=seed)


def _t4x1() -> SimDriverSpec:
    gpu = SimGpu(
        minor=0,
        uuid=deterministic_uuid("GPU", "t4x1-535/gpu0"),
        pci_bus_id="00000000:00:1E.0",
        name="Tesla T4",
        brand="Tesla",
        architecture="Turing",
        compute_capability=(7, 5),
        memory_mib=15360,
    )
    return SimDriverSpec("535.183.01", "12.2", (gpu,), label="t4x1-535")


def _l40s_vgpu_guest() -> SimDriverSpec:
    """A VM given one L40S-24Q vGPU (a VGA function, as QEMU presents it) by a host running
    vGPU manager 535.161.05 of branch r535_00; the guest driver is the matching 535.161.08."""
    gpu = SimGpu(
        minor=0,
        uuid=deterministic_uuid("GPU", "l40s-vgpu-guest/gpu0"),
        pci_bus_id="00000000:00:06.0",
        name="NVIDIA L40S-24Q",
        brand="NvidiaVWS",
        architecture="Ada",
        compute_capability=(8, 9),
        memory_mib=24576,
        virtualization_mode=VGPU_GUEST,
        vgpu_host=("535.161.05", "r535_00"),
        pci_class=0x030000,
    )
    return SimDriverSpec("535.161.08", "12.2", (gpu,), label="l40s-vgpu-guest")


def _bus(bus: str) -> str:
    return f"00000000:{bus}:00.0"


def _h100pcie_nvlink_pairs() -> SimDriverSpec:
    """8 H100 PCIe, NVLink-bridged in pairs (0-1, 2-3, 4-5, 6-7; 3 links each); each pair
    behind its own PCIe switch, GPUs 0-3 on NUMA node 0, 4-7 on node 1."""
    label = "h100pcie-x8-nvlink-pairs"
    buses = ("1B", "1C", "3D", "3E", "9B", "9C", "BD", "BE")
    gpus = tuple(
        SimGpu(
            minor=i,
            uuid=deterministic_uuid("GPU", f"{label}/gpu{i}"),
            pci_bus_id=_bus(bus),
            name="NVIDIA H100 PCIe",
            brand="Nvidia",
            architecture="Hopper",
            compute_capability=(9, 0),
            memory_mib=81559,
            numa_node=i // 4,
            pci_switch=i // 2,
            host_bridge=i // 4,
            nvlinks=(_bus(buses[i ^ 1]),) * 3,
        )
        for i, bus in enumerate(buses)
    )
    return SimDriverSpec("550.54.15", "12.4", gpus, label=label)


# The NVSwitches of an HGX H100 board (bus IDs as NVML reports them for the far end of a link).
NVSWITCH_BUS_IDS = tuple(_bus(b) for b in ("C3", "C4", "C5", "C6"))
NVSWITCH_LINKS_PER_GPU = 18


def _h100x8_nvswitch() -> SimDriverSpec:
    """8 H100 SXM5 on an HGX board: every GPU has 18 NVLinks, spread over the 4 NVSwitches
    (5, 4, 4, 5 as on the board), so each GPU reaches every other at full bandwidth. NVML
    reports each link's far end as an NVSwitch (remote device type SWITCH, its bus ID), never
    as a GPU. Two PCIe switches per NUMA node, two GPUs behind each."""
    label = "h100x8-nvswitch"
    buses = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
    per_switch = (5, 4, 4, 5)
    links = tuple(sw for sw, n in zip(NVSWITCH_BUS_IDS, per_switch, strict=True) for _ in range(n))
    gpus = tuple(
        SimGpu(
            minor=i,
            uuid=deterministic_uuid("GPU", f"{label}/gpu{i}"),
            pci_bus_id=_bus(bus),
            name="NVIDIA H100 80GB HBM3",
            brand="Nvidia",
            architecture="Hopper",
            compute_capability=(9, 0),
            memory_mib=81559,
            numa_node=i // 4,
            pci_switch=i // 2,
            host_bridge=i // 4,
            nvlinks=links,
        )
        for i, bus in enumerate(buses)
    )
    return SimDriverSpec("550.54.15", "12.4", gpus, label=label)


def _l40sx8_pcie() -> SimDriverSpec:
    """8 L40S, no NVLink: two PCIe switches of 4 GPUs, one per NUMA node and host bridge."""
    label = "l40sx8-pcie"
    buses = ("16", "17", "18", "19", "96", "97", "98", "99")
    gpus = tuple(
        SimGpu(
            minor=i,
            uuid=deterministic_uuid("GPU", f"{label}/gpu{i}"),
            pci_bus_id=_bus(bus),
            name="NVIDIA L40S",
            brand="Nvidia",
            architecture="Ada",
            compute_capability=(8, 9),
            memory_mib=46068,
            numa_node=i // 4,
            pci_switch=i // 4,
            host_bridge=i // 4,
        )
        for i, bus in enumerate(buses)
    )
    return SimDriverSpec("550.54.15", "12.4", gpus, label=label)


def _mixed_ecc() -> SimDriverSpec:
    """A workstation-like node: an ECC GPU, a GeForce without ECC (XID events only) and one
    whose NVML delivers no events at all (it is only asked whether it still answers)."""
    label = "mixed-ecc-x3"
    models = (
        ("NVIDIA L40S", "Nvidia", (8, 9), 46068, ECC_GPU_EVENTS),
        ("NVIDIA GeForce RTX 4090", "GeForceRTX", (8, 9), 24564, EVENT_XID),
        ("NVIDIA GeForce RTX 4090", "GeForceRTX", (8, 9), 24564, 0),
    )
    vga = 0x030000  # GeForce cards are VGA controllers; the L40S a 3D controller
    gpus = tuple(
        SimGpu(
            minor=i,
            uuid=deterministic_uuid("GPU", f"{label}/gpu{i}"),
            pci_bus_id=_bus(bus),
            name=name,
            brand=brand,
            architecture="Ada",
            compute_capability=cc,
            memory_mib=memory,
            supported_events=events,
            pci_class=vga if brand == "GeForceRTX" else 0x030200,
        )
        for i, (bus, (name, brand, cc, memory, events)) in enumerate(
            zip(("01", "21", "41"), models, strict=True)
        )
    )
    return SimDriverSpec("550.54.15", "12.4", gpus, label=label)


PRESETS = {
    "mixed-ecc-x3": _mixed_ecc,
    "h100pcie-x8-nvlink-pairs": _h100pcie_nvlink_pairs,
    "h100x8-nvswitch": _h100x8_nvswitch,
    "l40sx8-pcie": _l40sx8_pcie,
    "h100x4-550": _h100x4,
    "h100x8-550": _h100x8,
    "a100x8-570-mig": _a100x8_mig,
    "h100x2-550-mig": _h100x2_mig,
    "t4x1-535": _t4x1,
    "l40s-vgpu-guest": _l40s_vgpu_guest,
}


def preset(name: str) -> SimDriverSpec:
    try:
        make = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown simdriver preset {name!r}; known: {sorted(PRESETS)}") from None
    spec = make()
    spec.validate()
    return spec
