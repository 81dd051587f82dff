"""Which GPUs are shared, how, and with how many replicas: ``[device-plugin.sharing]`` against
this host's GPUs.

The device plugin advertises from this plan, ``nvct-cli labels`` labels from it and doctor
checks it, so the three always agree. Rules select GPUs **per GPU** (NVIDIA's plugin shares every
GPU of a node alike): by index (``"0"``; ``"0:1"`` for a MIG device), UUID, product name
(``"NVIDIA H100 80GB HBM3"``, case-insensitive), ``"all"``, or, as NVIDIA's config does, the
resource its devices are advertised under whole (``"nvidia.com/mig-1g.10gb"``). A MIG device
is shareable only when the device plugin advertises it (``mig-strategy`` single or mixed), and
only by time-slicing; selecting a MIG-enabled GPU selects its MIG devices.

Errors are one line naming the rule and the fix. A selector that matches no GPU is a warning,
not an error: one config is shipped to every node of a cluster, and nodes differ.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nvct.base.errors import ConfigError
from nvct.config import Config
from nvct.config.kubernetes import SharingRule
from nvct.host.inventory import Inventory

TIME_SLICING = "time-slicing"
MPS = "mps"
SHARED_SUFFIX = ".shared"
VENDOR = "nvidia.com"
# MPS clients per GPU (CUDA MPS documentation): 48 from Volta's successor Turing (7.5) on.
MPS_MAX_CLIENTS = 48
MPS_MAX_CLIENTS_OLD = 16
MPS_CONTROL = "nvidia-cuda-mps-control"


class SharingConfigError(ConfigError):
    """The sharing rules cannot be applied to this host's GPUs."""


@dataclass(frozen=True, slots=True)
class Shareable:
    """A device the plugin can advertise: a whole GPU, or a MIG device."""

    uuid: str
    index: str  # "0", or "0:1" for a MIG device
    name: str  # the product name (MIG: the parent GPU's)
    gpu: int  # the physical GPU's index
    memory_mib: int
    compute_capability: str
    profile: str = ""  # MIG devices only
    parent: str = ""  # MIG devices only: the GPU's UUID

    @property
    def is_mig(self) -> bool:
        """Whether this is a MIG device."""
        return bool(self.profile)

    def describe(self) -> str:
        """How messages name it."""
        kind = f"MIG device {self.index}" if self.is_mig else f"GPU {self.index}"
        return f"{kind} ({self.uuid}, {self.name})"


@dataclass(frozen=True, slots=True)
class Share:
    """How one device is shared."""

    device: Shareable
    strategy: str  # time-slicing | mps
    replicas: int
    resource: str  # where it is advertised, after "nvidia.com/": gpu, gpu.shared, gpu.mps...
    base: str  # where it would be advertised whole: gpu, mig-1g.10gb
    rule: int  # 1-based, as messages name rules
    pinned_memory_mib: int = 0  # mps only
    active_thread_percentage: int = 0  # mps only

    @property
    def renamed(self) -> bool:
        """Advertised apart from the whole devices of its kind."""
        return self.resource != self.base


@dataclass(frozen=True, slots=True)
class SharingPlan:
    """Every shared device by UUID (devices not in it stay whole), and what to warn about."""

    shares: dict[str, Share]
    warnings: tuple[str, ...] = ()

    def strategy_of(self, uuid: str) -> str:
        """``none``, ``time-slicing`` or ``mps``."""
        share = self.shares.get(uuid)
        return share.strategy if share else "none"


def shareable(inventory: Inventory, mig_strategy: str) -> list[Shareable]:
    """The devices the device plugin advertises under ``mig_strategy``."""
    out: list[Shareable] = []
    for gpu in inventory.gpus:
        common = (gpu.name, gpu.index)
        if not gpu.mig_enabled:
            out.append(
                Shareable(gpu.uuid, str(gpu.index), *common, gpu.memory_mib, gpu.compute_capability)
            )
        elif mig_strategy != "none":
            out.extend(
                Shareable(
                    m.uuid,
                    f"{gpu.index}:{m.index}",
                    *common,
                    m.memory_mib,
                    gpu.compute_capability,
                    m.profile,
                    gpu.uuid,
                )
                for m in gpu.migs
            )
    return out


def selects(selector: str, device: Shareable, mig_strategy: str = "none") -> bool:
    """Whether a rule's ``devices`` entry names ``device`` (a resource name, NVIDIA's form:
    every device advertised whole under it with ``mig_strategy``)."""
    if selector.startswith(f"{VENDOR}/"):
        return base_resource(device, mig_strategy) == selector.partition("/")[2]
    if selector == "all" or selector in (device.uuid, device.index):
        return True
    if selector.casefold() == device.name.casefold():
        return True
    # the parent GPU named by index or UUID selects its MIG devices
    return device.is_mig and selector in (str(device.gpu), device.parent)


def plan_sharing(config: Config, inventory: Inventory) -> SharingPlan:
    """The sharing plan of this host.

    Raises:
        SharingConfigError: a device matched by two rules, MPS on a MIG device or with
            mig-strategy mixed, MPS replicas above the GPU's client limit, MPS limits beyond
            the GPU, or MPS settings on a time-slicing rule.
    """
    mig = config.device_plugin.mig_strategy
    devices = shareable(inventory, mig)
    shares: dict[str, Share] = {}
    warnings: list[str] = []
    for number, rule in enumerate(config.device_plugin.sharing.gpus, start=1):
        where = f"[[device-plugin.sharing.gpus]] rule {number} (devices {list(rule.devices)})"
        _check_rule(rule, where, config.device_plugin.mig_strategy)
        for selector in rule.devices:
            if not any(selects(selector, d, mig) for d in devices):
                warnings.append(
                    f"{where}: {selector!r} matches no GPU on this node "
                    f"(GPUs: {', '.join(f'{d.index} {d.name}' for d in devices) or 'none'})"
                )
        for device in devices:
            if not any(selects(s, device, mig) for s in rule.devices):
                continue
            if device.uuid in shares:
                raise SharingConfigError(
                    f"{where}: {device.describe()} is matched by rule "
                    f"{shares[device.uuid].rule} too",
                    hint="make the rules' devices disjoint (one rule per GPU)",
                )
            shares[device.uuid] = _share(rule, device, number, where, config)
    sliced = {s.device.gpu for s in shares.values() if s.resource == "gpu" and not s.device.is_mig}
    whole = [d for d in devices if not d.is_mig and d.uuid not in shares]
    if sliced and whole:
        warnings.append(
            f"GPU(s) {', '.join(map(str, sorted(sliced)))} are shared inside nvidia.com/gpu "
            "beside whole GPUs: a pod asking for nvidia.com/gpu may get either (set "
            "rename-by-default = true to advertise the shared ones as nvidia.com/gpu.shared, "
            "or give their rule a resource of its own)"
        )
    warnings += _mixed_strategies(shares.values())
    return SharingPlan(shares, tuple(warnings))


def _mixed_strategies(shares: Iterable[Share]) -> list[str]:
    """Time-slicing and MPS GPUs in one resource: a pod cannot choose which it gets."""
    by_resource: dict[str, set[str]] = {}
    for s in shares:
        by_resource.setdefault(s.resource, set()).add(s.strategy)
    return [
        f"time-slicing and MPS GPUs share the resource {VENDOR}/{name}: a pod cannot choose "
        f'which it gets (give one rule a resource of its own, e.g. resource = "{VENDOR}/gpu.mps")'
        for name, kinds in sorted(by_resource.items())
        if len(kinds) > 1
    ]


def _check_rule(rule: SharingRule, where: str, mig_strategy: str) -> None:
    if rule.resource is not None and rule.resource.startswith(f"{VENDOR}/mig-"):
        raise SharingConfigError(
            f"{where}: resource {rule.resource} looks like a MIG profile's resource",
            hint=f"choose another name, e.g. {VENDOR}/gpu.mps",
        )
    if rule.strategy == MPS and mig_strategy == "mixed":
        raise SharingConfigError(
            f"{where}: strategy mps with mig-strategy mixed",
            hint="MPS shares whole GPUs: use mig-strategy none, or strategy time-slicing",
        )
    limits = rule.pinned_memory_mib is not None or rule.active_thread_percentage is not None
    if rule.strategy != MPS and limits:
        raise SharingConfigError(
            f"{where}: pinned-memory-mib and active-thread-percentage are MPS limits",
            hint='remove them, or set strategy = "mps"',
        )


def _resource(rule: SharingRule, device: Shareable, where: str, config: Config) -> str:
    """Where ``device``'s replicas are advertised (after "nvidia.com/")."""
    base = base_resource(device, config.device_plugin.mig_strategy)
    if rule.resource is not None:
        if device.is_mig:
            raise SharingConfigError(
                f"{where}: resource {rule.resource} for {device.describe()}",
                hint="MIG devices keep their profile's resource: use rename = true instead",
            )
        return rule.resource.partition("/")[2]
    renamed = config.device_plugin.sharing.rename_by_default if rule.rename is None else rule.rename
    return base + SHARED_SUFFIX if renamed else base


def base_resource(device: Shareable, mig_strategy: str) -> str:
    """Where ``device`` is advertised whole (after "nvidia.com/")."""
    return mig_resource(device.profile) if device.is_mig and mig_strategy == "mixed" else "gpu"


def mig_resource(profile: str) -> str:
    """A MIG profile's resource under ``mixed`` (after "nvidia.com/"): ``mig-1g.10gb``."""
    return f"mig-{profile}"


def single_fits(inventory: Inventory) -> bool:
    """Whether ``single`` can advertise these GPUs' MIG devices as ``nvidia.com/gpu``: every GPU
    in MIG mode, all with one profile."""
    profiles = {m.profile for g in inventory.gpus if g.mig_enabled for m in g.migs}
    return len(profiles) == 1 and all(g.mig_enabled for g in inventory.gpus)


def _share(rule: SharingRule, device: Shareable, number: int, where: str, config: Config) -> Share:
    resource = _resource(rule, device, where, config)
    base = base_resource(device, config.device_plugin.mig_strategy)
    if rule.strategy != MPS:
        return Share(device, TIME_SLICING, rule.replicas, resource, base, number)
    if device.is_mig:
        raise SharingConfigError(
            f"{where}: strategy mps on {device.describe()}",
            hint="MPS shares whole GPUs only: select GPUs not in MIG mode, or use time-slicing",
        )
    limit = mps_max_replicas(device.compute_capability)
    if rule.replicas > limit:
        raise SharingConfigError(
            f"{where}: {rule.replicas} MPS replicas of {device.describe()}, compute "
            f"capability {device.compute_capability}",
            hint=f"use at most {limit} replicas (MPS's client limit on this GPU)",
        )
    memory = rule.pinned_memory_mib or device.memory_mib // rule.replicas
    if memory > device.memory_mib:
        raise SharingConfigError(
            f"{where}: pinned-memory-mib {memory} exceeds {device.describe()}'s "
            f"{device.memory_mib} MiB",
            hint=f"use at most {device.memory_mib}, or leave it out (memory / replicas)",
        )
    threads = rule.active_thread_percentage or max(1, 100 // rule.replicas)
    return Share(device, MPS, rule.replicas, resource, base, number, memory, threads)


def mps_max_replicas(compute_capability: str) -> int:
    """MPS's client limit per GPU: 48 on compute capability 7.5 and later, else 16."""
    major, _, minor = compute_capability.partition(".")
    try:
        cc = (int(major), int(minor or 0))
    except ValueError:
        return MPS_MAX_CLIENTS_OLD
    return MPS_MAX_CLIENTS if cc >= (7, 5) else MPS_MAX_CLIENTS_OLD


def mps_control_binary(driver_root: Path) -> Path | None:
    """The driver's ``nvidia-cuda-mps-control`` under ``driver_root``, or None."""
    for bindir in ("usr/bin", "usr/local/bin", "bin", "usr/sbin"):
        path = driver_root / bindir / MPS_CONTROL
        if os.access(path, os.X_OK):
            return path
    return None
