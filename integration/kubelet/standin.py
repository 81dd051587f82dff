"""A kubelet stand-in: the kubelet's side of the device plugin API, over real gRPC on Unix
sockets, as the Kubernetes reference describes the kubelet's behaviour (no kubelet can be
installed here; this is built from the public protocol only).

- ``start``: make the device-plugins directory, remove stale sockets (only sockets, as current
  kubelets do), serve Registration on ``kubelet.sock``.
- ``Register``: refuse a version other than ``v1beta1``, a resource name that is not a
  domain-prefixed extended resource outside ``kubernetes.io``, an endpoint that is not a file
  name; dial the plugin's socket (10 s) and call GetDevicePluginOptions before answering; then
  read its ListAndWatch stream for good (a newer registration of a resource replaces it).
- ``allocate`` / ``preferred``: what admission does (PreStartContainer first when asked).
- ``restart``: what a kubelet restart does to the directory: sockets deleted, a new kubelet.sock.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from nvct.kubeapi.deviceplugin import v1beta1_pb2 as api
from nvct.kubeapi.deviceplugin import v1beta1_pb2_grpc as rpc

VERSION = "v1beta1"
_RESOURCE = re.compile(
    r"^([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?)/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


@dataclass
class Registered:
    """A plugin the stand-in accepted."""

    resource: str
    endpoint: str
    options: Any
    at: float
    channel: Any
    stub: Any
    devices: list[Any] = field(default_factory=list)  # the latest ListAndWatch list
    history: list[dict[str, str]] = field(default_factory=list)  # every list: ID -> health
    updates: int = 0
    stream_ended: bool = False


class Kubelet(rpc.RegistrationServicer):  # type: ignore[misc]
    """The stand-in; every public method is safe to call from the test's thread."""

    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / "kubelet.sock"
        self.server: Any = None
        self.plugins: dict[str, Registered] = {}
        self.refused: list[str] = []
        self.changed = threading.Condition()
        # every ListAndWatch message of every registration: (received at, resource, ID -> health)
        self.received: list[tuple[float, str, dict[str, str]]] = []
        self.registrations: list[tuple[float, str]] = []  # (accepted at, resource)

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> Kubelet:
        self.plugin_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        for entry in self.plugin_dir.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(entry.lstat().st_mode):
                    entry.unlink()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        rpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self.server = server
        return self

    def stop(self) -> None:
        with self.changed:
            plugins, self.plugins = list(self.plugins.values()), {}
        for plugin in plugins:
            plugin.channel.close()
        if self.server is not None:
            self.server.stop(grace=None).wait()
            self.server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()

    def restart(self) -> float:
        """Stop, then start as a restarted kubelet does; returns when kubelet.sock is back."""
        self.stop()
        self.start()
        return time.monotonic()

    # --- Registration service ------------------------------------------------------------

    def Register(self, request: Any, context: Any) -> Any:
        problem = self._invalid(request)
        if problem:
            self.refused.append(problem)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        channel = grpc.insecure_channel(f"unix://{self.plugin_dir / request.endpoint}")
        try:
            grpc.channel_ready_future(channel).result(timeout=10)
            stub = rpc.DevicePluginStub(channel)
            options = stub.GetDevicePluginOptions(api.Empty(), timeout=10)
        except (grpc.FutureTimeoutError, grpc.RpcError) as err:
            channel.close()
            message = f"cannot dial the plugin at {request.endpoint}: {err}"
            self.refused.append(message)
            context.abort(grpc.StatusCode.UNAVAILABLE, message)
        plugin = Registered(
            request.resource_name, request.endpoint, options, time.monotonic(), channel, stub
        )
        with self.changed:
            old = self.plugins.get(request.resource_name)
            self.plugins[request.resource_name] = plugin  # the newest registration wins
            self.registrations.append((plugin.at, plugin.resource))
            self.changed.notify_all()
        if old is not None:
            old.channel.close()
        threading.Thread(target=self._watch, args=(plugin,), daemon=True).start()
        return api.Empty()

    def _invalid(self, request: Any) -> str:
        if request.version != VERSION:
            return f"unsupported device plugin API version {request.version!r}"
        name = request.resource_name
        if not _RESOURCE.match(name) or name.split("/")[0].endswith("kubernetes.io"):
            return f"invalid extended resource name {name!r}"
        if not request.endpoint or "/" in request.endpoint:
            return f"endpoint {request.endpoint!r} is not a socket file name"
        return ""

    def _watch(self, plugin: Registered) -> None:
        try:
            for response in plugin.stub.ListAndWatch(api.Empty()):
                at = time.monotonic()
                with self.changed:
                    plugin.devices = list(response.devices)
                    plugin.history.append({d.ID: d.health for d in response.devices})
                    self.received.append((at, plugin.resource, plugin.history[-1]))
                    plugin.updates += 1
                    self.changed.notify_all()
        except (grpc.RpcError, ValueError):  # ValueError: the channel was closed (replaced)
            pass
        with self.changed:
            plugin.stream_ended = True  # kubelet marks all of the resource's devices unhealthy
            self.changed.notify_all()

    # --- what the tests ask ----------------------------------------------------------------

    def wait(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
            return True

    def registered(self, resource: str) -> Registered | None:
        with self.changed:
            return self.plugins.get(resource)

    def devices(self, resource: str) -> dict[str, str]:
        """ID -> health, from the resource's latest ListAndWatch message."""
        plugin = self.registered(resource)
        return {d.ID: d.health for d in plugin.devices} if plugin else {}

    def numa(self, resource: str) -> dict[str, list[int]]:
        plugin = self.registered(resource)
        return {d.ID: [n.ID for n in d.topology.nodes] for d in plugin.devices} if plugin else {}

    def preferred(
        self, resource: str, available: list[str], must: list[str], size: int
    ) -> list[str]:
        plugin = self._plugin(resource)
        request = api.PreferredAllocationRequest(
            container_requests=[
                api.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available,
                    must_include_deviceIDs=must,
                    allocation_size=size,
                )
            ]
        )
        answer = plugin.stub.GetPreferredAllocation(request, timeout=10)
        return list(answer.container_responses[0].deviceIDs)

    def allocate(self, resource: str, ids: list[str]) -> Any:
        """One container's Allocate (kubelet uses container_responses[0])."""
        plugin = self._plugin(resource)
        if plugin.options.pre_start_required:
            plugin.stub.PreStartContainer(api.PreStartContainerRequest(devices_ids=ids), timeout=30)
        request = api.AllocateRequest(
            container_requests=[api.ContainerAllocateRequest(devices_ids=ids)]
        )
        response = plugin.stub.Allocate(request, timeout=10)
        if not response.container_responses:
            raise AssertionError("Allocate answered no container response")
        return response.container_responses[0]

    def _plugin(self, resource: str) -> Registered:
        plugin = self.registered(resource)
        if plugin is None:
            raise AssertionError(f"cannot allocate unregistered device {resource}")
        return plugin


def sockets(directory: Path) -> list[str]:
    return sorted(e.name for e in directory.iterdir() if stat.S_ISSOCK(e.lstat().st_mode))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
