"""A pod-resources v1 client over the kubelet's Unix socket, with a deadline on every call so
a dead or wedged kubelet never hangs the caller."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from typing import Any

from nvct.base.errors import NvctError
from nvct.kubeapi.podresources.ids import Held, Owner, is_gpu_resource

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
TIMEOUT_S = 5.0
# The kubelet sends pod-resources answers up to 16 MiB (dcgm-exporter reads as much); gRPC's
# default 4 MiB would refuse a dense node's List.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class PodResourcesError(NvctError):
    """The kubelet's pod-resources service cannot be asked."""


class PodResourcesClient:
    """One channel to the kubelet; ``close`` it when done."""

    def __init__(self, socket: str = DEFAULT_SOCKET, timeout: float = TIMEOUT_S) -> None:
        self.socket = socket
        self.timeout = timeout
        self._channel: Any = None
        self._stub: Any = None
        try:
            import grpc

            from nvct.kubeapi.podresources import v1_pb2_grpc
        except ImportError as err:
            # Not installed (a source install without them), or the packages' grpcio is built
            # for another Python than this one: no kubelet to ask, which callers handle.
            from nvct.kubeapi.grpc_deps import grpc_unimportable

            self._missing = grpc_unimportable(err)
            return
        self._missing = ""
        self._grpc: Any = grpc
        self._channel = grpc.insecure_channel(
            f"unix://{socket}", options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
        )
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
        if not _is_socket(self.socket):
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


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False
