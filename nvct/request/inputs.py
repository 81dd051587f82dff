"""The parts of an OCI spec that a GPU request depends on; stdlib only (hot path).

``nvct.request`` interprets them; ``nvct.plan.order_key`` hashes them to reuse work orders.
"""

from __future__ import annotations

from nvct.base import fastjson

TYPE_CHECKING = False  # typing (and collections, ~3 ms) cost time here; annotations are strings
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any


DEVICE_MOUNT_DIR = "/var/run/nvidia-container-devices/"
# The variables whose presence can make a container ask for GPUs (a legacy CUDA image asks
# for all of them); the launchers look for these names before starting Python.
# Swarm's generic resources (DOCKER_RESOURCE_GPU) select GPUs when the config says so
# (request.swarm-resource), and are reported as ignored when it does not.
GPU_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VERSION", "DOCKER_RESOURCE_")
# Annotations naming CDI devices (``cdi.k8s.io/<key>: vendor/class=name,...``), as device
# plugins answer for engines that do not resolve CDI names themselves.
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"


def env_map(env: Iterable[str]) -> dict[str, str]:
    """An OCI ``process.env`` list as a dict (later entries win, as in execve users)."""
    out: dict[str, str] = {}
    for item in env:
        key, sep, value = item.partition("=")
        if sep:
            out[key] = value
    return out


def is_privileged(spec: Mapping[str, Any]) -> bool:
    """CAP_SYS_ADMIN in the bounding set, the toolkit's test for a privileged container."""
    caps = (spec.get("process") or {}).get("capabilities") or {}
    bounding = caps.get("bounding", ()) if isinstance(caps, dict) else caps
    return "CAP_SYS_ADMIN" in (bounding or ())


def mount_pairs(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(source, destination)`` of each of the spec's mounts."""
    return [
        (str(m.get("source", "")), str(m.get("destination", "")))
        for m in spec.get("mounts") or ()
        if isinstance(m, dict)
    ]


def cdi_annotations(spec: Mapping[str, Any]) -> dict[str, str]:
    """The spec's ``cdi.k8s.io/`` annotations (string values only)."""
    annotations = spec.get("annotations")
    if not isinstance(annotations, dict):
        return {}
    return {
        k: v
        for k, v in annotations.items()
        if isinstance(k, str) and k.startswith(CDI_ANNOTATION_PREFIX) and isinstance(v, str)
    }


def request_inputs(spec: Mapping[str, Any]) -> str:
    """A canonical string of every spec input a request depends on."""
    env = env_map((spec.get("process") or {}).get("env") or ())
    # Every NVIDIA_* variable: those nvct does not act on are reported, so they shape the
    # work order's entry too.
    relevant = sorted(
        (k, v)
        for k, v in env.items()
        if k.startswith(("NVIDIA_", "DOCKER_RESOURCE_")) or k == "CUDA_VERSION"
    )
    # The source too: only a /dev/null source makes a device-list mount (request.parse).
    mounts = sorted([s, d] for s, d in mount_pairs(spec) if d.startswith(DEVICE_MOUNT_DIR))
    cdi = sorted(cdi_annotations(spec).items())
    return fastjson.dumps([relevant, mounts, is_privileged(spec), *([cdi] if cdi else [])])
