"""A container runtime's read-only CRI listing for tests and benches: ``ListPodSandbox`` and
``ListContainers`` of the CRI v1 ``RuntimeService`` (integration/cri, the CRI API's wire
contract) on a Unix socket, answered from the containers the caller names; every other call
answers UNIMPLEMENTED. For where a real containerd (integration/harness/crinode) is too heavy:
it creates nothing, so the caller puts the containers' processes in their cgroups itself."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from integration.cri import runtime_v1_pb2 as cri
from integration.cri import runtime_v1_pb2_grpc as cri_grpc
from integration.kubelet.unixgrpc import end, serve


@dataclass(frozen=True)
class Listed:
    """One container as the runtime lists it: its ID and the pod the kubelet named it in."""

    id: str  # 64 hex characters, as containerd and CRI-O make them
    pod: str
    namespace: str
    name: str


class CriListing(cri_grpc.RuntimeServiceServicer):  # type: ignore[misc]
    """The stand-in; ``set_containers`` is safe to call while it serves."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.server: Any = None
        self._lock = threading.Lock()
        self._containers: list[Listed] = []
        self.calls: dict[str, int] = {"ListPodSandbox": 0, "ListContainers": 0}

    def start(self) -> CriListing:
        self.server = serve(
            self.socket, lambda server: cri_grpc.add_RuntimeServiceServicer_to_server(self, server)
        )
        return self

    def stop(self) -> None:
        end(self.server, self.socket)
        self.server = None

    def set_containers(self, containers: list[Listed]) -> None:
        with self._lock:
            self._containers = list(containers)

    @staticmethod
    def sandbox_id(c: Listed) -> str:
        """The pod's sandbox ID (one per namespace and pod name)."""
        return f"sandbox-{c.namespace}-{c.pod}"

    def ListPodSandbox(self, request: Any, context: Any) -> Any:
        with self._lock:
            self.calls["ListPodSandbox"] += 1
            pods = {self.sandbox_id(c): c for c in self._containers}
        return cri.ListPodSandboxResponse(
            items=[
                cri.PodSandbox(
                    id=sid,
                    metadata=cri.PodSandboxMetadata(name=c.pod, namespace=c.namespace, uid=sid),
                    state=cri.SANDBOX_READY,
                )
                for sid, c in pods.items()
            ]
        )

    def ListContainers(self, request: Any, context: Any) -> Any:
        with self._lock:
            self.calls["ListContainers"] += 1
            listed = list(self._containers)
        return cri.ListContainersResponse(
            containers=[
                cri.Container(
                    id=c.id,
                    pod_sandbox_id=self.sandbox_id(c),
                    metadata=cri.ContainerMetadata(name=c.name),
                    state=cri.CONTAINER_RUNNING,
                )
                for c in listed
            ]
        )
