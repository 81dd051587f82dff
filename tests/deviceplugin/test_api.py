"""The .proto keeps the kubelet's wire contract: package, services, rpcs,
field numbers (that the generated modules are current: tests/kubeapi/test_generated_apis.py)."""

from __future__ import annotations

from nvct.kubeapi.deviceplugin import v1beta1_pb2 as api


def test_wire_names_and_numbers() -> None:
    file = api.DESCRIPTOR
    assert file.package == "v1beta1"
    assert set(file.services_by_name) == {"Registration", "DevicePlugin"}
    plugin = file.services_by_name["DevicePlugin"]
    assert [m.name for m in plugin.methods] == [
        "GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate",
        "PreStartContainer",
    ]  # fmt: skip
    numbers = {
        (m.name, f.name): f.number for m in file.message_types_by_name.values() for f in m.fields
    }
    assert numbers[("RegisterRequest", "endpoint")] == 2
    assert numbers[("RegisterRequest", "resource_name")] == 3
    assert numbers[("Device", "topology")] == 3
    assert numbers[("ContainerAllocateResponse", "cdi_devices")] == 5
    assert numbers[("ContainerPreferredAllocationRequest", "allocation_size")] == 3
    assert numbers[("PreStartContainerRequest", "devices_ids")] == 1
