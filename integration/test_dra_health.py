"""nvct-dra-plugin's health feed (nvct.dra.health) on the simulated driver: the node's one NVML
watch and health policy, as the device plugin runs them, taint the device in the ResourceSlice
on the stand-in API server within 1 s of an XID or a lost GPU, and clear it when the policy says
the GPU is usable again."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.apiserver.server import APIServer
from integration.harness.apiserver import (
    apiserver,  # noqa: F401 - fixture
    kube_certs,  # noqa: F401 - fixture
)
from integration.harness.processes import until
from integration.harness.slices import Running, make_publisher, published
from integration.simdriver import inject
from integration.simdriver.inject import ENV_CONTROL_DIR
from integration.simdriver.sysfs import write_sysfs
from nvct.config import Config
from nvct.dra.devices import dra_devices
from nvct.dra.health import HealthFeed
from nvct.host.arch import host_arch
from nvct.host.discover.libraries import driver_nvml_library
from nvct.host.inventory import Inventory
from tests.inventories import read_fixture


def taints(server: APIServer) -> dict[str, list[str]]:
    return {
        d["name"]: [t["value"] for t in d.get("taints", ())]
        for s in published(server)
        for d in s["spec"]["devices"]
    }


class Fed:
    """The publisher and the health feed, each on its thread, on the simulated H100 x4."""

    def __init__(self, sim: Any, root: Path, server: APIServer, patch: pytest.MonkeyPatch) -> None:
        self.control = root / "control"
        self.control.mkdir()
        patch.setenv(ENV_CONTROL_DIR, str(self.control))  # before NVML is opened
        write_sysfs(sim.spec, root / "sys")
        inventory = Inventory.from_dict(read_fixture("h100x4-550"))
        devices = dra_devices(inventory, sysfs_root=root / "sys")
        self.publisher = make_publisher(root, server, patch)
        self.run = Running(self.publisher, [d.slice_entry() for d in devices])
        assert self.publisher.in_sync.wait(10), self.run.failure
        config = Config()
        config = dataclasses.replace(
            config, device_plugin=dataclasses.replace(config.device_plugin, quiet_period=0.5)
        )
        library = driver_nvml_library(sim.driver_root, host_arch())
        self.feed = HealthFeed(self.publisher, devices, config, library=library)
        self.stop = threading.Event()
        self.failure: list[BaseException] = []
        self.thread = threading.Thread(target=self._feed, daemon=True)
        self.thread.start()

    def _feed(self) -> None:
        try:
            self.feed.run(self.stop)
        except BaseException as err:
            self.failure.append(err)

    def end(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.run.end()
        assert not self.thread.is_alive() and self.failure == []


@pytest.fixture
def fed(
    sim_driver: Any,
    tmp_path: Path,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Fed]:
    made = Fed(sim_driver, tmp_path, apiserver, monkeypatch)
    try:
        yield made
    finally:
        made.end()


def test_an_xid_taints_its_gpu_within_a_second_and_the_quiet_period_clears_it(
    fed: Fed,
    apiserver: APIServer,  # noqa: F811
    sim_driver: Any,
) -> None:
    time.sleep(0.3)  # the first look is done: every GPU answered
    assert all(v == [] for v in taints(apiserver).values())
    start = time.monotonic()
    inject.xid(fed.control, sim_driver.spec.gpus[1].minor, 94)  # contained ECC: transient
    assert until(lambda: taints(apiserver)["gpu-1"] == ["xid-94"], 1.0), taints(apiserver)
    assert time.monotonic() - start < 1.0
    assert taints(apiserver)["gpu-0"] == []
    assert until(lambda: taints(apiserver)["gpu-1"] == [], 3.0)  # 0.5 s quiet, then healthy


def test_a_lost_gpu_is_tainted_within_a_second_and_held_until_reset(
    fed: Fed,
    apiserver: APIServer,  # noqa: F811
    sim_driver: Any,
) -> None:
    time.sleep(0.3)
    start = time.monotonic()
    inject.lose(fed.control, sim_driver.spec.gpus[2].minor)
    assert until(lambda: taints(apiserver)["gpu-2"] == ["gpu-lost"], 1.0), taints(apiserver)
    assert time.monotonic() - start < 1.0
    # the driver's XID 79 came with it: the policy holds the GPU until it was reset, as the
    # device plugin does, even once it answers again
    inject.recover(fed.control, sim_driver.spec.gpus[2].minor)
    assert until(lambda: taints(apiserver)["gpu-2"] == ["xid-79"], 2.0), taints(apiserver)
    time.sleep(1.0)  # past the quiet period
    assert taints(apiserver)["gpu-2"] == ["xid-79"]
