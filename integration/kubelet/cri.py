"""The kubelet's side of the CRI: pods and containers on a real containerd's CRI plugin, over
gRPC with nvct's own CRI v1 subset (integration/cri), built as the kubelet builds them.

- ``CriKubelet.run_pod``: ``RunPodSandbox`` with the pod's metadata, labels and annotations, a
  log directory of its own, the cgroup parent the kubelet gives (``kubepods/<qos>/pod<uid>``,
  cgroupfs driver), the host network (namespace mode NODE: no CNI), and the RuntimeClass's
  handler (``""``: the runtime's default).
- ``container_config``: a container's ``ContainerConfig`` from its device plugin Allocate
  answers, merged over resources as the kubelet's device manager merges them (envs, mounts,
  device specs and annotations keyed by name or container path, the first value winning; CDI
  devices in order, each once), plus the kubelet's own labels and annotations. The pod's
  annotations are never copied into a container's: they reach containerd only in the sandbox
  config, which ``CreateContainer`` carries beside it.
- ``CriKubelet.run``: create, start, wait for the exit, read the CRI log file.
- ``CriKubelet.delete_pod``: StopPodSandbox, then RemovePodSandbox (which removes its
  containers), as the kubelet's pod deletion does.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from integration.cri import runtime_v1_pb2 as cri
from integration.cri import runtime_v1_pb2_grpc as cri_grpc

API_VERSION = "v1"
CGROUP_ROOT = Path("/sys/fs/cgroup")


def cri_version(socket: Path, timeout: float = 10) -> Any:
    """The runtime's ``Version`` answer (raises ``grpc.RpcError`` when it does not answer)."""
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = cri_grpc.RuntimeServiceStub(channel)
        return stub.Version(cri.VersionRequest(version=API_VERSION), timeout=timeout)


@dataclass(frozen=True)
class Pod:
    """A pod the stand-in ran: its sandbox id and config (sent again with each container)."""

    name: str
    uid: str
    sandbox_id: str
    config: Any
    handler: str
    containers: list[str] = field(default_factory=list)

    @property
    def log_directory(self) -> Path:
        return Path(self.config.log_directory)


def merge_allocations(responses: Iterable[Any]) -> dict[str, Any]:
    """The device manager's merge of ContainerAllocateResponses of one container (first wins)."""
    envs: dict[str, str] = {}
    mounts: dict[str, Any] = {}
    devices: dict[str, Any] = {}
    annotations: dict[str, str] = {}
    cdi: list[str] = []
    for response in responses:
        for key, value in response.envs.items():
            envs.setdefault(key, value)
        for mount in response.mounts:
            mounts.setdefault(mount.container_path, mount)
        for device in response.devices:
            devices.setdefault(device.container_path, device)
        for key, value in response.annotations.items():
            annotations.setdefault(key, value)
        cdi.extend(d.name for d in response.cdi_devices if d.name not in cdi)
    return {
        "envs": envs,
        "mounts": list(mounts.values()),
        "devices": list(devices.values()),
        "annotations": annotations,
        "cdi": cdi,
    }


def container_config(
    pod: Pod,
    name: str,
    image: str,
    command: Sequence[str],
    allocations: Iterable[Any] = (),
    *,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[tuple[str, str, bool]] = (),
) -> Any:
    """A container's CRI config as the kubelet builds it. ``env``: the pod spec's variables
    (after the device plugins' in the list, as the kubelet orders them); ``mounts``: its
    volumes as (host path, container path, read-only), e.g. an emptyDir's directory."""
    merged = merge_allocations(allocations)
    envs = [cri.KeyValue(key=k, value=v) for k, v in merged["envs"].items()]
    envs += [cri.KeyValue(key=k, value=v) for k, v in (env or {}).items()]
    volume_mounts = [
        cri.Mount(container_path=dest, host_path=source, readonly=ro) for source, dest, ro in mounts
    ]
    device_mounts = [
        cri.Mount(container_path=m.container_path, host_path=m.host_path, readonly=m.read_only)
        for m in merged["mounts"]
    ]
    annotations = {
        **merged["annotations"],
        "io.kubernetes.container.hash": "5a2c9c51",
        "io.kubernetes.container.restartCount": "0",
        "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
        "io.kubernetes.container.terminationMessagePolicy": "File",
        "io.kubernetes.pod.terminationGracePeriod": "30",
    }
    return cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name=name, attempt=0),
        image=cri.ImageSpec(image=image),
        command=list(command),
        envs=envs,
        mounts=volume_mounts + device_mounts,
        devices=[
            cri.Device(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            )
            for d in merged["devices"]
        ],
        labels={
            "io.kubernetes.container.name": name,
            "io.kubernetes.pod.name": pod.name,
            "io.kubernetes.pod.namespace": pod.config.metadata.namespace,
            "io.kubernetes.pod.uid": pod.uid,
        },
        annotations=annotations,
        log_path=f"{name}/0.log",
        CDI_devices=[cri.CDIDevice(name=n) for n in merged["cdi"]],
    )


@dataclass(frozen=True)
class Exited:
    """A container that ran to its end: exit code, its output (stdout and stderr, in order)
    read back from its CRI log file, and the OCI spec containerd gave the runtime."""

    exit_code: int
    output: str
    reason: str
    spec: dict[str, Any]


def read_cri_log(path: Path) -> str:
    """The text of a CRI log file (``<time> <stream> <F|P> <text>`` lines; P: partial)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 3:
            continue
        text = parts[3] if len(parts) == 4 else ""
        out.append(text if parts[2] == "P" else text + "\n")
    return "".join(out)


class CriKubelet:
    """The stand-in; ``close()`` ends its channel (pods are the tests' to delete)."""

    def __init__(self, socket: Path, log_root: Path) -> None:
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.runtime = cri_grpc.RuntimeServiceStub(self.channel)
        self.log_root = log_root
        self._pods = 0

    def close(self) -> None:
        self.channel.close()

    def version(self) -> Any:
        return self.runtime.Version(cri.VersionRequest(version=API_VERSION), timeout=10)

    def run_pod(
        self,
        name: str,
        *,
        handler: str = "",
        annotations: Mapping[str, str] | None = None,
        qos: str = "besteffort",
        namespace: str = "default",
        privileged: bool = False,
    ) -> Pod:
        """RunPodSandbox of a host-network pod; ``handler``: its RuntimeClass's handler;
        ``privileged``: it may run privileged containers (a DaemonSet such as nvct's)."""
        self._pods += 1
        uid = f"0000{self._pods:04d}-{time.monotonic_ns() % 10**12:012d}-nvct-test"
        logs = self.log_root / f"{namespace}_{name}_{uid}"
        logs.mkdir(parents=True, exist_ok=True)
        config = cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
            log_directory=str(logs),
            labels={
                "io.kubernetes.pod.name": name,
                "io.kubernetes.pod.namespace": namespace,
                "io.kubernetes.pod.uid": uid,
            },
            annotations=dict(annotations or {}),
            linux=cri.LinuxPodSandboxConfig(
                cgroup_parent=f"/kubepods/{qos}/pod{uid}",
                security_context=cri.LinuxSandboxSecurityContext(
                    namespace_options=cri.NamespaceOption(
                        network=cri.NODE, pid=cri.CONTAINER, ipc=cri.POD
                    ),
                    privileged=privileged,
                ),
            ),
        )
        answer = self.runtime.RunPodSandbox(
            cri.RunPodSandboxRequest(config=config, runtime_handler=handler), timeout=120
        )
        return Pod(name, uid, answer.pod_sandbox_id, config, handler)

    def create(self, pod: Pod, config: Any) -> str:
        answer = self.runtime.CreateContainer(
            cri.CreateContainerRequest(
                pod_sandbox_id=pod.sandbox_id, config=config, sandbox_config=pod.config
            ),
            timeout=120,
        )
        pod.containers.append(answer.container_id)
        return str(answer.container_id)

    def status(self, container_id: str) -> Any:
        return self.runtime.ContainerStatus(
            cri.ContainerStatusRequest(container_id=container_id, verbose=True), timeout=30
        )

    def run(self, pod: Pod, config: Any, timeout: float = 60) -> Exited:
        """Create and start the container, wait for it to exit, read what it printed."""
        container = self.create(pod, config)
        self.runtime.StartContainer(cri.StartContainerRequest(container_id=container), timeout=120)
        return self.wait_exited(pod, container, timeout)

    def wait_exited(self, pod: Pod, container: str, timeout: float = 60) -> Exited:
        deadline = time.monotonic() + timeout
        while True:
            answer = self.status(container)
            if answer.status.state == cri.CONTAINER_EXITED:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"container {container} still running after {timeout} s")
            time.sleep(0.05)
        info = json.loads(answer.info.get("info", "{}"))
        log = pod.log_directory / answer.status.log_path
        return Exited(
            answer.status.exit_code,
            read_cri_log(log) if log.is_file() else "",
            answer.status.reason,
            info.get("runtimeSpec", {}),
        )

    def containers(self, pod: Pod | None = None) -> list[Any]:
        filters = cri.ContainerFilter(pod_sandbox_id=pod.sandbox_id) if pod else None
        answer = self.runtime.ListContainers(cri.ListContainersRequest(filter=filters), timeout=30)
        return list(answer.containers)

    def sandboxes(self) -> list[Any]:
        return list(self.runtime.ListPodSandbox(cri.ListPodSandboxRequest(), timeout=30).items)

    def delete_pod(self, pod: Pod) -> None:
        """The kubelet's pod deletion: stop the sandbox (its containers with it), remove it,
        then remove the pod's cgroup (the kubelet's own, which runc leaves), and the QoS and
        ``kubepods`` levels above it once empty (a test host has no kubelet to keep them)."""
        request = {"pod_sandbox_id": pod.sandbox_id}
        self.runtime.StopPodSandbox(cri.StopPodSandboxRequest(**request), timeout=120)
        self.runtime.RemovePodSandbox(cri.RemovePodSandboxRequest(**request), timeout=120)
        for directory in pod_cgroups(pod):
            for level in (directory, directory.parent, directory.parent.parent):
                with contextlib.suppress(FileNotFoundError, OSError):
                    level.rmdir()


def pod_cgroups(pod: Pod) -> list[Path]:
    """The pod's cgroup directory in each mounted hierarchy (v1 controllers, unified)."""
    parent = pod.config.linux.cgroup_parent.lstrip("/")
    return [
        hierarchy / parent
        for hierarchy in sorted(CGROUP_ROOT.iterdir())
        if (hierarchy / parent).is_dir()
    ] + ([CGROUP_ROOT / parent] if (CGROUP_ROOT / parent / "cgroup.procs").exists() else [])
