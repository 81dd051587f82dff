"""A claim's opaque configuration for nvct's driver: ``dra.nvct.io/v1alpha1``, NVIDIA's shape.

A ResourceClaim (or its DeviceClass) may carry ``{"driver": "gpu.nvct.io", "parameters":
{...}}`` for some or all of its requests. nvct reads::

    apiVersion: dra.nvct.io/v1alpha1
    kind: GpuConfig            # whole GPUs; MigDeviceConfig for MIG devices
    sharing:
      strategy: TimeSlicing    # or MPS
      timeSlicingConfig: {interval: Default}

A claim's devices are given to every container of every pod that references the claim: that
is how pods share a GPU under DRA; ``sharing`` says how they share it. ``TimeSlicing`` at the
``Default`` interval is what a GPU does when several processes use it, and changes nothing on
the node. Other intervals (set through ``nvidia-smi compute-policy`` by NVIDIA's driver) and
``MPS`` (a control daemon per claim) are refused at prepare with one line saying so: nvct does
not pretend to apply them. Anything else that is not the shape above is refused the same way,
so a typo never silently gives a claim the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nvct.base.errors import NvctError

API_GROUP = "dra.nvct.io"
API_VERSION = f"{API_GROUP}/v1alpha1"
KINDS = {"GpuConfig": "gpu", "MigDeviceConfig": "mig"}
STRATEGIES = ("TimeSlicing", "MPS")
INTERVALS = ("Default", "Short", "Medium", "Long")


class ClaimConfigError(NvctError):
    """A claim's opaque configuration is not one nvct can apply."""


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """What a claim's configuration asks of its devices."""

    kind: str = ""  # gpu | mig; "" when no configuration was given
    sharing: str = "TimeSlicing"


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
        raise ClaimConfigError(
            f"{where}: sharing strategy MPS is not applied per claim by nvct-dra-plugin yet",
            hint="use TimeSlicing, or the device plugin's MPS sharing on nodes that need MPS",
        )
    if KINDS[kind] == "mig":
        raise ClaimConfigError(
            f"{where}: a MIG device cannot be time-sliced with other MIG devices' work; "
            "MigDeviceConfig takes only MPS",
            hint="drop the config for MIG devices (a MIG device is already a share of a GPU)",
        )
    slicing = sharing.get("timeSlicingConfig") or {}
    if not isinstance(slicing, Mapping):
        raise ClaimConfigError(f"{where}: timeSlicingConfig must be an object")
    _only(slicing, {"interval"}, f"{where}: timeSlicingConfig")
    interval = slicing.get("interval", "Default")
    if interval not in INTERVALS:
        raise ClaimConfigError(
            f"{where}: time-slice interval {interval!r} is not one of {', '.join(INTERVALS)}"
        )
    if interval != "Default":
        raise ClaimConfigError(
            f"{where}: time-slice interval {interval} is not set by nvct-dra-plugin (the "
            "GPU's scheduler runs at its default)",
            hint="use interval: Default, or leave timeSlicingConfig out",
        )
    if "mpsConfig" in sharing:
        raise ClaimConfigError(f"{where}: mpsConfig is given with strategy TimeSlicing")
    return DeviceConfig(KINDS[kind], strategy)


def _only(table: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ClaimConfigError(
            f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})",
            hint="fix the field's name",
        )
