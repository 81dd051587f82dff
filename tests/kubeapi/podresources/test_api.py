"""The pod-resources .proto keeps the kubelet's wire contract: package, service, rpcs,
field numbers (that the generated modules are current: tests/kubeapi/test_generated_apis.py)."""

from __future__ import annotations

from nvct.kubeapi.podresources import v1_pb2 as api


def test_wire_names_and_numbers() -> None:
    file = api.DESCRIPTOR
    assert file.package == "v1"
    assert set(file.services_by_name) == {"PodResourcesLister"}
    lister = file.services_by_name["PodResourcesLister"]
    assert [m.name for m in lister.methods] == ["List", "GetAllocatableResources", "Get"]
    numbers = {
        (m.name, f.name): f.number for m in file.message_types_by_name.values() for f in m.fields
    }
    expected = {
        ("ListPodResourcesResponse", "pod_resources"): 1,
        ("AllocatableResourcesResponse", "devices"): 1,
        ("AllocatableResourcesResponse", "memory"): 3,
        ("PodResources", "containers"): 3,
        ("PodResources", "memory"): 5,
        ("ContainerResources", "devices"): 2,
        ("ContainerResources", "dynamic_resources"): 5,
        ("ContainerDevices", "resource_name"): 1,
        ("ContainerDevices", "device_ids"): 2,
        ("ContainerDevices", "topology"): 3,
        ("ContainerMemory", "topology"): 3,
        ("NUMANode", "ID"): 1,
        ("DynamicResource", "claim_name"): 2,
        ("ClaimResource", "share_id"): 5,
        ("GetPodResourcesRequest", "pod_namespace"): 2,
    }
    assert {k: numbers[k] for k in expected} == expected
    assert ("DynamicResource", "class_name") not in numbers  # removed in 1.31: field 1 reserved
