"""What one sampling round found: plain values the collector renders."""

from __future__ import annotations

from dataclasses import dataclass, field

from nvct.exporter.usage import Usage
from nvct.kubeapi.podresources.ids import Owner


@dataclass(frozen=True, slots=True)
class MigIdentity:
    """A MIG device's own labels: dcgm-exporter's GPU_I_ID and GPU_I_PROFILE."""

    uuid: str
    gi: int
    profile: str  # 3g.40gb


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """A GPU's dcgm-exporter labels (besides the pod ones)."""

    index: int
    uuid: str
    pci_bus_id: str
    device: str  # nvidia<minor>
    model: str
    migs: tuple[MigIdentity, ...] = ()


@dataclass(frozen=True, slots=True)
class MigReading:
    """What NVML answers for one MIG device (``fields.COUNTERS`` with ``per_mig``)."""

    mig: MigIdentity
    values: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reading:
    """NVML's answers for one GPU: dcgm-exporter field name -> value, absent where NVML did
    not answer (not supported, or an error this round)."""

    values: dict[str, float] = field(default_factory=dict)
    migs: tuple[MigReading, ...] = ()
    error: str = ""  # why NVML did not answer for this GPU at all (e.g. GPU_IS_LOST)


@dataclass(frozen=True, slots=True)
class XidSeen:
    """XIDs the exporter received for one GPU since it started."""

    last: int = 0  # the latest XID's code; 0 when none came
    counts: dict[int, int] = field(default_factory=dict)  # code -> how many
    seen_at: dict[int, float] = field(default_factory=dict)  # code -> last time (monotonic)
    recent: tuple[tuple[float, int], ...] = ()  # (monotonic time, code) within the XID window

    def in_window(self, now: float, window_s: float) -> dict[int, int]:
        """Code -> how many came in the last ``window_s`` (DCGM_EXP_XID_ERRORS_COUNT)."""
        out: dict[int, int] = {}
        for at, code in self.recent:
            if now - at <= window_s:
                out[code] = out.get(code, 0) + 1
        return out


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
    mig_owners: dict[str, tuple[Owner, ...]] = field(default_factory=dict)  # MIG UUID -> holders
    # a shared GPU's per-container use (its processes'); None: not measured (whole GPU, off)
    usage: dict[Owner, Usage] | None = None
    # in MIG mode, each MIG device's per-container use (MIG UUID -> ...); None: not measured
    mig_usage: dict[str, dict[Owner, Usage]] | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    """One round: every GPU, when it finished (monotonic) and how long it took."""

    gpus: tuple[GpuSample, ...]
    finished_at: float
    duration_s: float
    pod_resources_up: bool | None  # None: pod attribution is off
