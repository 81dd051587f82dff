"""Device IDs as the kubelet reports them, mapped back to the node's GPUs."""

from __future__ import annotations

import pytest

from nvct.kubeapi.podresources.ids import (
    DeviceMap,
    GpuIds,
    Held,
    Owner,
    base_id,
    is_gpu_resource,
    owners_by_gpu,
    owners_by_mig,
    replicas_by_gpu,
    replicas_by_mig,
)

A, B = "GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"
MIG = "MIG-11111111-0000-0000-0000-000000000000"
DEVICES = DeviceMap([GpuIds(A, 0), GpuIds(B, 1, ((MIG, 0),))])


@pytest.mark.parametrize(
    ("device_id", "base"),
    [
        (A, A),
        (f"{A}::0", A),
        (f"{A}::17", A),
        (f"{A}/vgpu3", A),
        ("1::2", "1"),
        ("1:0", "1:0"),  # a MIG index, not a replica
        ("1:0::2", "1:0"),
    ],
)
def test_base_id_strips_replica_suffixes_only(device_id: str, base: str) -> None:
    assert base_id(device_id) == base


@pytest.mark.parametrize(
    ("device_id", "gpu"),
    [
        (A, A),
        (f"{A}::3", A),
        ("0", A),
        ("0::1", A),
        (B, B),
        (MIG, B),
        (f"{MIG}::1", B),
        ("1:0", B),
        ("GPU-unknown", None),
        ("2", None),
        ("1:1", None),
    ],
)
def test_every_id_form_maps_to_its_gpu(device_id: str, gpu: str | None) -> None:
    assert DEVICES.gpu_of(device_id) == gpu


def test_gpu_resources() -> None:
    assert is_gpu_resource("nvidia.com/gpu")
    assert is_gpu_resource("nvidia.com/gpu.shared")
    assert is_gpu_resource("nvidia.com/mig-1g.10gb")
    assert not is_gpu_resource("nvidia.com/gpus")
    assert not is_gpu_resource("example.com/gpu")
    assert is_gpu_resource("example.com/gpu", extra=["example.com/gpu"])


def test_owners_one_per_container_in_kubelet_order() -> None:
    infer, side = Owner("serve", "b", "infer"), Owner("serve", "b", "side")
    held = [
        Held(infer, "nvidia.com/gpu.shared", f"{A}::0"),
        Held(side, "nvidia.com/gpu.shared", f"{A}::1"),
        Held(infer, "nvidia.com/gpu.shared", f"{A}::2"),  # two replicas, one container
        Held(Owner("mig", "c", "x"), "nvidia.com/mig-1g.10gb", MIG),
        Held(Owner("other", "c", "y"), "nvidia.com/gpu", "GPU-of-another-node"),
    ]
    assert owners_by_gpu(held, DEVICES) == {A: [infer, side], B: [Owner("mig", "c", "x")]}
    # a MIG device's own series: its holders only, by UUID or by <gpu>:<mig> index
    index = Held(Owner("mig2", "c", "z"), "nvidia.com/mig-1g.10gb", "1:0")
    assert owners_by_mig([*held, index], DEVICES) == {
        MIG: (Owner("mig", "c", "x"), Owner("mig2", "c", "z"))
    }
    assert DEVICES.mig_of(f"{A}::0") is None and DEVICES.mig_of("1:0") == MIG


def test_replicas_count_distinct_whole_gpu_ids() -> None:
    ids = [f"{A}::{n}" for n in range(4)] + [f"{A}::0", B, MIG, "GPU-elsewhere"]
    assert replicas_by_gpu(ids, DEVICES) == {A: 4, B: 1}


def test_a_mig_devices_replicas_are_counted_by_its_uuid() -> None:
    ids = [f"{MIG}::0", f"{MIG}::1", "1:0::2", A, f"{A}::1"]
    assert replicas_by_mig(ids, DEVICES) == {MIG: 3}
    assert replicas_by_mig([MIG], DEVICES) == {MIG: 1}
