"""nvct-dra-plugin's ResourceSlices (nvct.dra.publish) against the stand-in API server over
HTTPS, through nvct's API client with a service account limited to ResourceSlices: the pool
published with generations and within the API's limits, republished after the kubelet wipes
it, a removed GPU leaves it, nothing deleted on exit, health as device taints where the server
keeps them and as devices left out where it drops them, each within 1 s."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.apiserver.rbac import Rule
from integration.apiserver.server import RESOURCE_SLICES, APIServer
from integration.harness.apiserver import (
    MANAGER_USER,
    apiserver,  # noqa: F401 - fixture
    kube_certs,  # noqa: F401 - fixture
)
from integration.harness.processes import until
from integration.harness.slices import DRIVER, NODE, Running, make_publisher, published
from nvct.dra.publish import Publisher
from nvct.kubeapi.client.errors import KubeApiError


def gpu(index: int) -> dict[str, Any]:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{index:08d}-0000-0000-0000-000000000000"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


@pytest.fixture
def publisher(
    tmp_path: Path,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    monkeypatch: pytest.MonkeyPatch,
) -> Publisher:
    return make_publisher(tmp_path, apiserver, monkeypatch)


@pytest.fixture
def running(publisher: Publisher) -> Iterator[Running]:
    run = Running(publisher, [gpu(i) for i in range(3)])
    try:
        yield run
    finally:
        run.end()


def slices(server: APIServer) -> dict[str, dict[str, Any]]:
    return {s["metadata"]["name"]: s for s in published(server)}


def devices_of(server: APIServer) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in slices(server).values() for d in s["spec"]["devices"]}


def test_the_pool_is_published_once_and_kept_after_a_plain_exit(
    running: Running,
    apiserver: APIServer,  # noqa: F811
) -> None:
    assert running.publisher.in_sync.wait(10), running.failure
    (only,) = slices(apiserver).values()
    spec = only["spec"]
    assert spec["driver"] == DRIVER and spec["nodeName"] == NODE
    assert spec["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1", "gpu-2"]
    assert spec["devices"][0]["capacity"] == {"memory": {"value": "80Gi"}}
    writes = running.publisher.writes
    time.sleep(0.5)  # the watch's own events of that write cause no further write
    assert running.publisher.writes == writes == 1
    running.end()
    assert running.failure == []
    assert len(slices(apiserver)) == 1  # the kubelet wipes them, after its delay
    used = apiserver.auth.used_by(MANAGER_USER)  # the user pod_files registers
    assert ("delete", "resource.k8s.io", "resourceslices") not in used


def test_more_than_128_devices_make_several_slices_of_one_generation(
    publisher: Publisher,
    apiserver: APIServer,  # noqa: F811
) -> None:
    run = Running(publisher, [gpu(i) for i in range(300)])
    try:
        assert publisher.in_sync.wait(10), run.failure
        found = slices(apiserver)
        assert sorted(len(s["spec"]["devices"]) for s in found.values()) == [44, 128, 128]
        assert {
            (s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"])
            for s in found.values()
        } == {(1, 3)}
        publisher.update([gpu(i) for i in range(100)])  # a smaller pool: the surplus goes
        assert until(lambda: len(slices(apiserver)) == 1 and publisher.in_sync.is_set(), 5)
        (left,) = slices(apiserver).values()
        assert left["spec"]["pool"] == {"name": NODE, "generation": 2, "resourceSliceCount": 1}
    finally:
        run.end()


def test_slices_the_kubelet_wipes_are_published_again_within_a_second(
    running: Running,
    apiserver: APIServer,  # noqa: F811
) -> None:
    assert running.publisher.in_sync.wait(10)
    (name,) = slices(apiserver)
    apiserver.store.delete(RESOURCE_SLICES, "", name)
    wiped = time.monotonic()
    assert until(lambda: name in slices(apiserver), 1.0)
    assert time.monotonic() - wiped < 1.0
    assert set(devices_of(apiserver)) == {"gpu-0", "gpu-1", "gpu-2"}


def test_a_wipe_racing_a_write_is_still_republished(
    running: Running,
    apiserver: APIServer,  # noqa: F811
) -> None:
    """The kubelet's wipe can land between the server storing a write and the plugin reading
    its answer: the late answer must not bring back a slice the watch said was deleted."""
    assert running.publisher.in_sync.wait(10)
    apiserver.answer_delay = 0.2
    running.publisher.health("gpu-0", False, "XID 79")
    assert until(lambda: bool(devices_of(apiserver)["gpu-0"].get("taints")), 1)
    (name,) = slices(apiserver)
    apiserver.store.delete(RESOURCE_SLICES, "", name)  # the write's answer is still on its way
    assert until(lambda: name in slices(apiserver), 1.0)
    assert devices_of(apiserver)["gpu-0"]["taints"]


def test_what_the_server_defaults_is_not_written_again_and_again(
    publisher: Publisher,
    apiserver: APIServer,  # noqa: F811
) -> None:
    """A server that fills a field the plugin left out stores a slice that differs from what
    was sent; the plugin takes that as its own write, not as a change to undo (each undo would
    be a new pool generation, for ever)."""

    def default(kind: Any, obj: dict[str, Any]) -> None:
        for device in obj.get("spec", {}).get("devices") or []:
            device.setdefault("allowMultipleAllocations", False)

    apiserver.defaults.append(default)
    run = Running(publisher, [gpu(i) for i in range(2)])
    try:
        assert until(lambda: publisher.writes >= 1, 10), run.failure
        time.sleep(0.5)
        assert publisher.writes == 1 and publisher.in_sync.is_set()
        publisher.update([gpu(0)])  # a real change is still written, once
        assert until(lambda: set(devices_of(apiserver)) == {"gpu-0"}, 1.0)
        time.sleep(0.3)
        assert publisher.writes == 2
    finally:
        run.end()


def test_a_gpu_gone_from_the_node_leaves_the_slice_with_a_new_generation(
    running: Running,
    apiserver: APIServer,  # noqa: F811
) -> None:
    assert running.publisher.in_sync.wait(10)
    running.publisher.update([gpu(0), gpu(2)])
    assert until(lambda: set(devices_of(apiserver)) == {"gpu-0", "gpu-2"}, 1.0)
    (only,) = slices(apiserver).values()
    assert only["spec"]["pool"]["generation"] == 2


def test_another_writer_s_change_is_put_right(
    running: Running,
    apiserver: APIServer,  # noqa: F811
) -> None:
    """A stale or foreign edit of the slice (another plugin instance, a person) is replaced
    by what the devices say, through the stored resourceVersion."""
    assert running.publisher.in_sync.wait(10)
    (name,) = slices(apiserver)
    edited = apiserver.store.get(RESOURCE_SLICES, "", name)
    edited["spec"]["devices"] = edited["spec"]["devices"][:1]
    apiserver.store.update(RESOURCE_SLICES, "", edited)
    assert until(lambda: len(devices_of(apiserver)) == 3, 1.0)


def test_an_unhealthy_device_is_tainted_within_a_second_and_cleared_after(
    running: Running,
    apiserver: APIServer,  # noqa: F811
) -> None:
    assert running.publisher.in_sync.wait(10)
    start = time.monotonic()
    running.publisher.health("gpu-1", False, "XID 79 (GPU has fallen off the bus): reset")
    assert until(lambda: devices_of(apiserver)["gpu-1"].get("taints"), 1.0)
    assert time.monotonic() - start < 1.0
    (taint,) = devices_of(apiserver)["gpu-1"]["taints"]
    assert {k: taint[k] for k in ("key", "value", "effect")} == {
        "key": f"{DRIVER}/unhealthy",
        "value": "xid-79",
        "effect": "NoSchedule",
    }
    assert "taints" not in devices_of(apiserver)["gpu-0"]
    running.publisher.health("gpu-1", True)
    assert until(lambda: "taints" not in devices_of(apiserver)["gpu-1"], 1.0)
    assert not running.publisher.taints_dropped


def test_where_the_server_drops_taints_the_unhealthy_device_leaves_the_slice(
    publisher: Publisher,
    apiserver: APIServer,  # noqa: F811
) -> None:
    apiserver.features["DRADeviceTaints"] = False
    run = Running(publisher, [gpu(i) for i in range(3)])
    try:
        assert publisher.in_sync.wait(10)
        start = time.monotonic()
        publisher.health("gpu-2", False, "NVML does not answer: GPU_IS_LOST")
        assert until(lambda: set(devices_of(apiserver)) == {"gpu-0", "gpu-1"}, 1.0)
        assert time.monotonic() - start < 1.0
        assert publisher.taints_dropped
        publisher.health("gpu-2", True)
        assert until(lambda: "gpu-2" in devices_of(apiserver), 1.0)
    finally:
        run.end()


def test_a_plugin_without_the_rules_to_write_slices_stops_with_one_line(
    tmp_path: Path,
    apiserver: APIServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = (Rule("resource.k8s.io", "resourceslices", frozenset({"list"})),)
    publisher = make_publisher(tmp_path, apiserver, monkeypatch, reader)
    with pytest.raises(KubeApiError) as raised:
        publisher.run([gpu(0)], threading.Event())
    assert raised.value.code == 403
    assert 'cannot watch resource "resourceslices"' in raised.value.one_line()
