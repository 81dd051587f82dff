"""A read-only CRI v1 client over the runtime's Unix socket (containerd, CRI-O): container ID
→ the pod, namespace and container the kubelet named it after, from ``ListContainers`` and
``ListPodSandbox``. Every call has a deadline, so a wedged runtime never hangs the caller."""

from __future__ import annotations

from typing import Any

from nvct.base.errors import NvctError
from nvct.kubeapi.podresources.ids import Owner
from nvct.kubeapi.unix import is_socket, open_channel

DEFAULT_SOCKET = "/run/containerd/containerd.sock"
TIMEOUT_S = 5.0
SERVICE = "/runtime.v1.RuntimeService/"


class CriError(NvctError):
    """The runtime's CRI cannot be asked."""


class CriClient:
    """One channel to the runtime; ``close`` it when done."""

    def __init__(self, socket: str = DEFAULT_SOCKET, timeout: float = TIMEOUT_S) -> None:
        self.socket = socket
        self.timeout = timeout
        self._grpc, self._channel, self._missing = open_channel(socket)
        if not self._missing:
            from nvct.kubeapi.cri import listing_pb2

            self._pb: Any = listing_pb2

    def owners(self) -> dict[str, Owner]:
        """Container ID → its pod, namespace and container name (every container the runtime
        lists, running or not).

        Raises:
            CriError: no socket, or the runtime did not answer within the timeout.
        """
        sandboxes = self._call("ListPodSandbox", "ListPodSandboxRequest", "ListPodSandboxResponse")
        pods = {s.id: (s.metadata.name, s.metadata.namespace) for s in sandboxes.items}
        answer = self._call("ListContainers", "ListContainersRequest", "ListContainersResponse")
        return {
            c.id: Owner(pods[c.pod_sandbox_id][0], pods[c.pod_sandbox_id][1], c.metadata.name)
            for c in answer.containers
            if c.pod_sandbox_id in pods
        }

    def _call(self, rpc: str, request: str, response: str) -> Any:
        if self._missing:
            raise CriError(f"cannot ask the container runtime's CRI: {self._missing}")
        if not is_socket(self.socket):
            raise CriError(
                f"no container runtime CRI socket at {self.socket}",
                hint="mount the runtime's socket (containerd: /run/containerd/containerd.sock) "
                "or set [exporter] cri-socket",
            )
        call = self._channel.unary_unary(
            SERVICE + rpc,
            request_serializer=getattr(self._pb, request).SerializeToString,
            response_deserializer=getattr(self._pb, response).FromString,
        )
        try:
            return call(getattr(self._pb, request)(), timeout=self.timeout)
        except self._grpc.RpcError as err:
            detail = err.details() if hasattr(err, "details") else str(err)
            raise CriError(
                f"CRI {rpc} at {self.socket} failed: {err.code().name}: {detail}"
            ) from err

    def close(self) -> None:
        """Close the channel."""
        if self._channel is not None:
            self._channel.close()
