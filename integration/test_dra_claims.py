"""The example claims of deployments/dra/examples, with the chart's DeviceClasses, allocated by
the test allocator (real CEL: cel-python with Kubernetes' extensions; matchAttribute as the
scheduler applies it) against the ResourceSlices nvct's publisher wrote to the stand-in API
server for the simulated presets' GPUs: each example selects the devices it should and no
other, and the NVLink example gets a pair on the NVLink-pairs preset and any two GPUs of an
HGX board's NVSwitches."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from integration.apiserver.server import APIServer
from integration.harness.apiserver import (
    apiserver,  # noqa: F401 - fixture
    kube_certs,  # noqa: F401 - fixture
)
from integration.harness.processes import until
from integration.harness.slices import Running, make_publisher, published
from integration.simdriver import preset
from integration.simdriver.spec import NVSWITCH_BUS_IDS
from integration.simdriver.sysfs import write_sysfs
from nvct.dra.devices import device_name, dra_devices
from nvct.host.inventory import Inventory
from tests.inventories import read_fixture

pytest.importorskip("celpy")
from tests.dra.allocator import allocate, candidates, devices_of

EXAMPLES = Path(__file__).resolve().parents[1] / "deployments" / "dra" / "examples"
GIB = 2**30


def example(name: str) -> dict[str, Any]:
    """The claim's spec of an example file (a template's, or a ResourceClaim's)."""
    doc = next(yaml.safe_load_all((EXAMPLES / name).read_text()))
    return dict(doc["spec"]["spec"] if doc["kind"] == "ResourceClaimTemplate" else doc["spec"])


@functools.cache
def device_classes() -> dict[str, dict[str, Any]]:
    """The chart's DeviceClasses (dra.enabled), by name."""
    from tests.deployments.test_chart import rendered

    return {
        d["metadata"]["name"]: d
        for d in rendered({"dra": {"enabled": True}})
        if d["kind"] == "DeviceClass"
    }


def nvlink_topology(
    name: str, inventory: Inventory
) -> tuple[dict[tuple[int, int], int], dict[int, frozenset[str]]]:
    """What NVML tells the plugin of NVLink: links per pair of GPU indices, and the NVSwitches
    each GPU's links reach (the simulated driver's spec holds each GPU's links by the far
    end's PCI bus ID; its NVSwitches are NVSWITCH_BUS_IDS)."""
    index = {g.pci_bus_id.lower(): g.index for g in inventory.gpus}
    switch_ids = {b.lower() for b in NVSWITCH_BUS_IDS}
    pairs: dict[tuple[int, int], int] = {}
    switches: dict[int, frozenset[str]] = {}
    for sim, gpu in zip(preset(name).gpus, inventory.gpus, strict=True):
        for remote in sim.nvlinks:
            other = index.get(remote.lower())
            if other is not None:
                key = (min(gpu.index, other), max(gpu.index, other))
                pairs[key] = pairs.get(key, 0) + 1
            elif remote.lower() in switch_ids:
                switches[gpu.index] = switches.get(gpu.index, frozenset()) | {remote.lower()}
    return pairs, switches


class Node:
    def __init__(
        self, name: str, root: Path, server: APIServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        sysfs = root / "sys"
        write_sysfs(preset(name), sysfs)
        self.inventory = Inventory.from_dict(read_fixture(name))
        pairs, switches = nvlink_topology(name, self.inventory)
        devices = dra_devices(self.inventory, sysfs_root=sysfs, nvlinks=pairs, switches=switches)
        self.publisher = make_publisher(root, server, monkeypatch)
        self.run = Running(self.publisher, [d.slice_entry() for d in devices])
        assert self.publisher.in_sync.wait(10), self.run.failure
        self.server = server

    def select(self, example_file: str) -> set[str]:
        """The devices each request of the example may get (all requests together)."""
        claim, devices = example(example_file), devices_of(published(self.server))
        return {
            d.name
            for r in claim["devices"]["requests"]
            for d in candidates(r, device_classes(), devices)
        }

    def allocate(
        self, example_file: str, in_use: tuple[str, ...] = ()
    ) -> dict[str, list[str]] | None:
        devices = devices_of(published(self.server))
        taken = [f"gpu.nvct.io/gpu-node-1/{n}" for n in in_use]
        return allocate(example(example_file), device_classes(), devices, in_use=taken)

    def gpus(self, keep: Any = lambda g: True) -> set[str]:
        return {device_name(g) for g in self.inventory.gpus if not g.mig_enabled and keep(g)}


@pytest.fixture
def node(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Node]:
    made = Node(request.param, tmp_path, apiserver, monkeypatch)
    try:
        yield made
    finally:
        made.run.end()


@pytest.mark.parametrize(
    "node", ["h100x4-550", "h100pcie-x8-nvlink-pairs", "a100x8-570-mig"], indirect=True
)
def test_a_gpu_by_product_is_any_h100_and_nothing_else(node: Node) -> None:
    wanted = node.gpus(lambda g: g.name.startswith("NVIDIA H100"))
    assert node.select("gpu-by-product.yaml") == wanted
    got = node.allocate("gpu-by-product.yaml")
    assert (got is None) == (not wanted)
    assert got is None or set(got["gpu"]) <= wanted


@pytest.mark.parametrize("node", ["mixed-ecc-x3", "a100x8-570-mig", "h100x4-550"], indirect=True)
def test_a_gpu_by_memory_has_40gi_and_compute_capability_8_or_newer(node: Node) -> None:
    def enough(g: Any) -> bool:
        major = int(g.compute_capability.split(".")[0])
        return g.memory_mib * 2**20 >= 40 * GIB and major >= 8

    wanted = node.gpus(enough)
    assert wanted  # every preset here has one
    assert node.select("gpu-by-memory.yaml") == wanted
    if node.inventory.gpus[0].name == "NVIDIA L40S":
        assert wanted == {"gpu-0"}  # not the 24 GiB GeForce RTX 4090s


@pytest.mark.parametrize("node", ["h100pcie-x8-nvlink-pairs"], indirect=True)
def test_the_nvlink_example_gets_a_bridged_pair(node: Node) -> None:
    got = node.allocate("nvlink-pair.yaml")
    assert got is not None
    pair = sorted(int(n.split("-")[1]) for n in got["gpus"])
    assert pair[0] % 2 == 0 and pair[1] == pair[0] + 1  # the preset bridges 0-1, 2-3, ...
    # with one GPU of each of the first two pairs taken, the next whole pair is given
    again = node.allocate("nvlink-pair.yaml", in_use=("gpu-1", "gpu-2"))
    assert again == {"gpus": ["gpu-4", "gpu-5"]}


@pytest.mark.parametrize("node", ["h100x8-nvswitch"], indirect=True)
def test_the_nvlink_example_gets_two_gpus_of_an_nvswitch_board(node: Node) -> None:
    """HGX: every GPU reaches the same four NVSwitches, so any two are on one domain."""
    got = node.allocate("nvlink-pair.yaml")
    assert got is not None and len(set(got["gpus"])) == 2
    taken = tuple(f"gpu-{i}" for i in range(6))  # the two left, whichever they are
    assert node.allocate("nvlink-pair.yaml", in_use=taken) == {"gpus": ["gpu-6", "gpu-7"]}
    assert node.allocate("nvlink-pair.yaml", in_use=(*taken, "gpu-7")) is None


@pytest.mark.parametrize("node", ["h100x4-550"], indirect=True)
def test_the_nvlink_example_gets_nothing_where_no_gpu_has_nvlink(node: Node) -> None:
    assert node.select("nvlink-pair.yaml") == node.gpus()  # the class admits them all
    assert node.allocate("nvlink-pair.yaml") is None  # no two share a domain


@pytest.mark.parametrize("node", ["a100x8-570-mig", "h100x4-550"], indirect=True)
def test_a_mig_profile_is_exactly_the_mig_devices_of_that_profile(node: Node) -> None:
    wanted = {
        device_name(g, m) for g in node.inventory.gpus for m in g.migs if m.profile == "3g.40gb"
    }
    assert node.select("mig-profile.yaml") == wanted
    assert (node.allocate("mig-profile.yaml") is None) == (not wanted)


@pytest.mark.parametrize("node", ["a100x8-570-mig"], indirect=True)
def test_the_shared_gpu_is_one_whole_gpu_never_a_mig_gpu(node: Node) -> None:
    assert node.select("shared-gpu.yaml") == node.gpus()
    got = node.allocate("shared-gpu.yaml")
    assert got is not None and len(got["gpu"]) == 1 and got["gpu"][0] in node.gpus()


@pytest.mark.parametrize("node", ["h100x4-550"], indirect=True)
def test_an_unhealthy_gpu_s_taint_keeps_it_from_new_claims(node: Node) -> None:
    node.publisher.health("gpu-0", False, "XID 79 (GPU has fallen off the bus): reset the GPU")
    assert until(lambda: "gpu-0" not in node.select("gpu-by-product.yaml"), 1.0)
    assert node.select("gpu-by-product.yaml") == {"gpu-1", "gpu-2", "gpu-3"}
