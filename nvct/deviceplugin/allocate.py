"""Allocate: what a container gets for the devices kubelet chose, per device-list strategy.

- ``envvar``: ``NVIDIA_VISIBLE_DEVICES=<ids>`` (UUIDs or indices by ``id-strategy``);
- ``volume-mounts``: ``NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`` and one
  mount ``/dev/null`` -> ``/var/run/nvidia-container-devices/<id>`` per device;
- ``cdi-annotations``: ``cdi.k8s.io/nvct-device-plugin_<resource>`` = the CDI names;
- ``cdi-cri`` (default): the CDI names in ``cdi_devices`` (containerd >= 1.7, CRI-O, with CDI).

CDI names are the devices of the spec the plugin wrote (``nvidia.com/gpu=<uuid>``, or the
index name where the spec has no UUID name). nvct-runtime resolves every form itself, so
engines without CDI support get the same devices. A device never advertised, or unhealthy, is
refused; a container never gets more than kubelet asked for.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from nvct.base.errors import NvctError
from nvct.deviceplugin.devices import PluginDevice
from nvct.deviceplugin.health import HEALTHY

STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_MOUNT_DIR = "/var/run/nvidia-container-devices"
CDI_KIND = "nvidia.com/gpu"
ANNOTATION_PREFIX = "cdi.k8s.io/"


class AllocationError(NvctError):
    """kubelet asked for devices this plugin cannot give."""

    def __init__(self, message: str, *, unhealthy: bool = False) -> None:
        super().__init__(message)
        self.unhealthy = unhealthy


@dataclass(frozen=True, slots=True)
class Answer:
    """One container's allocation."""

    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[tuple[str, str]] = field(default_factory=list)  # (host, container), read-only
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[str] = field(default_factory=list)


def allocate(
    ids: Sequence[str],
    devices: Mapping[str, PluginDevice],
    health: Mapping[str, str],
    *,
    resource: str,
    strategies: Sequence[str],
    id_strategy: str,
    cdi_names: Collection[str],
) -> Answer:
    """The answer for one container request.

    Raises:
        AllocationError: an unknown or unhealthy device, or none asked.
    """
    if not ids:
        raise AllocationError(f"no {resource} device asked for")
    unknown = [i for i in ids if i not in devices]
    if unknown:
        raise AllocationError(
            f"unknown {resource} device {unknown[0]!r}: this plugin advertised "
            f"{', '.join(sorted(devices)[:8])}"
        )
    sick = [i for i in ids if health.get(i, HEALTHY) != HEALTHY]
    if sick:
        raise AllocationError(f"{resource} device {sick[0]} is unhealthy", unhealthy=True)
    chosen = [devices[i] for i in dict.fromkeys(ids)]
    visible = [d.uuid if id_strategy == "uuid" else d.index for d in chosen]
    answer = Answer()
    if "envvar" in strategies:
        answer.envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(visible)
    if "volume-mounts" in strategies:
        answer.envs["NVIDIA_VISIBLE_DEVICES"] = DEVICE_MOUNT_DIR
        answer.mounts.extend(("/dev/null", f"{DEVICE_MOUNT_DIR}/{v}") for v in visible)
    if not {"cdi-annotations", "cdi-cri"} & set(strategies):
        return answer
    names = [_cdi_name(d, cdi_names) for d in chosen]
    if "cdi-annotations" in strategies:
        key = f"{ANNOTATION_PREFIX}nvct-device-plugin_{resource.split('/', 1)[1]}"
        answer.annotations[key] = ",".join(names)
    if "cdi-cri" in strategies:
        answer.cdi_devices.extend(names)
    return answer


def _cdi_name(device: PluginDevice, names: Collection[str]) -> str:
    by_uuid = f"{CDI_KIND}={device.uuid}"
    if by_uuid in names:
        return by_uuid
    by_index = f"{CDI_KIND}={device.index}"
    if by_index in names:
        return by_index
    raise AllocationError(
        f"the CDI spec names no device {device.uuid} (nor {device.index})",
        unhealthy=True,
    )
