"""nvct-dra-plugin's two sockets: the registration socket the kubelet's plugin watcher finds in
``plugins_registry`` (``<driver>-reg.sock``: GetInfo, NotifyRegistrationStatus), and the DRA
service in both versions the kubelet speaks (``v1``, ``v1beta1``) on
``<plugins>/<driver>/dra.sock``, both answered by one ``Driver``.

The kubelet dials the registration socket whenever it sees it appear (at its own start too),
so a restarted kubelet needs nothing of the plugin; a socket deleted under the plugin (a wiped
directory) is served again by ``Sockets.watch``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent import futures
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import structlog

from nvct.dra.driver import ClaimRef, Driver
from nvct.kubeapi.dra import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from nvct.kubeapi.registration import registration_pb2 as reg_api
from nvct.kubeapi.registration import registration_pb2_grpc as reg_rpc

PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
SOCKET_MODE = 0o600
SUN_PATH_MAX = 107  # sockaddr_un's sun_path, less its NUL
WATCH_S = 1.0

log = structlog.get_logger("nvct-dra-plugin")


def _servicer(api: ModuleType, rpc: ModuleType, driver: Driver) -> Any:
    """The DRAPlugin service of one version (the messages of both are alike field for field)."""

    class Service(rpc.DRAPluginServicer):  # type: ignore[misc,name-defined,unused-ignore]
        def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
            answer = api.NodePrepareResourcesResponse()
            for claim in request.claims:
                devices, error = driver.prepare(ClaimRef(claim.namespace, claim.uid, claim.name))
                entry = answer.claims[claim.uid]
                entry.error = error
                for d in devices:
                    entry.devices.add(
                        request_names=d.request_names, pool_name=d.pool, device_name=d.device,
                        cdi_device_ids=d.cdi_device_ids,
                    )  # fmt: skip
            return answer

        def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
            answer = api.NodeUnprepareResourcesResponse()
            for claim in request.claims:
                error = driver.unprepare(ClaimRef(claim.namespace, claim.uid, claim.name))
                answer.claims[claim.uid].error = error
            return answer

    return Service()


class Registration(reg_rpc.RegistrationServicer):  # type: ignore[misc,unused-ignore]
    """What the kubelet's plugin watcher asks, and what it says back."""

    def __init__(self, driver: str, endpoint: Path) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.registered = threading.Event()

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        return reg_api.PluginInfo(
            type=PLUGIN_TYPE, name=self.driver, endpoint=str(self.endpoint),
            supported_versions=list(SUPPORTED_VERSIONS),
        )  # fmt: skip

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.plugin_registered:
            log.info("registered", driver=self.driver)
            self.registered.set()
        else:
            log.error("registration_refused", driver=self.driver, error=request.error)
            self.registered.clear()
        return reg_api.RegistrationStatusResponse()


def socket_paths(driver: str, registry_dir: Path, plugins_dir: Path) -> tuple[Path, Path]:
    """(registration socket, DRA service socket): the kubelet's conventions."""
    return registry_dir / f"{driver}-reg.sock", plugins_dir / driver / "dra.sock"


class Sockets:
    """The two sockets' gRPC server, served again when either socket is deleted."""

    def __init__(self, driver: Driver, registry_dir: Path, plugins_dir: Path) -> None:
        self.driver = driver
        self.reg_path, self.dra_path = socket_paths(driver.name, registry_dir, plugins_dir)
        self.registration = Registration(driver.name, self.dra_path)
        self.server: grpc.Server | None = None
        self.inodes: tuple[int, int] = (0, 0)

    def serve(self) -> None:
        """Serve both sockets (stale files of those names replaced).

        Raises:
            OSError: a path cannot be bound.
        """
        self.stop()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        for api, rpc in ((dra_v1_pb2, dra_v1_pb2_grpc), (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)):
            rpc.add_DRAPluginServicer_to_server(_servicer(api, rpc, self.driver), server)
        reg_rpc.add_RegistrationServicer_to_server(self.registration, server)  # type: ignore[no-untyped-call]
        # The registration socket is bound under a hidden name and renamed into place once
        # served with its mode: the kubelet's watcher dials it the moment it appears.
        staged = self.reg_path.with_name(f".{self.reg_path.name}.new")
        for path in (self.dra_path, staged):
            self._bind(server, path)
        server.start()
        for path in (self.dra_path, staged):
            os.chmod(path, SOCKET_MODE)  # only root (the kubelet) may prepare claims
        os.replace(staged, self.reg_path)
        self.server = server
        self.inodes = (os.stat(self.dra_path).st_ino, os.stat(self.reg_path).st_ino)
        log.info("serving", registration=str(self.reg_path), endpoint=str(self.dra_path))

    @staticmethod
    def _bind(server: grpc.Server, path: Path) -> None:
        if len(os.fsencode(path)) > SUN_PATH_MAX:
            server.stop(grace=None)
            raise OSError(
                f"cannot serve on {path}: longer than a Unix socket path may be "
                f"({SUN_PATH_MAX} bytes); use shorter --registry-dir/--plugins-dir"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        try:
            bound = server.add_insecure_port(f"unix://{path}")
        except RuntimeError as err:  # grpcio raises where older versions returned 0
            server.stop(grace=None)
            raise OSError(f"cannot serve on {path}: {err}") from err
        if not bound:
            server.stop(grace=None)
            raise OSError(f"cannot serve on {path}: grpc could not bind it")

    def gone(self) -> bool:
        """Whether either socket was deleted or replaced."""
        try:
            now = (os.stat(self.dra_path).st_ino, os.stat(self.reg_path).st_ino)
        except FileNotFoundError:
            return True
        return now != self.inodes

    def watch(self, stop: threading.Event) -> None:
        """Until ``stop``: serve again whenever a socket is gone."""
        while not stop.wait(WATCH_S):
            if self.gone():
                log.warning("socket_gone", detail="serving and announcing again")
                try:
                    self.serve()
                except OSError as err:
                    log.error("serve_failed", error=str(err))

    def stop(self) -> None:
        """Stop serving and remove the sockets that are still ours."""
        if self.server is None:
            return
        ours = not self.gone()  # before grpc's shutdown, which may unlink what it bound
        self.server.stop(grace=0.5).wait()
        self.server = None
        if ours:
            for path in (self.reg_path, self.dra_path):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
