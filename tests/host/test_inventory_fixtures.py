"""The recorded inventories (tests/fixtures/*.json) are what discovery yields for the simulated
drivers today: the unprivileged plan, CDI, explain and list tests rest on them."""

from __future__ import annotations

import pytest

from tests.inventories import (
    PRESETS,
    REGENERATE,
    difference,
    discover,
    fixture_path,
    read_fixture,
    without_lib32,
)


@pytest.mark.root
@pytest.mark.parametrize("name", PRESETS)
def test_recording_is_what_discovery_yields(name: str, sim_factory) -> None:
    sim = sim_factory(name)
    found = discover(sim)
    recorded = read_fixture(name)
    if sim.lib32_dir is None:  # built without gcc-multilib: no 32-bit libraries to find
        recorded = without_lib32(recorded)
    assert found == recorded, (
        f"{fixture_path(name)} is stale: discovery of the simulated driver {name} yields "
        f"another inventory. If the change is meant, regenerate it: {REGENERATE}, and review "
        f"the diff.\n{difference(recorded, found)}"
    )
