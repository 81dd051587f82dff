"""The CRI kubelet stand-in builds a container's CRI config from device plugin answers as the
kubelet's device manager does (integration/kubelet/cri.py): merged over resources, the first
value of a variable, mount, device or annotation winning, CDI names once each in order; pod
annotations never copied into the container's."""

from __future__ import annotations

from integration.cri import runtime_v1_pb2 as cri
from integration.kubelet.cri import Pod, container_config
from nvct.kubeapi.deviceplugin import v1beta1_pb2 as dp


def device(host: str, permissions: str) -> dp.DeviceSpec:
    return dp.DeviceSpec(container_path="/dev/nvidia0", host_path=host, permissions=permissions)


def test_answers_of_two_resources_merge_first_value_wins() -> None:
    gpu = dp.ContainerAllocateResponse(
        envs={"NVIDIA_VISIBLE_DEVICES": "GPU-a", "ONLY_GPU": "1"},
        mounts=[dp.Mount(container_path="/var/run/x/GPU-a", host_path="/dev/null", read_only=True)],
        devices=[device("/dev/nvidia0", "rw")],
        annotations={"cdi.k8s.io/gpu": "k/gpu=GPU-a"},
        cdi_devices=[dp.CDIDevice(name="k/gpu=GPU-a")],
    )  # fmt: skip
    mig = dp.ContainerAllocateResponse(
        envs={"NVIDIA_VISIBLE_DEVICES": "MIG-b"},  # lost, as NVIDIA's issue 728 says
        mounts=[dp.Mount(container_path="/var/run/x/GPU-a", host_path="/tmp/other")],
        devices=[device("/dev/other", "r")],
        annotations={"cdi.k8s.io/gpu": "k/gpu=MIG-b", "cdi.k8s.io/mig": "k/mig=MIG-b"},
        cdi_devices=[dp.CDIDevice(name="k/gpu=GPU-a"), dp.CDIDevice(name="k/mig=MIG-b")],
    )  # fmt: skip
    sandbox = cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name="p", uid="u", namespace="ns"),
        annotations={"cdi.k8s.io/mine": "k/gpu=all"},
    )
    config = container_config(
        Pod("p", "u", "sandbox", sandbox, "nvidia"), "c", "img", ["true"], [gpu, mig],
        env={"USER_VAR": "x"},
    )  # fmt: skip
    envs = [(e.key, e.value) for e in config.envs]
    assert dict(envs) == {"NVIDIA_VISIBLE_DEVICES": "GPU-a", "ONLY_GPU": "1", "USER_VAR": "x"}
    assert envs[-1] == ("USER_VAR", "x") and len(envs) == 3  # the pod spec's after the plugins'
    assert [(m.host_path, m.container_path, m.readonly) for m in config.mounts] == [
        ("/dev/null", "/var/run/x/GPU-a", True)
    ]
    assert [(d.host_path, d.permissions) for d in config.devices] == [("/dev/nvidia0", "rw")]
    assert config.annotations["cdi.k8s.io/gpu"] == "k/gpu=GPU-a"
    assert config.annotations["cdi.k8s.io/mig"] == "k/mig=MIG-b"
    assert "cdi.k8s.io/mine" not in config.annotations
    assert [d.name for d in config.CDI_devices] == ["k/gpu=GPU-a", "k/mig=MIG-b"]
    assert config.log_path == "c/0.log" and config.labels["io.kubernetes.pod.uid"] == "u"
