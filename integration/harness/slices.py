"""nvct.dra.publish's Publisher against the stand-in API server: a service account with the
chart's ResourceSlice rules (``SLICE_WRITER``), a ``publisher`` fixture, and ``Running``, the
publisher's loop on a thread that the test stops and joins."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from integration.apiserver import cluster_env
from integration.apiserver.rbac import Rule
from integration.apiserver.server import RESOURCE_SLICES, APIServer
from integration.harness.apiserver import pod_files
from nvct.dra.publish import Publisher
from nvct.kubeapi.client.access import ClusterAccess

NODE = "gpu-node-1"
DRIVER = "gpu.nvct.io"
# deployments/helm/nvct/templates/dra.yaml's rules for slices
SLICE_WRITER = (
    Rule(
        "resource.k8s.io",
        "resourceslices",
        frozenset({"get", "list", "watch", "create", "update", "delete"}),
    ),
)


def make_publisher(
    directory: Path, server: APIServer, monkeypatch: pytest.MonkeyPatch, rules: Any = SLICE_WRITER
) -> Publisher:
    """A Publisher for NODE and DRIVER, in-cluster with a token holding ``rules``."""
    server.add_kind(RESOURCE_SLICES)
    for name, value in cluster_env(server.url).items():
        monkeypatch.setenv(name, value)
    account = pod_files(server, directory / "sa", f"dra-{directory.name}", rules)
    access = ClusterAccess(service_account_dir=str(account))
    return Publisher(
        access.connect(), NODE, DRIVER, server=access.server(), token_file=access.token_file
    )


class Running:
    """A Publisher's ``run`` on its own thread, stopped (and joined) by ``end``."""

    def __init__(self, publisher: Publisher, devices: list[dict[str, Any]]) -> None:
        self.publisher = publisher
        self.stop = threading.Event()
        self.failure: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(devices,), daemon=True)
        self.thread.start()

    def _run(self, devices: list[dict[str, Any]]) -> None:
        try:
            self.publisher.run(devices, self.stop)
        except BaseException as err:
            self.failure.append(err)

    def end(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()


def published(server: APIServer) -> list[dict[str, Any]]:
    """Every ResourceSlice the stand-in holds, as the API returns them."""
    return server.store.list(RESOURCE_SLICES)[1]
