"""What a ResourceClaim asks of nvct-dra-plugin: its devices of this driver and pool, and the
opaque configuration each request gets; refusals as one line naming the entry."""

from __future__ import annotations

from typing import Any

import pytest

from nvct.dra.claim import ClaimError, allocated
from nvct.dra.config import ClaimConfigError, DeviceConfig, MpsConfig, parse_config

DRIVER = "gpu.nvct.io"
UID = "9a7c1f4e-1111-4222-8333-444455556666"


def _claim(results: list[tuple[str, str, str]], config: list[Any] | None = None) -> Any:
    return {
        "metadata": {"namespace": "ns", "name": "c", "uid": UID},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": r, "driver": d, "pool": "node-1", "device": n}
                        for r, d, n in results
                    ],
                    "config": config or [],
                }
            }
        },
    }


def _opaque(requests: list[str], source: str = "FromClaim", **sharing: Any) -> Any:
    parameters = {"apiVersion": "dra.nvct.io/v1alpha1", "kind": "GpuConfig", "sharing": sharing}
    return {
        "source": source,
        "requests": requests,
        "opaque": {"driver": DRIVER, "parameters": parameters},
    }


def test_only_this_drivers_results_and_configs_count() -> None:
    other = {"source": "FromClass", "opaque": {"driver": "other.example.com", "parameters": 1}}
    claim = _claim(
        [("a", DRIVER, "gpu-0"), ("b", "nic.example.com", "nic-0"), ("b", DRIVER, "gpu-1")],
        [other, _opaque([], "FromClass"), _opaque(["b"], strategy="TimeSlicing")],
    )
    found = allocated(claim, uid=UID, driver=DRIVER, pool="node-1")
    assert [(f.request, f.device) for f in found] == [("a", "gpu-0"), ("b", "gpu-1")]
    assert found[0].config == DeviceConfig("gpu", "TimeSlicing")


@pytest.mark.parametrize(
    ("claim", "uid", "message"),
    [
        (_claim([("a", DRIVER, "gpu-0")]), "another", "has UID"),
        ({"metadata": {"uid": UID}, "status": {}}, UID, "is not allocated"),
    ],
)
def test_a_claim_of_another_uid_or_unallocated_is_refused(
    claim: Any, uid: str, message: str
) -> None:
    with pytest.raises(ClaimError, match=message):
        allocated(claim, uid=uid, driver=DRIVER, pool="node-1")


def test_a_device_of_another_pool_is_refused() -> None:
    with pytest.raises(ClaimError, match="not on this node"):
        allocated(_claim([("a", DRIVER, "gpu-0")]), uid=UID, driver=DRIVER, pool="node-2")


def _mps(**fields: Any) -> Any:
    return {
        "apiVersion": "dra.nvct.io/v1alpha1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": fields},
    }


@pytest.mark.parametrize("interval", ["Default", "Short", "Medium", "Long"])
def test_every_interval_of_nvidias_driver_is_read(interval: str) -> None:
    parameters = {
        "apiVersion": "dra.nvct.io/v1alpha1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}},
    }
    assert parse_config(parameters, where="w") == DeviceConfig(
        "gpu", "TimeSlicing", interval=interval
    )


def test_a_mig_device_takes_mps_or_time_slicing_without_an_interval() -> None:
    mig = {"apiVersion": "dra.nvct.io/v1alpha1", "kind": "MigDeviceConfig"}
    assert parse_config(mig, where="w") == DeviceConfig("mig", "TimeSlicing")
    mps = {
        **mig,
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 20}},
    }
    assert parse_config(mps, where="w") == DeviceConfig("mig", "MPS", MpsConfig(20))


def test_mps_config_is_read_in_mib_with_per_device_limits() -> None:
    config = parse_config(
        _mps(
            defaultActiveThreadPercentage=40,
            defaultPinnedDeviceMemoryLimit="10Gi",
            defaultPerDevicePinnedMemoryLimit={"gpu-1": "1.5Gi", "GPU-abc": 2_000_000_000},
        ),
        where="w",
    )
    assert config == DeviceConfig(
        "gpu", "MPS", MpsConfig(40, 10240, (("gpu-1", 1536), ("GPU-abc", 1907)))
    )
    assert parse_config(_mps(), where="w").mps == MpsConfig()  # every field optional


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}, "is not dra.nvct.io"),
        ({"apiVersion": "dra.nvct.io/v1alpha1", "kind": "Gpu"}, "kind 'Gpu'"),
        ({"apiVersion": "dra.nvct.io/v1alpha1", "kind": "GpuConfig", "share": {}}, "'share'"),
        (
            {"apiVersion": "dra.nvct.io/v1alpha1", "kind": "MigDeviceConfig",
             "sharing": {"timeSlicingConfig": {"interval": "Short"}}},
            "a MIG device has no time-slice interval of its own",
        ),
        (_mps(defaultActiveThreadPercentage=0), "defaultActiveThreadPercentage 0 is not"),
        (_mps(defaultActiveThreadPercentage=True), "defaultActiveThreadPercentage True"),
        (_mps(defaultActiveThreadPercentage="50"), "defaultActiveThreadPercentage '50'"),
        (_mps(defaultPinnedDeviceMemoryLimit="10 GiB"), "'10 GiB' is not a quantity"),
        (_mps(defaultPinnedDeviceMemoryLimit="-1Gi"), "'-1Gi' is not a quantity"),
        (_mps(defaultPinnedDeviceMemoryLimit="512Ki"), "less than 1Mi"),
        (_mps(defaultPerDevicePinnedMemoryLimit={"0": "1Gi"}), "key '0' is an index"),
        (_mps(defaultPerDevicePinnedMemoryLimit=["1Gi"]), "must map devices"),
        (_mps(defaultThreads=5), "unknown field 'defaultThreads'"),
        (
            {"apiVersion": "dra.nvct.io/v1alpha1", "kind": "GpuConfig",
             "sharing": {"strategy": "MPS", "timeSlicingConfig": {}}},
            "timeSlicingConfig is given with strategy MPS",
        ),
        (
            {"apiVersion": "dra.nvct.io/v1alpha1", "kind": "GpuConfig",
             "sharing": {"timeSlicingConfig": {"interval": "long"}}},
            "interval 'long' is not one of Default, Short, Medium, Long",
        ),
        ("text", "must be an object"),
    ],
)  # fmt: skip
def test_config_nvct_cannot_apply_is_refused_in_one_line(parameters: Any, message: str) -> None:
    with pytest.raises(ClaimConfigError, match=message) as raised:
        parse_config(parameters, where="ResourceClaim ns/c config[0]")
    assert raised.value.one_line().startswith("ResourceClaim ns/c config[0]: ")
    assert "\n" not in raised.value.one_line()
