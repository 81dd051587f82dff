"""What one sampling round found: plain values the collector renders."""

from __future__ import annotations

from dataclasses import dataclass, field

from nvct.kubeapi.podresources.ids import Owner


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """A GPU's dcgm-exporter labels (besides the pod ones)."""

    index: int
    uuid: str
    pci_bus_id: str
    device: str  # nvidia<minor>
    model: str


@dataclass(frozen=True, slots=True)
class Reading:
    """NVML's answers for one GPU; None where it did not answer (not supported, or an error)."""

    util: float | None = None  # %
    mem_copy_util: float | None = None  # %
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    error: str = ""  # why NVML did not answer for this GPU at all (e.g. GPU_IS_LOST)


@dataclass(frozen=True, slots=True)
class XidSeen:
    """XIDs the exporter received for one GPU since it started."""

    last: int = 0  # the latest XID's code; 0 when none came
    counts: dict[int, int] = field(default_factory=dict)  # code -> how many
    seen_at: dict[int, float] = field(default_factory=dict)  # code -> last time (monotonic)


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU in one round."""

    gpu: GpuIdentity
    reading: Reading
    xids: XidSeen
    healthy: bool
    reason: str  # why not healthy; "" when healthy
    replicas: int
    owners: tuple[Owner, ...]  # empty: no container holds it


@dataclass(frozen=True, slots=True)
class Sample:
    """One round: every GPU, when it finished (monotonic) and how long it took."""

    gpus: tuple[GpuSample, ...]
    finished_at: float
    duration_s: float
    pod_resources_up: bool | None  # None: pod attribution is off
