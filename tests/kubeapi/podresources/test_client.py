"""The client against the kubelet stand-in's pod-resources server over a real Unix socket:
what it asks, what it keeps, and that a missing or wedged kubelet is an error within the
deadline, never a hang."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.kubelet.podresources import Container, PodResources
from nvct.kubeapi.podresources.client import PodResourcesClient, PodResourcesError

GPU = "GPU-aaaaaaaa-0000-0000-0000-000000000000"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PodResources]:
    standin = PodResources(tmp_path / "pr" / "kubelet.sock").start()
    yield standin
    standin.stop()


def test_gpu_devices_held_and_allocatable(server: PodResources) -> None:
    server.set_containers(
        [
            Container("p", "ns", "a", {"nvidia.com/gpu": [GPU], "example.com/nic": ["n0"]}),
            Container("p", "ns", "b", {"nvidia.com/mig-1g.10gb": ["MIG-1"]}),
            Container("q", "ns2", "c", {"example.com/gpu": ["X"]}),
        ]
    )
    server.set_allocatable({"nvidia.com/gpu.shared": [f"{GPU}::0", f"{GPU}::1"], "x/y": ["z"]})
    client = PodResourcesClient(str(server.socket))
    try:
        held = client.gpus_held()
        assert [(h.owner.pod, h.owner.container, h.resource, h.device_id) for h in held] == [
            ("p", "a", "nvidia.com/gpu", GPU),
            ("p", "b", "nvidia.com/mig-1g.10gb", "MIG-1"),
        ]
        assert [h.device_id for h in client.gpus_held(["example.com/gpu"])][-1] == "X"
        assert client.gpus_allocatable() == [f"{GPU}::0", f"{GPU}::1"]
    finally:
        client.close()
    assert server.calls["List"] == 2
    assert server.calls["GetAllocatableResources"] == 1


def test_a_list_answer_beyond_grpcs_default_4_mib_is_read(server: PodResources) -> None:
    ids = [f"GPU-{n:08x}-0000-0000-0000-000000000000::{r}" for n in range(8) for r in range(16)]
    pods = [Container(f"pod-{n}", "busy", f"c-{n}", {"nvidia.com/gpu": ids}) for n in range(1500)]
    server.set_containers(pods)  # 1500 containers x 128 IDs: about 9 MiB on the wire
    client = PodResourcesClient(str(server.socket))
    try:
        held = client.gpus_held()
    finally:
        client.close()
    assert len(held) == 1500 * 128
    assert (held[-1].owner.pod, held[-1].device_id) == ("pod-1499", ids[-1])


def test_no_socket_is_a_one_line_error(tmp_path: Path) -> None:
    client = PodResourcesClient(str(tmp_path / "kubelet.sock"))
    with pytest.raises(PodResourcesError, match=r"no kubelet pod-resources socket at .*fix:"):
        client.gpus_held()
    client.close()


class Wedged(PodResources):
    def List(self, request: Any, context: Any) -> Any:
        time.sleep(3)
        return super().List(request, context)


def test_a_wedged_kubelet_fails_within_the_deadline(tmp_path: Path) -> None:
    server = Wedged(tmp_path / "kubelet.sock").start()
    client = PodResourcesClient(str(server.socket), timeout=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(PodResourcesError, match="DEADLINE_EXCEEDED"):
            client.gpus_held()
        assert time.monotonic() - started < 2
    finally:
        client.close()
        server.stop()


def test_without_grpc_installed_it_is_an_error_not_a_crash(
    server: PodResources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """grpc that cannot be imported (a packaged grpcio built for another Python): the
    exporter then runs without pod labels, saying why and the fix."""
    monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc raises ImportError
    client = PodResourcesClient(str(server.socket))
    with pytest.raises(PodResourcesError, match=r"cannot import grpc.*--no-kubernetes") as err:
        client.gpus_held()
    assert "reinstall the nvct package built for Python" in str(err.value)
    client.close()
    assert server.calls["List"] == 0
