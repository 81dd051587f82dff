"""The real ``nvct-cli exporter`` process on the simulated driver, scraped over HTTP while the
kubelet stand-in's pod-resources server (integration/kubelet/podresources.py) says which
containers hold which GPUs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from integration.harness.nvct_config import write_nvct_config
from integration.harness.processes import terminate
from integration.harness.skips import need_binary, need_root, require
from integration.kubelet.podresources import Container, PodResources
from integration.simdriver import inject
from nvct.base.atomic import write_atomic
from nvct.node.files import STATUS_FILE
from nvct.node.status import status_bytes

pytestmark = [pytest.mark.root]
GPU, SHARED = "nvidia.com/gpu", "nvidia.com/gpu.shared"


@dataclass(frozen=True)
class Series:
    name: str
    labels: dict[str, str]
    value: float


class Exporter:
    """``nvct-cli exporter`` on any free port, with this test's own NVML control directory."""

    def __init__(self, work: Path, sim: Any, socket_path: Path, interval: float) -> None:
        self.work = work
        self.interval = interval
        self.control = work / "nvml-control"
        self.control.mkdir(parents=True, exist_ok=True)
        config = write_nvct_config(work / "nvct" / "config.toml", sim)
        self.argv = [
            sys.executable, "-m", "nvct.cli.main", "--config", str(config), "exporter",
            "--port", "0", "--address", "127.0.0.1", "--interval", str(interval),
            "--pod-resources-socket", str(socket_path), "--plugin-dir", str(work / "plugins"),
            "--hostname", "node-a",
        ]  # fmt: skip
        self.out = work / "exporter.out"
        self.err = work / "exporter.err"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self) -> Exporter:
        env = {**os.environ, inject.ENV_CONTROL_DIR: str(self.control)}
        with self.out.open("ab") as out, self.err.open("ab") as err:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=err, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.port:
            assert self.proc.poll() is None, self.output()
            self.port = next((e["port"] for e in self.events() if e["event"] == "serving"), 0)
            time.sleep(0.05)
        assert self.port, self.output()
        wait_for(lambda: any(s.name == "DCGM_FI_DEV_GPU_UTIL" for s in self.scrape()), 30)
        return self

    def scrape(self) -> list[Series]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as r:
            text = r.read().decode()
        return [
            # the client's parser appends _total to a counter's samples; the text has none
            Series(family.name if family.type == "counter" else s.name, dict(s.labels), s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]

    def events(self) -> list[dict[str, Any]]:
        lines = self.out.read_text(errors="replace").splitlines() if self.out.exists() else []
        return [json.loads(line) for line in lines if line.startswith("{")]

    def output(self) -> str:
        return "".join(p.read_text(errors="replace") for p in (self.out, self.err) if p.exists())

    def stop(self) -> int:
        assert self.proc is not None
        return terminate(self.proc)


def wait_for(predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def of_gpu(series: list[Series], name: str, uuid: str) -> list[Series]:
    return [s for s in series if s.name == name and s.labels["UUID"] == uuid]


def pod_labels(s: Series) -> tuple[str, str, str]:
    return s.labels["pod"], s.labels["namespace"], s.labels["container"]


@pytest.fixture
def kubelet_socket(tmp_path: Path) -> Path:
    return tmp_path / "pod-resources" / "kubelet.sock"


@pytest.fixture
def pod_resources(kubelet_socket: Path) -> Iterator[PodResources]:
    server = PodResources(kubelet_socket).start()
    yield server
    server.stop()


@pytest.fixture
def exporter_factory(tmp_path: Path, sim_driver: Any, kubelet_socket: Path) -> Iterator[Any]:
    started: list[Exporter] = []

    def make(interval: float) -> Exporter:
        exporter = Exporter(tmp_path, sim_driver, kubelet_socket, interval)
        started.append(exporter)
        return exporter.start()

    yield make
    for exporter in started:
        if exporter.proc is not None:
            exporter.stop()


def two_pods(server: PodResources, uuids: list[str]) -> None:
    """Pod ``train`` holds GPU 0 whole; pod ``serve`` has two containers, each holding one
    time-slicing replica of GPU 1 (4 replicas advertised); GPUs 2 and 3 are free."""
    server.set_containers(
        [
            Container("train-0", "team-a", "trainer", {GPU: [uuids[0]]}),
            Container("serve-0", "team-b", "infer", {SHARED: [f"{uuids[1]}::0"]}),
            Container("serve-0", "team-b", "sidecar", {SHARED: [f"{uuids[1]}::3"]}),
            Container("web-0", "team-c", "nginx", {"example.com/fpga": ["fpga0"]}),
        ]
    )
    server.set_allocatable(
        {
            GPU: [uuids[0], uuids[2], uuids[3]],
            SHARED: [f"{uuids[1]}::{n}" for n in range(4)],
            "example.com/fpga": ["fpga0"],
        }
    )


def test_each_gpu_series_carries_its_pods_labels_and_the_injected_values(
    exporter_factory, pod_resources, sim_driver
) -> None:
    uuids = [g.uuid for g in sim_driver.spec.gpus]
    two_pods(pod_resources, uuids)
    exporter = exporter_factory(interval=0.5)
    control = exporter.control
    inject.set_metrics(control, 0, util=87, util_memory=41, temp=71, power_mw=312500,
                       sm_clock_mhz=1755, memory_used_mib=20480)  # fmt: skip
    inject.set_metrics(control, 1, util=33, temp=55, memory_used_mib=1024)
    total_mib = 81559  # the preset's H100 80GB (free + used)

    def settled() -> bool:
        found = exporter.scrape()
        return [s.value for s in of_gpu(found, "DCGM_FI_DEV_GPU_UTIL", uuids[1])] == [33, 33]

    wait_for(settled, 10)
    found = exporter.scrape()

    gpu0 = {s.name: s for s in found if s.labels.get("UUID") == uuids[0] and "xid" not in s.labels}
    assert pod_labels(gpu0["DCGM_FI_DEV_GPU_UTIL"]) == ("train-0", "team-a", "trainer")
    injected = {
        "DCGM_FI_DEV_GPU_UTIL": 87,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 41,
        "DCGM_FI_DEV_FB_USED": 20480,
        "DCGM_FI_DEV_FB_FREE": total_mib - 20480,
        "DCGM_FI_DEV_GPU_TEMP": 71,
        "DCGM_FI_DEV_POWER_USAGE": 312.5,
        "DCGM_FI_DEV_SM_CLOCK": 1755,
        "DCGM_FI_DEV_XID_ERRORS": 0,
        "nvct_gpu_healthy": 1,
        "nvct_gpu_replicas": 1,
        "DCGM_EXP_XID_ERRORS_COUNT": 0,  # none in the window: one 0 without an xid label
    }
    assert {n: gpu0[n].value for n in injected} == injected
    labels = gpu0["DCGM_FI_DEV_GPU_UTIL"].labels
    assert labels["gpu"] == "0" and labels["device"] == "nvidia0"
    assert labels["pci_bus_id"] == sim_driver.spec.gpus[0].pci_bus_id
    assert labels["modelName"] == sim_driver.spec.gpus[0].name
    assert labels["Hostname"] == "node-a"

    # replica IDs map back to GPU 1: one series per container holding a replica
    gpu1 = of_gpu(found, "DCGM_FI_DEV_GPU_TEMP", uuids[1])
    assert sorted(pod_labels(s) for s in gpu1) == [
        ("serve-0", "team-b", "infer"),
        ("serve-0", "team-b", "sidecar"),
    ]
    assert {s.value for s in gpu1} == {55}
    assert {s.value for s in of_gpu(found, "nvct_gpu_replicas", uuids[1])} == {4}

    # a GPU nobody holds: one series, empty pod labels, NVML's defaults
    for uuid in uuids[2:]:
        (free,) = of_gpu(found, "DCGM_FI_DEV_GPU_TEMP", uuid)
        assert pod_labels(free) == ("", "", "")
        assert free.value == 30
    assert all(s.labels.get("pod") != "web-0" for s in found)  # not a GPU resource

    # an XID: its value, its count, and the GPU's health
    inject.xid(control, 2, 48)
    inject.xid(control, 2, 48)

    def xid_seen() -> bool:
        counts = of_gpu(exporter.scrape(), "DCGM_EXP_XID_ERRORS_COUNT", uuids[2])
        return [(s.labels.get("xid"), s.value) for s in counts] == [("48", 2)]

    wait_for(xid_seen, 10)
    found = exporter.scrape()
    assert [s.value for s in of_gpu(found, "DCGM_FI_DEV_XID_ERRORS", uuids[2])] == [48]
    assert [s.value for s in of_gpu(found, "nvct_gpu_healthy", uuids[2])] == [0]
    assert [s.value for s in of_gpu(found, "DCGM_FI_DEV_XID_ERRORS", uuids[3])] == [0]
    (none,) = of_gpu(found, "DCGM_EXP_XID_ERRORS_COUNT", uuids[3])
    assert "xid" not in none.labels and none.value == 0
    assert none.labels["window_size_in_ms"] == "300000"  # dcgm-exporter's default window
    total = of_gpu(found, "DCGM_EXP_XID_ERRORS_TOTAL", uuids[2])
    assert [(s.labels["xid"], s.value) for s in total] == [("48", 2)]
    assert pod_resources.calls["List"] >= 2  # asked every round, not once
    assert exporter.stop() == 0


def test_a_slow_nvml_does_not_delay_a_scrape(exporter_factory, pod_resources, sim_driver) -> None:
    uuids = [g.uuid for g in sim_driver.spec.gpus]
    two_pods(pod_resources, uuids)
    interval = 2.0
    exporter = exporter_factory(interval=interval)
    inject.set_metrics(exporter.control, 0, util=64)
    wait_for(
        lambda: (
            [s.value for s in of_gpu(exporter.scrape(), "DCGM_FI_DEV_GPU_UTIL", uuids[0])] == [64]
        ),
        10,
    )
    inject.slow(exporter.control, 1.5)  # a round now takes > 20 s (4 GPUs x 5 calls)
    try:
        took = []
        ages = []
        end = time.monotonic() + 3 * interval
        while time.monotonic() < end:
            started = time.monotonic()
            found = exporter.scrape()
            took.append(time.monotonic() - started)
            assert [s.value for s in of_gpu(found, "DCGM_FI_DEV_GPU_UTIL", uuids[0])] == [64]
            assert pod_labels(of_gpu(found, "DCGM_FI_DEV_GPU_UTIL", uuids[0])[0])[0] == "train-0"
            ages += [s.value for s in found if s.name == "nvct_exporter_sample_age_seconds"]
            time.sleep(0.2)
    finally:
        inject.slow(exporter.control, 0)
    assert max(took) < interval, took  # no scrape waits for the sampling round
    assert sorted(took)[len(took) // 2] < interval / 4, took  # and a typical one well under it
    assert max(ages) > interval  # the samples were stale meanwhile, and the gauge says so
    assert exporter.proc is not None and exporter.proc.poll() is None


def test_without_the_kubelet_series_have_no_pod_labels_and_one_warning(
    exporter_factory, kubelet_socket, sim_driver
) -> None:
    uuids = [g.uuid for g in sim_driver.spec.gpus]
    exporter = exporter_factory(interval=0.3)  # the socket does not exist
    time.sleep(1.0)
    # now a dead socket: the file is there, nobody listens
    kubelet_socket.parent.mkdir(parents=True, exist_ok=True)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(kubelet_socket))
    dead.close()
    time.sleep(1.0)
    found = exporter.scrape()
    for uuid in uuids:
        (series,) = of_gpu(found, "DCGM_FI_DEV_GPU_UTIL", uuid)
        assert pod_labels(series) == ("", "", "")
        assert [s.value for s in of_gpu(found, "nvct_gpu_replicas", uuid)] == [1]
    assert [s.value for s in found if s.name == "nvct_exporter_pod_resources_up"] == [0]
    warnings = [e for e in exporter.events() if e["event"] == "pod_resources_unavailable"]
    assert len(warnings) == 1, exporter.output()
    assert str(kubelet_socket) in warnings[0]["error"]
    assert exporter.proc is not None and exporter.proc.poll() is None

    # the kubelet comes (back): labels follow within a round or two
    kubelet_socket.unlink()
    server = PodResources(kubelet_socket).start()
    try:
        two_pods(server, uuids)
        wait_for(
            lambda: (
                [pod_labels(s) for s in of_gpu(exporter.scrape(), "DCGM_FI_DEV_GPU_UTIL", uuids[0])]
                == [("train-0", "team-a", "trainer")]
            ),
            10,
        )
    finally:
        server.stop()
    assert any(e["event"] == "pod_resources_available" for e in exporter.events())


def test_health_follows_a_lost_gpu_and_the_device_plugins_status_file(
    exporter_factory, pod_resources, sim_driver, tmp_path
) -> None:
    uuids = [g.uuid for g in sim_driver.spec.gpus]
    two_pods(pod_resources, uuids)
    exporter = exporter_factory(interval=0.3)

    def health() -> dict[str, float]:
        return {
            s.labels["UUID"]: s.value for s in exporter.scrape() if s.name == "nvct_gpu_healthy"
        }

    assert health() == dict.fromkeys(uuids, 1)
    inject.lose(exporter.control, 3)
    wait_for(lambda: health()[uuids[3]] == 0, 10)
    found = exporter.scrape()
    assert of_gpu(found, "DCGM_FI_DEV_GPU_UTIL", uuids[3]) == []  # no value NVML did not give
    assert [s.value for s in of_gpu(found, "DCGM_FI_DEV_XID_ERRORS", uuids[3])] == [79]
    assert [s.value for s in of_gpu(found, "DCGM_FI_DEV_GPU_UTIL", uuids[2])] == [0]

    # nvct-device-plugin's status file (its format, as it writes it beside its sockets)
    status = {
        "nvidia.com/gpu": [
            {"id": uuids[0], "uuid": uuids[0], "health": "Healthy", "reason": ""},
            {"id": uuids[2], "uuid": uuids[2], "health": "Unhealthy", "reason": "ECC"},
        ]
    }
    (tmp_path / "plugins").mkdir(exist_ok=True)
    (tmp_path / "plugins" / "nvct-device-plugin.status.json").write_text(json.dumps(status))
    wait_for(lambda: health()[uuids[2]] == 0, 10)
    assert health()[uuids[0]] == 1 and health()[uuids[1]] == 1


def test_a_rule_named_resource_the_plugin_records_is_attributed(
    exporter_factory, pod_resources, sim_driver, tmp_path
) -> None:
    uuids = [g.uuid for g in sim_driver.spec.gpus]
    mps = "nvidia.com/gpu.mps"  # the README's sharing rule name; no extra-resources set
    replicas = [f"{uuids[2]}::{n}" for n in range(3)]
    pod_resources.set_containers(
        [
            Container("train-0", "team-a", "trainer", {GPU: [uuids[0]]}),
            Container("mps-0", "team-d", "worker", {mps: [replicas[1]]}),
        ]
    )
    pod_resources.set_allocatable({GPU: [uuids[0], uuids[1], uuids[3]], mps: replicas})
    exporter = exporter_factory(interval=0.3)
    found = exporter.scrape()
    assert [pod_labels(s) for s in of_gpu(found, "DCGM_FI_DEV_GPU_TEMP", uuids[2])] == [
        ("", "", "")
    ]  # no plugin status file yet: a name no rule of NVIDIA's knows
    entry = {"uuid": uuids[2], "sharing": "mps", "health": "Healthy", "reason": ""}
    status = {GPU: [], mps: [dict(entry, id=r) for r in replicas]}
    (tmp_path / "plugins").mkdir(exist_ok=True)
    write_atomic(str(tmp_path / "plugins" / STATUS_FILE), status_bytes(status, {}))

    def attributed() -> bool:
        temps = of_gpu(exporter.scrape(), "DCGM_FI_DEV_GPU_TEMP", uuids[2])
        return [pod_labels(s) for s in temps] == [("mps-0", "team-d", "worker")]

    wait_for(attributed, 10)
    assert [s.value for s in of_gpu(exporter.scrape(), "nvct_gpu_replicas", uuids[2])] == [3]


@pytest.fixture(scope="module")
def mig_driver() -> Any:
    """The A100 preset with MIG on GPUs 0 and 1."""
    require(need_root(), need_binary("gcc"), need_binary("ldconfig"))
    from integration.simdriver import cached_driver, preset

    return cached_driver(preset("a100x8-570-mig"), Path("/tmp/nvct-test-simdrivers"))


def test_mig_devices_are_attributed_to_their_parent_gpu(
    tmp_path, mig_driver, kubelet_socket, pod_resources
) -> None:
    gpus = mig_driver.spec.gpus
    pod_resources.set_containers(
        [
            Container(
                "mig-a", "team-a", "main", {"nvidia.com/mig-3g.40gb": [gpus[0].migs[0].uuid]}
            ),
            Container("mig-b", "team-b", "main", {"nvidia.com/mig-4g.40gb": ["1:0"]}),  # index IDs
        ]
    )
    exporter = Exporter(tmp_path, mig_driver, kubelet_socket, interval=0.3)
    try:
        exporter.start()
        wait_for(
            lambda: (
                {pod_labels(s)[0] for s in exporter.scrape() if s.name == "DCGM_FI_DEV_FB_FREE"}
                == {"mig-a", "mig-b", ""}
            ),
            10,
        )
        found = [s for s in exporter.scrape() if s.name == "DCGM_FI_DEV_FB_FREE"]
        # the GPU's own series: every container holding one of its MIG devices
        owner = {s.labels["UUID"]: pod_labels(s) for s in found if "GPU_I_ID" not in s.labels}
        assert owner[gpus[0].uuid] == ("mig-a", "team-a", "main")
        assert owner[gpus[1].uuid] == ("mig-b", "team-b", "main")
        assert {owner[g.uuid] for g in gpus[2:]} == {("", "", "")}
        assert len(owner) == len(gpus)
        # each MIG device's series: only the container holding that device
        mig = {(s.labels["UUID"], s.labels["GPU_I_ID"]): pod_labels(s)
               for s in found if "GPU_I_ID" in s.labels}  # fmt: skip
        assert mig == {
            **{(g.uuid, str(m.gi)): ("", "", "") for g in gpus[:2] for m in g.migs},
            (gpus[0].uuid, str(gpus[0].migs[0].gi)): ("mig-a", "team-a", "main"),
            (gpus[1].uuid, str(gpus[1].migs[0].gi)): ("mig-b", "team-b", "main"),
        }
    finally:
        exporter.stop()


def test_xids_count_for_their_gpu_on_mig_and_non_ecc_nodes(
    tmp_path, mig_driver, kubelet_socket, pod_resources
) -> None:
    """The exporter registers each GPU for what it supports, as the plugin does: an XID on a
    MIG device counts for its GPU alone; on a node with a GPU without ECC and one without any
    events, the others' XIDs still count; NVML's recovery action shows with its reason."""
    from integration.simdriver import cached_driver, preset

    def health_of(exporter: Exporter, uuid: str) -> tuple[float, list[str]]:
        found = exporter.scrape()
        (healthy,) = [s.value for s in of_gpu(found, "nvct_gpu_healthy", uuid)]
        why = [s.labels["reason"] for s in of_gpu(found, "nvct_gpu_unhealthy_reason", uuid)]
        return healthy, why

    def xid_counts(exporter: Exporter) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for s in exporter.scrape():
            if s.name == "DCGM_EXP_XID_ERRORS_COUNT" and "xid" in s.labels:
                out.setdefault(s.labels["UUID"], {})[s.labels["xid"]] = s.value
        return out

    gpus = mig_driver.spec.gpus
    exporter = Exporter(tmp_path / "mig", mig_driver, kubelet_socket, interval=0.2).start()
    try:
        inject.xid(exporter.control, gpus[0].minor, 94, gi=5, ci=0)
        wait_for(lambda: xid_counts(exporter) == {gpus[0].uuid: {"94": 1}}, 10)
        healthy, why = health_of(exporter, gpus[0].uuid)
        assert (healthy, why) == (
            0,
            ["XID 94 (ROBUST_CHANNEL_CONTAINED_ERROR): restart the application"],
        )
        assert health_of(exporter, gpus[1].uuid) == (1, [])
        inject.set_condition(exporter.control, gpus[3].minor, recovery_action=1)
        wait_for(
            lambda: health_of(exporter, gpus[3].uuid) == (0, ["NVML recovery action: GPU reset"]),
            10,
        )
    finally:
        exporter.stop()
    mixed = cached_driver(preset("mixed-ecc-x3"), Path("/tmp/nvct-test-simdrivers"))
    exporter = Exporter(tmp_path / "mixed", mixed, kubelet_socket, interval=0.2).start()
    try:
        assert not any(e["event"] == "xid_events_unsupported" for e in exporter.events())
        inject.xid(exporter.control, 1, 43)  # the GeForce without ECC
        inject.xid(exporter.control, 0, 31)
        ids = [g.uuid for g in mixed.spec.gpus]
        wait_for(lambda: xid_counts(exporter) == {ids[0]: {"31": 1}, ids[1]: {"43": 1}}, 10)
    finally:
        exporter.stop()
