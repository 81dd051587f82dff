"""Allocate: what a container gets for the devices kubelet chose, per device-list strategy.

- ``envvar``: ``NVIDIA_VISIBLE_DEVICES=<ids>``;
- ``volume-mounts``: ``NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`` and one
  mount ``/dev/null`` -> ``/var/run/nvidia-container-devices/<id>`` per device;
- ``cdi-annotations``: ``<prefix>nvct-device-plugin_<resource>`` = the CDI names (prefix
  ``cdi.k8s.io/``, NVIDIA's ``cdi-annotation-prefix``);
- ``cdi-cri`` (default): the CDI names in ``cdi_devices`` (containerd >= 1.7, CRI-O, with CDI).

The kubelet's IDs are UUIDs; ``id-strategy`` says what the container is told: UUIDs, or
indices (``0``, ``gpu:mig`` for MIG), in every form (NVIDIA's
uniqueDeviceIDsFromAnnotatedDeviceIDs). CDI names are the devices of the spec the plugin
wrote, of its own kind (``k8s.device-plugin.nvct.io/gpu=<uuid>`` or ``=<index>``).
nvct-runtime resolves every form itself, so engines without CDI support get the same devices.
With ``pass-device-specs`` every form also names the device nodes in ``devices`` (the GPU's,
a MIG device's capabilities, the control nodes the host has), read-write, as NVIDIA's
apiDeviceSpecs: what the kubelet's CPU manager needs to keep the devices across its updates.
A device never advertised, or unhealthy, is refused; a container never gets more than kubelet
asked for.

Replicas (``<uuid>::<n>``) are stripped to their GPU and de-duplicated. A container given two
replicas of one GPU is told, never silently: refused (``replicas-of-one-gpu = "error"``), or
given ``NVCT_SHARED_GPU_REPLICAS=<uuid>=<n>`` and a warning logged (``"warn"``). A request of
more than one shared device is refused with ``fail-requests-greater-than-one``, and always on
MPS GPUs. An MPS GPU's container gets its daemon's pipe directory (read-write) and
``CUDA_MPS_PIPE_DIRECTORY`` pointing at it, and the daemon's shared memory as ``/dev/shm``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from nvct.base.errors import NvctError
from nvct.cdi.names import PLUGIN_KIND
from nvct.node.devices import PluginDevice
from nvct.node.health.state import HEALTHY
from nvct.node.mps import CONTAINER_SHM, MpsPaths

DEVICE_MOUNT_DIR = "/var/run/nvidia-container-devices"
ANNOTATION_PREFIX = "cdi.k8s.io/"
REPLICAS_ENV = "NVCT_SHARED_GPU_REPLICAS"
MPS_PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"


class AllocationError(NvctError):
    """kubelet asked for devices this plugin cannot give."""

    def __init__(self, message: str, *, unhealthy: bool = False, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.unhealthy = unhealthy


@dataclass(frozen=True, slots=True)
class Answer:
    """One container's allocation."""

    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[tuple[str, str]] = field(default_factory=list)  # (host, container), read-only
    writable: list[tuple[str, str]] = field(default_factory=list)  # (host, container)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[str] = field(default_factory=list)
    devices: list[tuple[str, str]] = field(default_factory=list)  # (host, container) nodes, rw
    warnings: list[str] = field(default_factory=list)  # logged by the server


@dataclass(frozen=True, slots=True)
class SharingPolicy:
    """``[device-plugin.sharing]``'s say in Allocate."""

    fail_greater_than_one: bool = False
    replicas_of_one_gpu: str = "error"  # or "warn"
    mps_root: str = "/run/nvct/mps"


def allocate(
    ids: Sequence[str],
    devices: Mapping[str, PluginDevice],
    health: Mapping[str, str],
    *,
    resource: str,
    strategies: Sequence[str],
    id_strategy: str,
    cdi_names: Collection[str],
    sharing: SharingPolicy | None = None,
    annotation_prefix: str = ANNOTATION_PREFIX,
    device_nodes: Mapping[str, Sequence[tuple[str, str]]] | None = None,
) -> Answer:
    """The answer for one container request; ``device_nodes`` (a device's UUID -> its
    (host, container) nodes, the control nodes included) fills ``devices``.

    Raises:
        AllocationError: an unknown or unhealthy device, none asked, more than one shared
            device where that is refused, or two replicas of one GPU with ``"error"``.
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
    policy = sharing or SharingPolicy()
    asked = [devices[i] for i in dict.fromkeys(ids)]
    answer = Answer()
    _shared(asked, resource, policy, answer)
    chosen = list({d.uuid: d for d in asked}.values())
    visible = [d.uuid if id_strategy == "uuid" else d.index for d in chosen]
    if device_nodes is not None:
        nodes = (n for d in chosen for n in device_nodes.get(d.uuid, ()))
        answer.devices.extend(dict.fromkeys(nodes))
    if "envvar" in strategies:
        answer.envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(visible)
    if "volume-mounts" in strategies:
        answer.envs["NVIDIA_VISIBLE_DEVICES"] = DEVICE_MOUNT_DIR
        answer.mounts.extend(("/dev/null", f"{DEVICE_MOUNT_DIR}/{v}") for v in visible)
    if not {"cdi-annotations", "cdi-cri"} & set(strategies):
        return answer
    names = [_cdi_name(d, cdi_names, id_strategy) for d in chosen]
    if "cdi-annotations" in strategies:
        key = f"{annotation_prefix}nvct-device-plugin_{resource.split('/', 1)[1]}"
        answer.annotations[key] = ",".join(names)
    if "cdi-cri" in strategies:
        answer.cdi_devices.extend(names)
    return answer


def _shared(
    asked: Sequence[PluginDevice], resource: str, policy: SharingPolicy, answer: Answer
) -> None:
    """Refuse or annotate what sharing asks for; the MPS pipe and shared memory."""
    replicas = [d for d in asked if d.replica >= 0]
    if not replicas:
        return
    mps = any(d.sharing == "mps" for d in replicas)
    if len(asked) > 1 and (mps or policy.fail_greater_than_one):
        why = "MPS GPUs" if mps else "fail-requests-greater-than-one is set"
        raise AllocationError(
            f"{len(asked)} {resource} devices asked for one container: a shared GPU is given "
            f"one per container ({why})",
            hint=f"ask for 1 {resource} per container",
        )
    twice = {u: n for u, n in Counter(d.uuid for d in replicas).items() if n > 1}
    if twice and policy.replicas_of_one_gpu != "warn":
        uuid, n = next(iter(twice.items()))
        raise AllocationError(
            f"{n} replicas of one GPU ({uuid}) asked for one container: it would get 1 GPU "
            f"counted as {n}",
            hint="ask for 1 replica per container, or set [device-plugin.sharing] "
            'replicas-of-one-gpu = "warn" to allow it',
        )
    if twice:
        answer.envs[REPLICAS_ENV] = ",".join(f"{u}={n}" for u, n in twice.items())
        answer.warnings.extend(
            f"{n} replicas of {u} given to one container: it gets that GPU once"
            for u, n in twice.items()
        )
    for device in replicas:
        if device.sharing == "mps":
            paths = MpsPaths(policy.mps_root, device.uuid)
            answer.envs[MPS_PIPE_ENV] = paths.container_pipe
            answer.writable.extend([(paths.pipe, paths.container_pipe), (paths.shm, CONTAINER_SHM)])
            return  # one device: refused above otherwise


def _cdi_name(device: PluginDevice, names: Collection[str], id_strategy: str) -> str:
    by_uuid = f"{PLUGIN_KIND}={device.uuid}"
    by_index = f"{PLUGIN_KIND}={device.index}"
    order = (by_index, by_uuid) if id_strategy == "index" else (by_uuid, by_index)
    for name in order:
        if name in names:
            return name
    raise AllocationError(
        f"the CDI spec names no device {device.uuid} (nor {device.index})",
        unhealthy=True,
    )
