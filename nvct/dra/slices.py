"""This node's DRA devices as ResourceSlice objects (``resource.k8s.io/v1``): pure values.

A device is the API's shape as a dict (``{"name", "attributes", "capacity"}``, attributes as
``{"string"|"int"|"bool"|"version": value}``, capacities as ``{"value": quantity}``); the
pool is the node's, named after it, as the kubelet plugin helper names it. The API's limits
are checked here, before anything is sent: at most 128 devices in one slice (more make more
slices of the same pool) and 32 attributes and capacities together per device.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nvct.base.errors import NvctError

MAX_DEVICES_PER_SLICE = 128
MAX_ATTRIBUTES_AND_CAPACITIES = 32

Device = Mapping[str, Any]


class SliceError(NvctError):
    """A device the API would refuse in a ResourceSlice."""


def _name_part(text: str) -> str:
    """``text`` as a part of an object name (lowercase alphanumerics and '-')."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def slice_name(node: str, driver: str, index: int) -> str:
    """The ``index``-th slice of ``driver``'s pool on ``node``: stable names, so that a
    restarted plugin finds and updates its own slices instead of adding more."""
    return f"{_name_part(node)}-{_name_part(driver)}-{index}"


def check_device(device: Device) -> None:
    """Raises SliceError where the API would refuse ``device``."""
    name = str(device.get("name", ""))
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):
        raise SliceError(
            f"DRA device name {name!r} is not a DNS label",
            hint="name devices with lowercase letters, digits and '-' (at most 63)",
        )
    count = len(device.get("attributes") or {}) + len(device.get("capacity") or {})
    if count > MAX_ATTRIBUTES_AND_CAPACITIES:
        raise SliceError(
            f"DRA device {name} has {count} attributes and capacities, "
            f"the API allows {MAX_ATTRIBUTES_AND_CAPACITIES}",
            hint="drop attributes a claim does not select on",
        )


def slice_specs(
    node: str, driver: str, devices: Sequence[Device], generation: int
) -> list[dict[str, Any]]:
    """The ``spec`` of each slice of the pool: devices in name order, 128 at most per slice,
    one empty slice when there is no device (the pool then says so: no stale slice of another
    generation is taken for it)."""
    names = [str(d.get("name")) for d in devices]
    duplicate = sorted({n for n in names if names.count(n) > 1})
    if duplicate:
        raise SliceError(f"DRA device names {duplicate} appear twice in one pool")
    for device in devices:
        check_device(device)
    ordered = sorted(devices, key=lambda d: str(d["name"]))
    chunks = [
        ordered[i : i + MAX_DEVICES_PER_SLICE]
        for i in range(0, len(ordered), MAX_DEVICES_PER_SLICE)
    ] or [[]]
    pool = {"name": node, "generation": generation, "resourceSliceCount": len(chunks)}
    return [
        {
            "driver": driver,
            "nodeName": node,
            "pool": dict(pool),
            "devices": [copy.deepcopy(dict(d)) for d in chunk],
        }
        for chunk in chunks
    ]


def _taint_key(taint: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(taint.get("key", "")), str(taint.get("value") or ""), str(taint.get("effect")))


def comparable(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` without what the server or the generation changes: the pool's generation and
    the taints' ``timeAdded`` (the API server stamps it), so a slice read back equals what
    was written when its content is the same."""
    out = copy.deepcopy(dict(spec))
    out.get("pool", {}).pop("generation", None)
    for device in out.get("devices") or []:
        taints = device.pop("taints", None)
        if taints:
            device["taints"] = sorted(_taint_key(t) for t in taints)
    return out


def dropped_taints(sent: Mapping[str, Any], stored: Mapping[str, Any]) -> list[str]:
    """The devices whose taints ``sent`` had and the API server's ``stored`` answer lacks
    (a server without the DRADeviceTaints feature drops the field without an error)."""
    kept = {d.get("name"): bool(d.get("taints")) for d in stored.get("devices") or []}
    return [
        str(d["name"])
        for d in sent.get("devices") or []
        if d.get("taints") and not kept.get(d["name"], False)
    ]
