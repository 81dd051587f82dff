"""offer(config, inventory): the one answer the device plugin serves, the labeller labels and
doctor checks, so what is advertised and what is labelled agree. Unprivileged: a recorded
inventory."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from nvct.config import parse_config
from nvct.host.inventory import Inventory
from nvct.node.offer import offer
from nvct.node.sharing import SharingConfigError
from tests.inventories import read_fixture

SHARED = b"""
[device-plugin]
mig-strategy = "mixed"
[[device-plugin.sharing.gpus]]
devices = ["0:2"]
replicas = 2
[[device-plugin.sharing.gpus]]
devices = ["3"]
replicas = 4
"""


def a100mig() -> Inventory:
    return Inventory.from_dict(read_fixture("a100x8-570-mig"))


def test_the_labels_describe_exactly_what_is_advertised(tmp_path: Path) -> None:
    config = parse_config(SHARED, source="config.toml")
    offered = offer(config, a100mig(), sysfs_root=tmp_path)
    labels = offered.labels()
    resources = offered.resources()
    counted = {k.removesuffix(".count") for k in labels if k.endswith(".count")}
    assert counted == {r.name for r in resources}
    for resource in resources:
        per_gpu = Counter(d.uuid for d in resource.devices)
        # GFD's gpu.count under mixed counts the MIG-enabled GPUs too (2 of the 8 here)
        whole = len(per_gpu) + (2 if resource.name == "nvidia.com/gpu" else 0)
        assert labels[f"{resource.name}.count"] == str(whole), resource.name
        assert labels[f"{resource.name}.replicas"] == str(max(per_gpu.values())), resource.name
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/mig-1g.10gb.replicas"] == "2"


def test_rules_that_do_not_fit_raise_unless_whole_devices_will_do(tmp_path: Path) -> None:
    mps_on_mig = SHARED.replace(b'devices = ["0:2"]', b'devices = ["0:2"]\nstrategy = "mps"')
    config = parse_config(mps_on_mig, source="config.toml")
    with pytest.raises(SharingConfigError, match="strategy mps with mig-strategy mixed"):
        offer(config, a100mig(), sysfs_root=tmp_path)
    whole = offer(config, a100mig(), sysfs_root=tmp_path, strict=False)
    assert whole.plan.shares == {}
    assert all(d.replica == -1 for r in whole.resources() for d in r.devices)


def test_numa_nodes_come_from_the_configured_sysfs(tmp_path: Path) -> None:
    inventory = a100mig()
    bus = inventory.gpus[2].pci_bus_id
    domain, _, rest = bus.lower().partition(":")
    node = tmp_path / "bus/pci/devices" / f"{domain[-4:]}:{rest}" / "numa_node"
    node.parent.mkdir(parents=True)
    node.write_text("1\n")
    toml = f'[device-plugin]\nsysfs-root = "{tmp_path}"\n'.encode()
    offered = offer(parse_config(toml, source="config.toml"), inventory)
    numa = {d.gpu: d.numa_node for r in offered.resources() for d in r.devices}
    assert numa[2] == 1 and numa[3] is None
