"""A kubelet stand-in for DRA: the kubelet's plugin watcher and its DRA manager's calls, over
real gRPC on Unix sockets, as the Kubernetes reference describes them (built from the public
protocol only; no kubelet can be installed here).

- The plugin watcher: polls the ``plugins_registry`` directory; each new socket (a new inode
  or ctime: what the kubelet's file-creation events see) is dialled, asked GetInfo, checked
  (type ``DRAPlugin``, an absolute endpoint, a version the stand-in speaks: ``v1.DRAPlugin``
  preferred, else ``v1beta1.DRAPlugin``), and told the result through
  NotifyRegistrationStatus. A socket that disappears unregisters its driver.
- ``prepare`` / ``unprepare``: NodePrepareResources / NodeUnprepareResources for claims, in the
  version chosen at registration (or the one asked), with the kubelet's 45 s deadline; every
  claim asked must be answered, as the kubelet checks.
- ``restart``: what a kubelet restart does: every registration forgotten, every socket in the
  directory dialled again.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from nvct.kubeapi.dra import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from nvct.kubeapi.registration import registration_pb2 as reg_api
from nvct.kubeapi.registration import registration_pb2_grpc as reg_rpc

SERVICES = {
    "v1.DRAPlugin": (dra_v1_pb2, dra_v1_pb2_grpc),
    "v1beta1.DRAPlugin": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
}
CALL_TIMEOUT_S = 45.0  # the kubelet's per-call deadline for DRA plugins
POLL_S = 0.05


@dataclass
class Driver:
    """A registered DRA driver."""

    name: str
    endpoint: str
    version: str
    versions: tuple[str, ...]
    socket: Path
    inode: int
    channel: Any = field(repr=False, default=None)


@dataclass
class Refusal:
    socket: Path
    error: str


class DraKubelet:
    """The stand-in; every public method is safe to call from the test's thread."""

    def __init__(self, registry_dir: Path) -> None:
        self.registry_dir = registry_dir
        self.drivers: dict[str, Driver] = {}
        self.refused: list[Refusal] = []
        self.registrations = 0
        self.seen: dict[Path, int] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> DraKubelet:
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        self.stopping.clear()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        with self.lock:
            for driver in self.drivers.values():
                driver.channel.close()
            self.drivers.clear()
            self.seen.clear()

    def restart(self) -> None:
        """A kubelet restart: registrations forgotten, the directory's sockets dialled again."""
        self.stop()
        self.start()

    def _watch(self) -> None:
        while not self.stopping.wait(POLL_S):
            found: dict[Path, int] = {}
            with contextlib.suppress(FileNotFoundError):
                for entry in os.scandir(self.registry_dir):
                    if entry.name.endswith(".sock"):
                        with contextlib.suppress(FileNotFoundError):
                            # A socket made again may get the inode back: its ctime differs.
                            st = entry.stat(follow_symlinks=False)
                            found[Path(entry.path)] = hash((st.st_ino, st.st_ctime_ns))
            with self.lock:
                for path in [p for p in self.seen if p not in found]:
                    self._gone(path)
                for path, inode in found.items():
                    if self.seen.get(path) != inode:
                        self.seen[path] = inode
                        self._register(path, inode)

    def _gone(self, path: Path) -> None:
        del self.seen[path]
        for name, driver in list(self.drivers.items()):
            if driver.socket == path:
                driver.channel.close()
                del self.drivers[name]

    def _register(self, path: Path, inode: int) -> None:
        try:
            with grpc.insecure_channel(f"unix://{path}") as channel:
                stub = reg_rpc.RegistrationStub(channel)
                info = stub.GetInfo(reg_api.InfoRequest(), timeout=5)
                error = self._check(info)
                stub.NotifyRegistrationStatus(
                    reg_api.RegistrationStatus(plugin_registered=not error, error=error), timeout=5
                )
        except grpc.RpcError as err:
            self.refused.append(Refusal(path, f"GetInfo failed: {err.code()}"))
            return
        if error:
            self.refused.append(Refusal(path, error))
            return
        version = next(v for v in SERVICES if v in info.supported_versions)
        old = self.drivers.pop(info.name, None)
        if old is not None:
            old.channel.close()
        self.drivers[info.name] = Driver(
            info.name, info.endpoint, version, tuple(info.supported_versions), path, inode,
            grpc.insecure_channel(f"unix://{info.endpoint}"),
        )  # fmt: skip
        self.registrations += 1

    @staticmethod
    def _check(info: Any) -> str:
        if info.type != "DRAPlugin":
            return f"plugin type {info.type!r} is not DRAPlugin"
        if not info.name:
            return "no driver name"
        if not info.endpoint.startswith("/"):
            return f"endpoint {info.endpoint!r} is not an absolute path"
        if not set(info.supported_versions) & set(SERVICES):
            return f"none of the versions {list(info.supported_versions)} is supported"
        return ""

    def driver(self, name: str) -> Driver:
        with self.lock:
            return self.drivers[name]

    def prepare(
        self, driver: str, claims: list[tuple[str, str, str]], version: str | None = None
    ) -> dict[str, Any]:
        """NodePrepareResources for (namespace, uid, name) claims: uid -> that claim's answer."""
        return self._call(driver, "NodePrepareResources", claims, version)

    def unprepare(
        self, driver: str, claims: list[tuple[str, str, str]], version: str | None = None
    ) -> dict[str, Any]:
        """NodeUnprepareResources: uid -> that claim's answer."""
        return self._call(driver, "NodeUnprepareResources", claims, version)

    def _call(
        self, name: str, method: str, claims: list[tuple[str, str, str]], version: str | None
    ) -> dict[str, Any]:
        found = self.driver(name)
        api, rpc = SERVICES[version or found.version]
        request = getattr(api, f"{method}Request")(
            claims=[api.Claim(namespace=ns, uid=uid, name=n) for ns, uid, n in claims]
        )
        answer = getattr(rpc.DRAPluginStub(found.channel), method)(request, timeout=CALL_TIMEOUT_S)
        missing = {uid for _, uid, _ in claims} - set(answer.claims)
        assert not missing, f"{method} left claims unanswered: {sorted(missing)}"
        return dict(answer.claims)
