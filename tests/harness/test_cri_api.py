"""The CRI subset (integration/cri/runtime_v1.proto) keeps the CRI API's wire contract: package,
services, rpc names and the field numbers (k8s.io/cri-api pkg/apis/runtime/v1/api.proto)."""

from __future__ import annotations

from integration.cri import runtime_v1_pb2 as api


def test_wire_names_and_numbers() -> None:
    file = api.DESCRIPTOR
    assert file.package == "runtime.v1"
    runtime = file.services_by_name["RuntimeService"]
    assert {m.name for m in runtime.methods} >= {
        "Version", "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "CreateContainer",
        "StartContainer", "StopContainer", "RemoveContainer", "ContainerStatus", "ListContainers",
    }  # fmt: skip
    numbers = {
        (m.name, f.name): f.number for m in file.message_types_by_name.values() for f in m.fields
    }
    expected = {
        ("RunPodSandboxRequest", "runtime_handler"): 2,
        ("PodSandboxConfig", "log_directory"): 3,
        ("PodSandboxConfig", "annotations"): 7,
        ("PodSandboxConfig", "linux"): 8,
        ("LinuxPodSandboxConfig", "cgroup_parent"): 1,
        ("LinuxSandboxSecurityContext", "privileged"): 6,
        ("NamespaceOption", "network"): 1,
        ("ContainerConfig", "envs"): 6,
        ("ContainerConfig", "mounts"): 7,
        ("ContainerConfig", "devices"): 8,
        ("ContainerConfig", "annotations"): 10,
        ("ContainerConfig", "log_path"): 11,
        ("ContainerConfig", "linux"): 15,
        ("ContainerConfig", "CDI_devices"): 17,
        ("CreateContainerRequest", "sandbox_config"): 3,
        ("Mount", "readonly"): 3,
        ("Device", "permissions"): 3,
        ("ContainerStatus", "exit_code"): 7,
        ("ContainerStatus", "log_path"): 15,
        ("ContainerStatusResponse", "info"): 2,
        ("StopContainerRequest", "timeout"): 2,
    }
    assert {k: numbers[k] for k in expected} == expected
    assert api.NamespaceMode.Value("NODE") == 2
    assert api.ContainerState.Value("CONTAINER_EXITED") == 2
