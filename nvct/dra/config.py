"""A claim's opaque configuration for nvct's driver: ``dra.nvct.io/v1alpha1``, NVIDIA's shape.

A ResourceClaim (or its DeviceClass) may carry ``{"driver": "gpu.nvct.io", "parameters":
{...}}`` for some or all of its requests. nvct reads::

    apiVersion: dra.nvct.io/v1alpha1
    kind: GpuConfig            # whole GPUs; MigDeviceConfig for MIG devices (MPS, or
                               # TimeSlicing without an interval: a MIG device has none)
    sharing:
      strategy: TimeSlicing    # or MPS
      timeSlicingConfig: {interval: Default}   # Short, Medium, Long
      # with strategy MPS instead (every field optional):
      mpsConfig:
        defaultActiveThreadPercentage: 50       # 1..100, each client's share of the SMs
        defaultPinnedDeviceMemoryLimit: 10Gi    # each client's device memory, per GPU
        defaultPerDevicePinnedMemoryLimit:      # per GPU: its device name or UUID
          gpu-1: 20Gi

A claim's devices are given to every container of every pod that references the claim: that
is how pods share a GPU under DRA; ``sharing`` says how they share it. ``TimeSlicing`` at the
``Default`` interval is what a GPU does when several processes use it, and changes nothing on
the node; another interval is set on the claim's GPUs at prepare (``nvct.dra.timeslice``) and
Default restored at unprepare. ``MPS`` gets the claim an MPS control daemon of its own for its
GPUs, with these limits (NVIDIA's DRA driver's ``MpsConfig`` fields; its per-device keys may
also be an index into the claim's devices, which nvct refuses: the claim's order is not one a
user sees). Anything that is not the shape above is refused at prepare with one line, so a
typo never silently gives a claim the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nvct.base.errors import NvctError
from nvct.dra.quantity import QuantityError, mebibytes

API_GROUP = "dra.nvct.io"
API_VERSION = f"{API_GROUP}/v1alpha1"
KINDS = {"GpuConfig": "gpu", "MigDeviceConfig": "mig"}
STRATEGIES = ("TimeSlicing", "MPS")
INTERVALS = ("Default", "Short", "Medium", "Long")


class ClaimConfigError(NvctError):
    """A claim's opaque configuration is not one nvct can apply."""


@dataclass(frozen=True, slots=True)
class MpsConfig:
    """A claim's MPS limits, as given (checked against its devices at prepare)."""

    threads: int | None = None  # defaultActiveThreadPercentage
    pinned_mib: int | None = None  # defaultPinnedDeviceMemoryLimit, MiB
    per_device: tuple[tuple[str, int], ...] = ()  # (device name or UUID, MiB)


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """What a claim's configuration asks of its devices."""

    kind: str = ""  # gpu | mig; "" when no configuration was given
    sharing: str = "TimeSlicing"
    mps: MpsConfig | None = None  # strategy MPS only
    interval: str = "Default"  # strategy TimeSlicing only


def parse_config(parameters: Any, *, where: str) -> DeviceConfig:
    """The configuration in ``parameters`` (``where`` names it in messages: the claim and the
    index of its config entry).

    Raises:
        ClaimConfigError: not ``dra.nvct.io/v1alpha1``, an unknown kind, field or strategy, or
            a strategy nvct does not apply.
    """
    if not isinstance(parameters, Mapping):
        raise ClaimConfigError(f"{where}: parameters must be an object, not {parameters!r}")
    version = parameters.get("apiVersion")
    if version != API_VERSION:
        raise ClaimConfigError(
            f"{where}: apiVersion {version!r} is not {API_VERSION}",
            hint=f"write apiVersion: {API_VERSION}",
        )
    kind = parameters.get("kind")
    if kind not in KINDS:
        raise ClaimConfigError(
            f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}", hint="fix the kind"
        )
    _only(parameters, {"apiVersion", "kind", "sharing"}, where)
    sharing = parameters.get("sharing") or {}
    if not isinstance(sharing, Mapping):
        raise ClaimConfigError(f"{where}: sharing must be an object")
    _only(sharing, {"strategy", "timeSlicingConfig", "mpsConfig"}, f"{where}: sharing")
    strategy = sharing.get("strategy", "TimeSlicing")
    if strategy not in STRATEGIES:
        raise ClaimConfigError(
            f"{where}: sharing strategy {strategy!r} is not one of {', '.join(STRATEGIES)}",
            hint="write strategy: TimeSlicing or MPS",
        )
    if strategy == "MPS":
        if "timeSlicingConfig" in sharing:
            raise ClaimConfigError(f"{where}: timeSlicingConfig is given with strategy MPS")
        mps = _mps(sharing.get("mpsConfig") or {}, f"{where}: mpsConfig")
        return DeviceConfig(KINDS[kind], strategy, mps)
    if KINDS[kind] == "mig":
        # The processes on a MIG device share it as on a GPU; its interval is its GPU's.
        if "timeSlicingConfig" in sharing:
            raise ClaimConfigError(
                f"{where}: a MIG device has no time-slice interval of its own (its GPU's is "
                "every MIG device's)",
                hint="drop timeSlicingConfig from the MigDeviceConfig",
            )
        if "mpsConfig" in sharing:
            raise ClaimConfigError(f"{where}: mpsConfig is given with strategy TimeSlicing")
        return DeviceConfig(KINDS[kind], strategy)
    slicing = sharing.get("timeSlicingConfig") or {}
    if not isinstance(slicing, Mapping):
        raise ClaimConfigError(f"{where}: timeSlicingConfig must be an object")
    _only(slicing, {"interval"}, f"{where}: timeSlicingConfig")
    interval = slicing.get("interval", "Default")
    if interval not in INTERVALS:
        raise ClaimConfigError(
            f"{where}: time-slice interval {interval!r} is not one of {', '.join(INTERVALS)}"
        )
    if "mpsConfig" in sharing:
        raise ClaimConfigError(f"{where}: mpsConfig is given with strategy TimeSlicing")
    return DeviceConfig(KINDS[kind], strategy, interval=interval)


def _mps(table: Any, where: str) -> MpsConfig:
    if not isinstance(table, Mapping):
        raise ClaimConfigError(f"{where} must be an object")
    fields = {
        "defaultActiveThreadPercentage",
        "defaultPinnedDeviceMemoryLimit",
        "defaultPerDevicePinnedMemoryLimit",
    }
    _only(table, fields, where)
    threads = table.get("defaultActiveThreadPercentage")
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 100
    ):
        raise ClaimConfigError(
            f"{where}: defaultActiveThreadPercentage {threads!r} is not a whole number from 1 "
            "to 100",
            hint="write a percentage of the GPU's SMs, e.g. 50",
        )
    pinned = table.get("defaultPinnedDeviceMemoryLimit")
    default = None if pinned is None else _limit(pinned, f"{where}: defaultPinnedDeviceMemoryLimit")
    per = table.get("defaultPerDevicePinnedMemoryLimit") or {}
    if not isinstance(per, Mapping):
        raise ClaimConfigError(
            f"{where}: defaultPerDevicePinnedMemoryLimit must map devices to quantities"
        )
    per_device = []
    for key, value in per.items():
        name = str(key)
        if name.isdigit():
            raise ClaimConfigError(
                f"{where}: defaultPerDevicePinnedMemoryLimit key {name!r} is an index",
                hint="name the device (gpu-1) or its UUID: a claim's device order is not one "
                "you see",
            )
        per_device.append(
            (name, _limit(value, f"{where}: defaultPerDevicePinnedMemoryLimit {name}"))
        )
    return MpsConfig(threads, default, tuple(per_device))


def _limit(value: Any, where: str) -> int:
    """A pinned-memory limit in MiB (at least 1: MPS takes whole MiB)."""
    try:
        mib = mebibytes(value)
    except QuantityError as err:
        raise ClaimConfigError(f"{where}: {err}", hint="write a quantity, e.g. 10Gi") from err
    if mib < 1:
        raise ClaimConfigError(f"{where}: {value!r} is less than 1Mi", hint="write at least 1Mi")
    return mib


def _only(table: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ClaimConfigError(
            f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})",
            hint="fix the field's name",
        )
