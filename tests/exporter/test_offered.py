"""The exporter attributes pods for every resource this node's [device-plugin] offers (the one
offer() the plugin serves), renamed ones included, before the plugin's status file names them.
Unprivileged: recorded inventories."""

from __future__ import annotations

from nvct.config import parse_config
from nvct.exporter.run import offered_resources
from nvct.host.inventory import Inventory
from tests.inventories import read_fixture


def inventory(name: str) -> Inventory:
    return Inventory.from_dict(read_fixture(name))


def test_renamed_and_rule_named_resources_are_offered() -> None:
    toml = b"""
[device-plugin.sharing]
rename-by-default = true
[[device-plugin.sharing.gpus]]
devices = ["0"]
replicas = 2
[[device-plugin.sharing.gpus]]
devices = ["1"]
replicas = 3
resource = "nvidia.com/gpu.team-a"
"""
    names = offered_resources(parse_config(toml, source="config.toml"), inventory("h100x4-550"))
    assert set(names) == {"nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/gpu.team-a"}


def test_mig_profiles_under_mixed_and_none_where_single_cannot_serve() -> None:
    mixed = parse_config(b'[device-plugin]\nmig-strategy = "mixed"\n', source="config.toml")
    names = offered_resources(mixed, inventory("a100x8-570-mig"))
    assert "nvidia.com/mig-1g.10gb" in names and "nvidia.com/gpu" in names
    single = parse_config(b'[device-plugin]\nmig-strategy = "single"\n', source="config.toml")
    assert offered_resources(single, inventory("a100x8-570-mig")) == ()  # profiles differ
