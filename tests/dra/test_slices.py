"""The node's DRA devices as ResourceSlice specs (nvct.dra.slices) and health as taints
(nvct.dra.taints): the API's limits checked before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

from nvct.dra.slices import (
    SliceError,
    comparable,
    dropped_taints,
    slice_name,
    slice_specs,
)
from nvct.dra.taints import health_taint, taint_value


def device(name: str, attributes: int = 2, capacities: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {f"a{i}": {"int": i} for i in range(attributes)},
        "capacity": {f"c{i}": {"value": "1Gi"} for i in range(capacities)},
    }


def test_devices_are_split_at_128_and_every_slice_names_the_pool_s_size() -> None:
    specs = slice_specs("n1", "gpu.nvct.io", [device(f"gpu-{i}") for i in range(257)], 4)
    assert [len(s["devices"]) for s in specs] == [128, 128, 1]
    assert {str(s["pool"]) for s in specs} == {
        str({"name": "n1", "generation": 4, "resourceSliceCount": 3})
    }
    names = [d["name"] for s in specs for d in s["devices"]]
    assert names == sorted(names) and len(set(names)) == 257


def test_no_device_is_one_empty_slice() -> None:
    (only,) = slice_specs("n1", "gpu.nvct.io", [], 1)
    assert only["devices"] == [] and only["pool"]["resourceSliceCount"] == 1


def test_32_attributes_and_capacities_is_the_most_a_device_may_have() -> None:
    slice_specs("n1", "d", [device("gpu-0", attributes=31, capacities=1)], 1)
    with pytest.raises(SliceError) as raised:
        slice_specs("n1", "d", [device("gpu-0", attributes=31, capacities=2)], 1)
    assert "gpu-0 has 33 attributes and capacities, the API allows 32" in str(raised.value)


@pytest.mark.parametrize("name", ["GPU-0", "gpu_0", "", "-gpu", "g" * 64])
def test_a_device_name_that_is_not_a_dns_label_is_refused(name: str) -> None:
    with pytest.raises(SliceError, match="is not a DNS label"):
        slice_specs("n1", "d", [device(name)], 1)


def test_a_name_twice_in_the_pool_is_refused() -> None:
    with pytest.raises(SliceError, match=r"\['gpu-0'\] appear twice"):
        slice_specs("n1", "d", [device("gpu-0"), device("gpu-0")], 1)


def test_slice_names_are_stable_object_names() -> None:
    assert slice_name("Node_1.example", "gpu.nvct.io", 2) == "node-1-example-gpu-nvct-io-2"


def test_what_the_server_stamps_or_the_generation_changes_is_not_a_difference() -> None:
    (sent,) = slice_specs("n1", "d", [device("gpu-0")], 1)
    sent["devices"][0]["taints"] = [{"key": "d/unhealthy", "value": "ecc", "effect": "NoSchedule"}]
    stored = {**sent, "pool": {**sent["pool"], "generation": 7}}
    stored["devices"] = [
        {**sent["devices"][0], "taints": [{**sent["devices"][0]["taints"][0], "timeAdded": "x"}]}
    ]
    assert comparable(sent) == comparable(stored)
    assert dropped_taints(sent, stored) == []
    stored["devices"] = [{k: v for k, v in sent["devices"][0].items() if k != "taints"}]
    assert comparable(sent) != comparable(stored)
    assert dropped_taints(sent, stored) == ["gpu-0"]


@pytest.mark.parametrize(
    ("reason", "value"),
    [
        ("XID 79 (GPU has fallen off the bus): reset the GPU", "xid-79"),
        ("double-bit ECC error: reset the GPU to remap the row", "ecc"),
        ("NVML does not answer: GPU_IS_LOST", "gpu-lost"),
        ("NVML recovery action: node reboot", "recovery-action"),
        ("row remapping failed: the GPU needs service", "service"),
        ("MPS control daemon exited", "other"),
    ],
)
def test_the_health_policy_s_reasons_become_short_taint_values(reason: str, value: str) -> None:
    assert taint_value(reason) == value
    assert health_taint("gpu.nvct.io", reason) == {
        "key": "gpu.nvct.io/unhealthy",
        "value": value,
        "effect": "NoSchedule",
    }
