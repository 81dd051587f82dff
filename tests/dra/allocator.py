"""A test-only DRA allocator: what the scheduler's structured allocator does with a claim
(k8s.io/dynamic-resource-allocation/structured), for the claims nvct's examples write.

- Devices come from the ResourceSlices of each pool's newest generation only (a pool caught
  between generations is what the scheduler skips too).
- A device carrying a ``NoSchedule`` or ``NoExecute`` taint is not allocated unless the
  request tolerates it (``tolerations``: ``Exists`` or ``Equal`` on key and value).
- A request (``exactly``) takes its DeviceClass's selectors, then its own, all CEL, evaluated
  by cel-python with the Kubernetes extensions of ``cel_k8s``; a selector that fails to
  evaluate (a missing attribute, a wrong type) is an error, as it fails the claim in the
  scheduler, not a silent "no".
- ``count`` devices per request (``allocationMode: ExactCount``, the default), or every
  matching one (``All``); ``constraints[].matchAttribute`` makes the devices of the named
  requests (all, when none are named) have that attribute, equal; a device without it
  cannot take part. The search backtracks over the choices, as the scheduler's does.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes

from tests.dra.cel_k8s import FUNCTIONS, Quantity, attribute_value


class AllocationError(Exception):
    """The claim cannot be evaluated (what the scheduler reports as a claim's error)."""


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Any]  # qualified name -> the slice's typed value
    capacity: Mapping[str, Any]
    taints: tuple[Mapping[str, Any], ...]

    @property
    def key(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"

    def qualified(self, name: str) -> str:
        return name if "/" in name else f"{self.driver}/{name}"

    def attribute(self, qualified: str) -> Any:
        for name, value in self.attributes.items():
            if self.qualified(name) == qualified:
                ((_, plain),) = value.items()
                return plain
        return None

    def cel(self) -> celtypes.MapType:
        """The ``device`` variable a selector sees."""
        attributes: dict[str, dict[str, Any]] = {}
        for name, value in self.attributes.items():
            domain, _, short = self.qualified(name).rpartition("/")
            attributes.setdefault(domain, {})[celtypes.StringType(short)] = attribute_value(value)
        capacity: dict[str, dict[str, Any]] = {}
        for name, value in self.capacity.items():
            domain, _, short = self.qualified(name).rpartition("/")
            capacity.setdefault(domain, {})[celtypes.StringType(short)] = Quantity(value["value"])
        return celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(self.driver),
                celtypes.StringType("attributes"): celtypes.MapType(
                    {celtypes.StringType(d): celtypes.MapType(v) for d, v in attributes.items()}
                ),
                celtypes.StringType("capacity"): celtypes.MapType(
                    {celtypes.StringType(d): celtypes.MapType(v) for d, v in capacity.items()}
                ),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(False),
            }
        )


def devices_of(slices: Iterable[Mapping[str, Any]]) -> list[Device]:
    """The devices of the newest generation of each pool (slices as the API returns them)."""
    slices = list(slices)
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        spec = s["spec"]
        key = (spec["driver"], spec["pool"]["name"])
        newest[key] = max(newest.get(key, 0), int(spec["pool"]["generation"]))
    found = []
    for s in slices:
        spec = s["spec"]
        if int(spec["pool"]["generation"]) != newest[(spec["driver"], spec["pool"]["name"])]:
            continue
        for d in spec.get("devices") or []:
            found.append(
                Device(
                    spec["driver"],
                    spec["pool"]["name"],
                    d["name"],
                    d.get("attributes") or {},
                    d.get("capacity") or {},
                    tuple(d.get("taints") or ()),
                )
            )
    return found


def selects(expression: str, device: Device) -> bool:
    env = celpy.Environment()
    try:
        program = env.program(env.compile(expression), functions=FUNCTIONS)
    except celpy.CELParseError as err:
        raise AllocationError(f"CEL does not parse: {expression}: {err}") from err
    try:
        result = program.evaluate({"device": device.cel()})
    except Exception as err:  # the extensions' own errors, cel-python's
        raise AllocationError(f"{expression} on {device.name}: {err}") from err
    if not isinstance(result, celtypes.BoolType):
        raise AllocationError(f"{expression} on {device.name}: {result!r}, not a bool")
    return bool(result)


def _tolerated(taint: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    for t in tolerations:
        if t.get("key") not in (None, "", taint.get("key")):
            continue
        if t.get("effect") not in (None, "", taint.get("effect")):
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value") == taint.get("value"):
            return True
    return False


def candidates(
    request: Mapping[str, Any],
    classes: Mapping[str, Mapping[str, Any]],
    devices: Sequence[Device],
) -> list[Device]:
    """The devices one request may get, in slice order."""
    if "exactly" not in request:
        raise AllocationError(f"request {request.get('name')}: only 'exactly' is supported")
    exactly = request["exactly"]
    name = exactly["deviceClassName"]
    if name not in classes:
        raise AllocationError(f"request {request['name']}: no DeviceClass {name}")
    expressions = [s["cel"]["expression"] for s in classes[name]["spec"].get("selectors", ())]
    expressions += [s["cel"]["expression"] for s in exactly.get("selectors", ())]
    tolerations = exactly.get("tolerations", ())
    out = []
    for device in devices:
        blocking = [t for t in device.taints if t.get("effect") in ("NoSchedule", "NoExecute")]
        if any(not _tolerated(t, tolerations) for t in blocking):
            continue
        if all(selects(e, device) for e in expressions):  # stops at the first "no"
            out.append(device)
    return out


def _fits(constraints: Sequence[Mapping[str, Any]], chosen: Mapping[str, Sequence[Device]]) -> bool:
    for constraint in constraints:
        attribute = constraint.get("matchAttribute")
        if not attribute:
            continue
        named = constraint.get("requests") or list(chosen)
        values = [d.attribute(attribute) for r in named for d in chosen.get(r, ())]
        if any(v is None for v in values) or len(set(map(str, values))) > 1:
            return False
    return True


def allocate(
    claim: Mapping[str, Any],
    classes: Mapping[str, Mapping[str, Any]],
    devices: Sequence[Device],
    *,
    in_use: Iterable[str] = (),
) -> dict[str, list[str]] | None:
    """Each request's devices (names) for a claim's ``spec``, or None when it cannot be
    satisfied on these devices; ``in_use``: device keys allocated to other claims."""
    spec = claim["devices"]
    requests = spec["requests"]
    constraints = spec.get("constraints", ())
    options = {r["name"]: candidates(r, classes, devices) for r in requests}
    taken = set(in_use)

    def search(
        index: int, chosen: dict[str, Sequence[Device]]
    ) -> dict[str, Sequence[Device]] | None:
        if index == len(requests):
            return chosen
        request = requests[index]
        free = [d for d in options[request["name"]] if d.key not in taken]
        exactly = request["exactly"]
        if exactly.get("allocationMode", "ExactCount") == "All":
            picks: Iterable[tuple[Device, ...]] = [tuple(free)] if free else []
        else:
            picks = itertools.combinations(free, int(exactly.get("count", 1)))
        for pick in picks:
            trial = {**chosen, request["name"]: pick}
            if not _fits(constraints, trial):
                continue
            taken.update(d.key for d in pick)
            found = search(index + 1, trial)
            if found is not None:
                return found
            taken.difference_update(d.key for d in pick)
        return None

    found = search(0, {})
    return None if found is None else {r: [d.name for d in ds] for r, ds in found.items()}
