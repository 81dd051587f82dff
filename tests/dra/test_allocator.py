"""The test allocator (tests/dra/allocator.py) itself: class and request selectors, counts,
matchAttribute, taints, pool generations and CEL errors, on hand-written slices."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("celpy")

from tests.dra.allocator import AllocationError, allocate, candidates, devices_of

DRIVER = "gpu.nvct.io"
CLASSES = {
    DRIVER: {
        "spec": {
            "selectors": [{"cel": {"expression": f"device.attributes['{DRIVER}'].type == 'gpu'"}}]
        }
    }
}


def gpu(name: str, domain: str | None = None, memory: str = "80Gi", **extra: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {"type": {"string": "gpu"}}
    if domain:
        attributes["nvlinkDomain"] = {"string": domain}
    return {
        "name": name,
        "attributes": attributes,
        "capacity": {"memory": {"value": memory}},
        **extra,
    }


def pool(devices: list[dict[str, Any]], generation: int = 1, name: str = "n1") -> dict[str, Any]:
    return {
        "spec": {
            "driver": DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        }
    }


def claim(count: int = 1, selector: str = "", match: str = "", **exactly: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": DRIVER, "count": count, **exactly}
    if selector:
        request["selectors"] = [{"cel": {"expression": selector}}]
    spec: dict[str, Any] = {"requests": [{"name": "r", "exactly": request}]}
    if match:
        spec["constraints"] = [{"requests": ["r"], "matchAttribute": match}]
    return {"devices": spec}


def test_match_attribute_gives_two_devices_of_one_domain_and_never_a_device_without_it() -> None:
    devices = devices_of([pool([gpu("a", "x"), gpu("b"), gpu("c", "y"), gpu("d", "y")])])
    got = allocate(claim(2, match=f"{DRIVER}/nvlinkDomain"), CLASSES, devices)
    assert got == {"r": ["c", "d"]}
    assert allocate(claim(2, match=f"{DRIVER}/nvlinkDomain"), CLASSES, devices,
                    in_use=[f"{DRIVER}/n1/c"]) is None  # fmt: skip
    assert allocate(claim(3), CLASSES, devices) == {"r": ["a", "b", "c"]}


def test_selectors_see_capacities_as_quantities() -> None:
    devices = devices_of([pool([gpu("small", memory="24564Mi"), gpu("big", memory="46068Mi")])])
    selector = f"device.capacity['{DRIVER}'].memory.compareTo(quantity('40Gi')) >= 0"
    assert [d.name for d in candidates(claim(selector=selector)["devices"]["requests"][0],
                                       CLASSES, devices)] == ["big"]  # fmt: skip


def test_all_mode_takes_every_match() -> None:
    devices = devices_of([pool([gpu("a"), gpu("b")])])
    assert allocate(claim(allocationMode="All"), CLASSES, devices) == {"r": ["a", "b"]}


def test_a_tainted_device_is_not_given_unless_tolerated() -> None:
    taint = {"key": f"{DRIVER}/unhealthy", "value": "xid-79", "effect": "NoSchedule"}
    devices = devices_of([pool([gpu("a", taints=[taint]), gpu("b")])])
    assert allocate(claim(2), CLASSES, devices) is None
    tolerating = claim(2, tolerations=[{"key": f"{DRIVER}/unhealthy", "operator": "Exists"}])
    assert allocate(tolerating, CLASSES, devices) == {"r": ["a", "b"]}


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    devices = devices_of([pool([gpu("old")], generation=1), pool([gpu("new")], generation=2)])
    assert [d.name for d in devices] == ["new"]


def test_a_selector_that_fails_to_evaluate_is_an_error_not_a_no() -> None:
    devices = devices_of([pool([gpu("a")])])
    with pytest.raises(AllocationError, match="on a"):
        allocate(claim(selector=f"device.attributes['{DRIVER}'].profile == '1g.10gb'"),
                 CLASSES, devices)  # fmt: skip
    with pytest.raises(AllocationError, match="no DeviceClass"):
        allocate({"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}},
                 CLASSES, devices)  # fmt: skip
