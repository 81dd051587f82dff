"""The kubelet's pod-resources service (v1 ``PodResourcesLister``) for tests, on its own Unix
socket as the kubelet serves it (``/var/lib/kubelet/pod-resources/kubelet.sock``), built from
the public protocol only. The test says which containers hold which device IDs and what is
allocatable; the stand-in answers ``List``, ``GetAllocatableResources`` and ``Get`` from that,
and counts the calls.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from integration.kubelet.unixgrpc import end, serve
from nvct.kubeapi.podresources import v1_pb2 as api
from nvct.kubeapi.podresources import v1_pb2_grpc as rpc


@dataclass(frozen=True)
class Container:
    """One container and the device IDs it holds, per resource."""

    pod: str
    namespace: str
    name: str
    devices: dict[str, list[str]]  # resource name -> device IDs


class PodResources(rpc.PodResourcesListerServicer):  # type: ignore[misc]
    """The stand-in; ``set_*`` are safe to call from the test's thread while it serves."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.server: Any = None
        self._lock = threading.Lock()
        self._containers: list[Container] = []
        self._allocatable: dict[str, list[str]] = {}
        self.calls: dict[str, int] = {"List": 0, "GetAllocatableResources": 0, "Get": 0}

    def start(self) -> PodResources:
        self.server = serve(
            self.socket, lambda server: rpc.add_PodResourcesListerServicer_to_server(self, server)
        )
        return self

    def stop(self) -> None:
        end(self.server, self.socket)
        self.server = None

    def set_containers(self, containers: list[Container]) -> None:
        with self._lock:
            self._containers = list(containers)

    def set_allocatable(self, devices: dict[str, list[str]]) -> None:
        with self._lock:
            self._allocatable = {k: list(v) for k, v in devices.items()}

    # --- PodResourcesLister -------------------------------------------------------------------

    def List(self, request: Any, context: Any) -> Any:
        with self._lock:
            self.calls["List"] += 1
            pods: dict[tuple[str, str], list[Container]] = {}
            for c in self._containers:
                pods.setdefault((c.namespace, c.pod), []).append(c)
        return api.ListPodResourcesResponse(
            pod_resources=[_pod(ns, name, cs) for (ns, name), cs in pods.items()]
        )

    def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        with self._lock:
            self.calls["GetAllocatableResources"] += 1
            devices = [
                api.ContainerDevices(resource_name=r, device_ids=ids)
                for r, ids in self._allocatable.items()
            ]
        return api.AllocatableResourcesResponse(devices=devices)

    def Get(self, request: Any, context: Any) -> Any:
        with self._lock:
            self.calls["Get"] += 1
            mine = [
                c
                for c in self._containers
                if (c.pod, c.namespace) == (request.pod_name, request.pod_namespace)
            ]
        if not mine:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        return api.GetPodResourcesResponse(
            pod_resources=_pod(request.pod_namespace, request.pod_name, mine)
        )


def _pod(namespace: str, name: str, containers: list[Container]) -> Any:
    return api.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            api.ContainerResources(
                name=c.name,
                devices=[
                    api.ContainerDevices(resource_name=r, device_ids=ids)
                    for r, ids in c.devices.items()
                ],
            )
            for c in containers
        ],
    )
