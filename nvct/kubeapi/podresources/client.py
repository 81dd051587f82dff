"""A pod-resources v1 client over the kubelet's Unix socket, with a deadline on every call so
a dead or wedged kubelet never hangs the caller."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nvct.base.errors import NvctError
from nvct.kubeapi.podresources.ids import Held, Owner, is_gpu_resource
from nvct.kubeapi.unix import is_socket, open_channel

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
TIMEOUT_S = 5.0


class PodResourcesError(NvctError):
    """The kubelet's pod-resources service cannot be asked."""


class PodResourcesClient:
    """One channel to the kubelet; ``close`` it when done."""

    def __init__(self, socket: str = DEFAULT_SOCKET, timeout: float = TIMEOUT_S) -> None:
        self.socket = socket
        self.timeout = timeout
        self._stub: Any = None
        self._grpc, self._channel, self._missing = open_channel(socket)
        if self._missing:
            return
        from nvct.kubeapi.podresources import v1_pb2_grpc

        self._stub = v1_pb2_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]

    def gpus_held(self, extra_resources: Iterable[str] = ()) -> list[Held]:
        """Every GPU device ID a container holds (``List``), with its pod, namespace and
        container.

        Raises:
            PodResourcesError: no socket, or the kubelet did not answer within the timeout.
        """
        answer = self._call("List", "ListPodResourcesRequest")
        extra = tuple(extra_resources)
        return [
            Held(Owner(pod.name, pod.namespace, container.name), devices.resource_name, device_id)
            for pod in answer.pod_resources
            for container in pod.containers
            for devices in container.devices
            if is_gpu_resource(devices.resource_name, extra)
            for device_id in devices.device_ids
        ]

    def gpus_allocatable(self, extra_resources: Iterable[str] = ()) -> list[str]:
        """The GPU device IDs the kubelet can allocate (``GetAllocatableResources``: healthy
        devices only).

        Raises:
            PodResourcesError: as ``gpus_held``.
        """
        answer = self._call("GetAllocatableResources", "AllocatableResourcesRequest")
        extra = tuple(extra_resources)
        return [
            device_id
            for devices in answer.devices
            if is_gpu_resource(devices.resource_name, extra)
            for device_id in devices.device_ids
        ]

    def _call(self, rpc: str, request: str) -> Any:
        if self._missing:
            raise PodResourcesError(
                f"cannot ask the kubelet's pod-resources API: {self._missing}",
                hint="meanwhile --no-kubernetes turns pod labels off",
            )
        if not is_socket(self.socket):
            raise PodResourcesError(
                f"no kubelet pod-resources socket at {self.socket}",
                hint="mount /var/lib/kubelet/pod-resources (read-only) or set the socket path",
            )
        from nvct.kubeapi.podresources import v1_pb2

        try:
            return getattr(self._stub, rpc)(getattr(v1_pb2, request)(), timeout=self.timeout)
        except self._grpc.RpcError as err:
            detail = err.details() if hasattr(err, "details") else str(err)
            raise PodResourcesError(
                f"pod-resources {rpc} at {self.socket} failed: {err.code().name}: {detail}"
            ) from err

    def close(self) -> None:
        """Close the channel."""
        if self._channel is not None:
            self._channel.close()
