"""What the kubelet asks nvct-dra-plugin to prepare, read from the ResourceClaim itself.

The kubelet sends a claim only by reference (namespace, name, UID: the DRA kubelet API has no
allocation in it); the driver GETs the ResourceClaim (``resource.k8s.io/v1``) and reads
``status.allocation.devices``: ``results[]`` (``request``, ``driver``, ``pool``, ``device``),
of which it prepares those of its own driver, and ``config[]`` (``source`` FromClass or
FromClaim, ``requests[]``, ``opaque{driver, parameters}``): its own driver's entries configure
the results of the requests they name (all of the claim's when they name none), later entries
over earlier ones (the API lists the class's before the claim's). A claim re-created under the
same name has another UID: the kubelet's UID must match, or the claim is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nvct.base.errors import NvctError
from nvct.dra.config import DeviceConfig, parse_config


class ClaimError(NvctError):
    """A claim this plugin cannot prepare."""


@dataclass(frozen=True, slots=True)
class Allocated:
    """One device the scheduler allocated to a request of the claim, on this driver."""

    request: str
    pool: str
    device: str
    config: DeviceConfig


def allocated(claim: Mapping[str, Any], *, uid: str, driver: str, pool: str) -> list[Allocated]:
    """This driver's devices of ``claim`` (a ResourceClaim as the API server returns it).

    Raises:
        ClaimError: another UID, not allocated, a result in another pool (another node's), or
            a configuration nvct cannot apply (ClaimConfigError, one line naming the entry).
    """
    meta = claim.get("metadata") or {}
    where = f"ResourceClaim {meta.get('namespace', '')}/{meta.get('name', '')}"
    if meta.get("uid") != uid:
        raise ClaimError(
            f"{where} has UID {meta.get('uid')!r}, the kubelet asked for {uid!r}: it was "
            "deleted and created again",
            hint="the kubelet retries with the current claim once its pod is re-created",
        )
    devices = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
    results = [r for r in devices.get("results") or () if r.get("driver") == driver]
    if not (claim.get("status") or {}).get("allocation"):
        raise ClaimError(f"{where} is not allocated", hint="wait for the scheduler to allocate it")
    configs = _configs(devices.get("config") or (), driver, where)
    out = []
    for result in results:
        if result.get("pool") != pool:
            raise ClaimError(
                f"{where}: device {result.get('device')!r} of pool {result.get('pool')!r} is "
                f"not on this node (pool {pool!r})",
                hint="the claim was allocated for another node",
            )
        request = str(result.get("request", ""))
        chosen = DeviceConfig()
        for requests, config in configs:
            if not requests or request in requests or request.partition("/")[0] in requests:
                chosen = config
        out.append(Allocated(request, pool, str(result.get("device", "")), chosen))
    return out


def _configs(
    entries: Sequence[Mapping[str, Any]], driver: str, where: str
) -> list[tuple[frozenset[str], DeviceConfig]]:
    out = []
    for n, entry in enumerate(entries):
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != driver:
            continue
        source = entry.get("source", "FromClaim")
        config = parse_config(opaque.get("parameters"), where=f"{where} config[{n}] ({source})")
        out.append((frozenset(entry.get("requests") or ()), config))
    return out
