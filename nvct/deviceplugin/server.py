"""The DevicePlugin gRPC service of one resource, and its registration with the kubelet.

Robust by construction, as the kubelet's behaviour asks: the plugin serves on its socket
before it registers (the kubelet dials back inside Register); a watcher notices the kubelet
restarting (kubelet.sock re-created, or the plugin's own socket deleted) and serves and
registers again; a failed registration is retried with a growing pause, never a crash.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent import futures
from pathlib import Path

import grpc
import structlog

from nvct.deviceplugin.allocate import (
    ANNOTATION_PREFIX,
    AllocationError,
    SharingPolicy,
    allocate,
)
from nvct.deviceplugin.preferred import preferred
from nvct.kubeapi.deviceplugin import v1beta1_pb2 as api
from nvct.kubeapi.deviceplugin import v1beta1_pb2_grpc as rpc
from nvct.node.devices import PluginDevice, Resource
from nvct.node.files import KUBELET_SOCKET
from nvct.node.health.state import HEALTHY

VERSION = "v1beta1"
REGISTER_TIMEOUT_S = 10.0

log = structlog.get_logger("nvct-device-plugin")


class ResourceService(rpc.DevicePluginServicer):  # type: ignore[misc,unused-ignore]
    """The DevicePlugin service of one resource."""

    def __init__(
        self,
        resource: Resource,
        health: Mapping[str, str],
        *,
        strategies: Sequence[str],
        id_strategy: str,
        cdi_names: frozenset[str],
        links: Callable[[PluginDevice, PluginDevice], int],
        pcie: Callable[[PluginDevice, PluginDevice], int] | None = None,
        sharing: SharingPolicy | None = None,
        hidden: Collection[str] = frozenset(),
        annotation_prefix: str = ANNOTATION_PREFIX,
        device_nodes: Mapping[str, Sequence[tuple[str, str]]] | None = None,
    ) -> None:
        self.resource = resource
        self.devices = {d.id: d for d in resource.devices}
        self.sharing = sharing or SharingPolicy()
        self.hidden = hidden  # MPS replicas whose daemon never answered yet: not advertised
        self.replicas = Counter(d.uuid for d in resource.devices if d.replica >= 0)
        self.health = health
        self.strategies = tuple(strategies)
        self.id_strategy = id_strategy
        self.cdi_names = cdi_names
        self.annotation_prefix = annotation_prefix
        self.device_nodes = device_nodes  # None: pass-device-specs off
        self.links = links
        self.pcie = pcie
        self.changed = threading.Condition()
        self.generation = 0
        self.stopping = False

    def signature(self) -> tuple[object, ...]:
        """What the kubelet is told and answered (devices, answer forms, sharing policy): two
        services with one signature answer alike, so a reload keeps the running one. (The
        topology is left out: read from the same GPUs, it is the same.)"""
        nodes = None if self.device_nodes is None else sorted(self.device_nodes.items())
        return (
            self.resource,
            self.strategies,
            self.id_strategy,
            self.cdi_names,
            self.sharing,
            self.annotation_prefix,
            nodes,
        )

    def notify(self) -> None:
        """The devices' health changed: every ListAndWatch stream sends the list again."""
        with self.changed:
            self.generation += 1
            self.changed.notify_all()

    def stop(self) -> None:
        """End the ListAndWatch streams."""
        with self.changed:
            self.stopping = True
            self.changed.notify_all()

    def device_list(self) -> api.ListAndWatchResponse:
        """The full device list, as ListAndWatch sends it each time."""
        out = []
        for d in self.resource.devices:
            if d.id in self.hidden:
                continue
            topology = (
                api.TopologyInfo(nodes=[api.NUMANode(ID=d.numa_node)])
                if d.numa_node is not None
                else None
            )
            out.append(
                api.Device(ID=d.id, health=self.health.get(d.id, HEALTHY), topology=topology)
            )
        return api.ListAndWatchResponse(devices=out)

    def GetDevicePluginOptions(
        self, request: api.Empty, context: grpc.ServicerContext
    ) -> api.DevicePluginOptions:
        return api.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def ListAndWatch(
        self, request: api.Empty, context: grpc.ServicerContext
    ) -> Iterator[api.ListAndWatchResponse]:
        seen = -1
        while context.is_active():
            with self.changed:
                if seen == self.generation and not self.stopping:
                    self.changed.wait(timeout=1.0)
                if self.stopping:
                    return
                if seen == self.generation:
                    continue
                seen = self.generation
            yield self.device_list()

    def GetPreferredAllocation(
        self, request: api.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api.PreferredAllocationResponse:
        answers = []
        for req in request.container_requests:
            candidates = [
                self.devices[i]
                for i in req.available_deviceIDs
                if i in self.devices and self.health.get(i, HEALTHY) == HEALTHY
            ]
            ids = preferred(
                candidates,
                list(req.must_include_deviceIDs),
                req.allocation_size,
                self.links,
                self.replicas,
                pcie=self.pcie,
            )
            answers.append(api.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return api.PreferredAllocationResponse(container_responses=answers)

    def Allocate(
        self, request: api.AllocateRequest, context: grpc.ServicerContext
    ) -> api.AllocateResponse:
        responses = []
        for req in request.container_requests:
            try:
                answer = allocate(
                    list(req.devices_ids),
                    self.devices,
                    self.health,
                    resource=self.resource.name,
                    strategies=self.strategies,
                    id_strategy=self.id_strategy,
                    cdi_names=self.cdi_names,
                    sharing=self.sharing,
                    annotation_prefix=self.annotation_prefix,
                    device_nodes=self.device_nodes,
                )
            except AllocationError as err:
                log.error("allocate_refused", resource=self.resource.name, error=str(err))
                code = (
                    grpc.StatusCode.FAILED_PRECONDITION
                    if err.unhealthy
                    else grpc.StatusCode.INVALID_ARGUMENT
                )
                context.abort(code, f"nvct-device-plugin: {err.one_line()}")
            for warning in answer.warnings:
                log.warning("allocate_warning", resource=self.resource.name, warning=warning)
            log.info(
                "allocated",
                resource=self.resource.name,
                devices=list(req.devices_ids),
                strategies=list(self.strategies),
            )
            responses.append(
                api.ContainerAllocateResponse(
                    envs=answer.envs,
                    mounts=[
                        *(
                            api.Mount(container_path=c, host_path=h, read_only=True)
                            for h, c in answer.mounts
                        ),
                        *(
                            api.Mount(container_path=c, host_path=h, read_only=False)
                            for h, c in answer.writable
                        ),
                    ],
                    annotations=answer.annotations,
                    devices=[
                        api.DeviceSpec(container_path=c, host_path=h, permissions="rw")
                        for h, c in answer.devices
                    ],
                    cdi_devices=[api.CDIDevice(name=n) for n in answer.cdi_devices],
                )
            )
        return api.AllocateResponse(container_responses=responses)

    def PreStartContainer(
        self, request: api.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api.PreStartContainerResponse:
        return api.PreStartContainerResponse()


SOCKET_MODE = 0o600


class Endpoint:
    """One resource's gRPC server on its socket, registered with the kubelet."""

    def __init__(self, service: ResourceService, plugin_dir: Path) -> None:
        self.service = service
        self.plugin_dir = plugin_dir
        self.path = plugin_dir / service.resource.socket_name
        self.server: grpc.Server | None = None
        self.inode = 0

    def serve(self) -> None:
        """Serve on the socket (a stale file of that name is replaced).

        Raises:
            OSError: the path cannot be bound (something else is there), or the socket was
                deleted as soon as it was made (the kubelet sweeping its directory); serving
                again later may succeed.
        """
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self.service.stopping = False
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        rpc.add_DevicePluginServicer_to_server(self.service, server)  # type: ignore[no-untyped-call]
        try:
            bound = server.add_insecure_port(f"unix://{self.path}")
        except RuntimeError as err:  # grpcio raises where older versions returned 0
            bound, detail = 0, str(err)
        else:
            detail = "grpc could not bind it"
        if not bound:
            server.stop(grace=None)
            raise OSError(f"cannot serve on {self.path}: {detail}")
        server.start()
        self.server = server
        # Only root (the kubelet) may dial it, whatever the umask or the directory's mode: the
        # socket answers Allocate, which names any GPU.
        os.chmod(self.path, SOCKET_MODE)
        self.inode = os.stat(self.path).st_ino

    def register(self) -> None:
        """Register with the kubelet (which dials back before it answers).

        Raises:
            grpc.RpcError: the kubelet refused or did not answer.
        """
        with grpc.insecure_channel(f"unix://{self.plugin_dir / KUBELET_SOCKET}") as channel:
            rpc.RegistrationStub(channel).Register(  # type: ignore[no-untyped-call]
                api.RegisterRequest(
                    version=VERSION,
                    endpoint=self.path.name,
                    resource_name=self.service.resource.name,
                    options=api.DevicePluginOptions(
                        pre_start_required=False, get_preferred_allocation_available=True
                    ),
                ),
                timeout=REGISTER_TIMEOUT_S,
            )

    def gone(self) -> bool:
        """Whether the socket was deleted or replaced (the kubelet restarted)."""
        try:
            return os.stat(self.path).st_ino != self.inode
        except FileNotFoundError:
            return True

    def stop(self, grace: float = 0.5) -> None:
        """Stop serving and remove the socket (if it is still ours)."""
        self.service.stop()
        if self.server is not None:
            self.server.stop(grace=grace or None).wait()
            self.server = None
        if not self.gone():
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
