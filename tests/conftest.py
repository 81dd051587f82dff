"""Shared fixtures: simulated drivers (built once per session, as root), their recorded
inventories (tests/inventories.py, no root needed) and configs pointing at either."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from nvct.config import Config
from nvct.host.inventory import Inventory
from nvct.host.load import load_inventory
from tests.inventories import RecordedDriver, recorded_driver

SIM_CACHE = Path(os.environ.get("NVCT_SIM_CACHE", "/tmp/nvct-test-simdrivers"))


def _need_sim() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the simulated driver creates device nodes with mknod")
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the simulated driver: apt-get install gcc")


@pytest.fixture(scope="session")
def sim_factory():
    """Build (once) the simulated driver of a preset and return it."""

    def make(name: str):
        _need_sim()
        from integration.simdriver import cached_driver, preset

        return cached_driver(preset(name), SIM_CACHE)

    return make


@pytest.fixture(scope="session")
def h100x4(sim_factory):
    return sim_factory("h100x4-550")


@pytest.fixture(scope="session")
def a100mig(sim_factory):
    return sim_factory("a100x8-570-mig")


@pytest.fixture(scope="session")
def recorded_h100x4(tmp_path_factory) -> RecordedDriver:
    """h100x4-550 as recorded: its roots under a temporary directory, no root needed."""
    return recorded_driver("h100x4-550", tmp_path_factory.mktemp("h100x4-550"))


@pytest.fixture(scope="session")
def recorded_a100mig(tmp_path_factory) -> RecordedDriver:
    return recorded_driver("a100x8-570-mig", tmp_path_factory.mktemp("a100x8-570-mig"))


def sim_config(sim, tmp: Path, **overrides: object) -> Config:
    """A Config whose roots are the simulated driver's, caches and logs under ``tmp``."""
    values: dict[str, object] = {
        "driver_root": sim.driver_root,
        "dev_root": sim.dev_root,
        "proc_root": sim.proc_root,
        "cache_dir": str(tmp / "cache"),
        "log_file": str(tmp / "nvct.log"),
    }
    values.update(overrides)
    return Config(**values)  # type: ignore[arg-type]


def sim_inventory(sim, tmp: Path) -> Inventory:
    return load_inventory(sim_config(sim, tmp), use_cache=False)
