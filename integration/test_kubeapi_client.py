"""nvct's Kubernetes API client (nvct.kubeapi.client) against the stand-in API server over
HTTPS: in-cluster access with the service account's token and CA, list-then-watch that
resumes after a broken watch and lists again after 410 Gone, errors as one line; and the
stand-in's generic resources (DRA's ResourceSlices: create, update, 409 on a stale
resourceVersion) through the same client."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube import ApiError
from lightkube.resources.core_v1 import Node

from integration.apiserver import cluster_env, service_account
from integration.apiserver.certs import ServingCerts, make_certs
from integration.apiserver.rbac import ADMIN
from integration.apiserver.server import APIServer
from integration.apiserver.store import Kind
from integration.harness.apiserver import (
    apiserver,  # noqa: F401 - fixture
    kube_certs,  # noqa: F401 - fixture
    pod_files,
)
from integration.harness.processes import until
from nvct.kubeapi.client.access import ClusterAccess
from nvct.kubeapi.client.errors import KubeApiError, describe
from nvct.kubeapi.client.reflect import Reflector


@pytest.fixture
def access(
    tmp_path: Path,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    monkeypatch: pytest.MonkeyPatch,
) -> ClusterAccess:
    for name, value in cluster_env(apiserver.url).items():
        monkeypatch.setenv(name, value)
    account = pod_files(apiserver, tmp_path / "sa", "reader-token")
    return ClusterAccess(service_account_dir=str(account))


class Seen:
    """What a Reflector told its caller."""

    def __init__(self) -> None:
        self.syncs: list[dict[str, Any]] = []
        self.events: list[tuple[str, str, dict[str, str]]] = []
        self.errors: list[str] = []

    def sync(self, objects: list[Any]) -> None:
        self.syncs.append({o.metadata.name: dict(o.metadata.labels or {}) for o in objects})

    def event(self, kind: str, obj: Any) -> None:
        self.events.append((kind, obj.metadata.name, dict(obj.metadata.labels or {})))

    def error(self, err: KubeApiError) -> None:
        self.errors.append(err.one_line())


@pytest.fixture
def reflecting(
    access: ClusterAccess,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
) -> Iterator[Seen]:
    apiserver.put_node("n1", {"a": "1"})
    apiserver.put_node("n2")
    seen, stop = Seen(), threading.Event()
    reflector = Reflector(
        access.connect(),
        Node,
        access.server(),
        access.token_file,
        on_sync=seen.sync,
        on_event=seen.event,
        on_error=seen.error,
        fields={"metadata.name": "n1"},
        stop=stop,
    )
    thread = threading.Thread(target=reflector.run, daemon=True)
    thread.start()
    assert until(lambda: seen.syncs == [{"n1": {"a": "1"}}], 10)
    yield seen
    stop.set()
    apiserver.set_node_labels("n1", {"stop": "1"})  # wakes the watch so the thread ends
    thread.join(timeout=10)


def test_list_then_watch_sees_only_the_selected_node(
    reflecting: Seen,
    apiserver: APIServer,  # noqa: F811
) -> None:
    apiserver.set_node_labels("n2", {"b": "2"})
    apiserver.set_node_labels("n1", {"a": "2"})
    assert until(lambda: reflecting.events == [("MODIFIED", "n1", {"a": "2"})], 5)


def test_a_broken_watch_resumes_from_its_resource_version_without_listing_again(
    reflecting: Seen,
    apiserver: APIServer,  # noqa: F811
) -> None:
    apiserver.stop()
    apiserver.set_node_labels("n1", {"a": "while-down"})
    apiserver.start()
    assert until(lambda: ("MODIFIED", "n1", {"a": "while-down"}) in reflecting.events, 5)
    assert len(reflecting.syncs) == 1  # the history still had it: no second list
    assert reflecting.errors and "cannot reach the Kubernetes API server" in reflecting.errors[0]


def test_410_gone_lists_again_and_the_gap_is_not_lost(
    reflecting: Seen,
    apiserver: APIServer,  # noqa: F811
) -> None:
    apiserver.stop()
    apiserver.store.compact()
    apiserver.set_node_labels("n1", {"a": "in-the-gap"})
    apiserver.store.compact()  # that event is gone too: only a new list shows it
    apiserver.start()
    assert until(lambda: reflecting.syncs[-1:] == [{"n1": {"a": "in-the-gap"}}], 5)
    assert len(reflecting.syncs) == 2


def test_a_certificate_from_another_ca_is_refused_in_one_line(
    tmp_path: Path,
    apiserver: APIServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = make_certs(tmp_path / "other-pki")
    for name, value in cluster_env(apiserver.url).items():
        monkeypatch.setenv(name, value)
    account = service_account(tmp_path / "sa", other, "t", "nvct")
    apiserver.auth.add("t", "u", ADMIN)
    client = ClusterAccess(service_account_dir=str(account)).connect()
    with pytest.raises(httpx2.ConnectError) as raised:
        client.get(Node, "n1")
    line = describe(raised.value, apiserver.url, None).one_line()
    assert "has a certificate the CA does not sign" in line and "ca.crt" in line


def test_missing_in_cluster_files_and_variables_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(KubeApiError, match="KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT"):
        ClusterAccess(service_account_dir=str(tmp_path)).connect()
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    with pytest.raises(KubeApiError, match=r"no service account token at .*/token \(fix: "):
        ClusterAccess(service_account_dir=str(tmp_path)).connect()


def test_no_token_is_401_and_the_server_speaks_status_objects(
    apiserver: APIServer,  # noqa: F811
    kube_certs: ServingCerts,  # noqa: F811
) -> None:
    with httpx2.Client(verify=ssl.create_default_context(cafile=str(kube_certs.ca))) as plain:
        answer = plain.get(f"{apiserver.url}/api/v1/nodes")
    assert answer.status_code == 401
    assert answer.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }


SLICES = Kind("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False)


def test_generic_resources_create_update_and_conflict_through_the_client(
    tmp_path: Path,
    apiserver: APIServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the DRA plugin will do with its ResourceSlices: the stand-in serves any kind a
    test registers, with the API server's optimistic concurrency."""
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.models.resource_v1 import ResourcePool, ResourceSliceSpec
    from lightkube.resources.resource_v1 import ResourceSlice

    apiserver.add_kind(SLICES)
    for name, value in cluster_env(apiserver.url).items():
        monkeypatch.setenv(name, value)
    account = service_account(tmp_path / "sa", apiserver.certs, "admin", "nvct")
    apiserver.auth.add("admin", "admin", ADMIN)
    client = ClusterAccess(service_account_dir=str(account)).connect()
    spec = ResourceSliceSpec(
        driver="gpu.nvct.dev",
        pool=ResourcePool(name="node-1", generation=1, resourceSliceCount=1),
        nodeName="node-1",
        devices=[],
    )
    made = client.create(ResourceSlice(metadata=ObjectMeta(name="node-1-gpu"), spec=spec))
    assert made.metadata.resourceVersion and made.spec.pool.generation == 1
    stale = made.metadata.resourceVersion
    made.spec.pool.generation = 2
    updated = client.replace(made)
    assert updated.spec.pool.generation == 2 and updated.metadata.generation == 2
    made.metadata.resourceVersion = stale
    with pytest.raises(ApiError) as raised:
        client.replace(made)
    assert raised.value.status.code == 409 and raised.value.status.reason == "Conflict"
    (listed,) = client.list(ResourceSlice)
    assert listed.spec.pool.generation == 2
    client.delete(ResourceSlice, "node-1-gpu")
    assert list(client.list(ResourceSlice)) == []


def test_a_rotated_token_is_read_again_after_a_401(
    reflecting: Seen,
    apiserver: APIServer,  # noqa: F811
    access: ClusterAccess,
) -> None:
    """The kubelet rotates a projected service account token: the old one is refused (401),
    the client reads the file again and the watch goes on."""
    apiserver.stop()
    apiserver.auth.tokens.pop("reader-token")
    pod_files(apiserver, Path(access.service_account_dir), "rotated-token")
    apiserver.set_node_labels("n1", {"a": "after-rotation"})
    apiserver.start()
    assert until(lambda: ("MODIFIED", "n1", {"a": "after-rotation"}) in reflecting.events, 5), (
        reflecting.errors
    )
    assert apiserver.auth.unauthenticated >= 1  # the old token was sent, and refused
