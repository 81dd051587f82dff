"""Shared fixtures: simulated drivers (built once per session, as root), their recorded
inventories (tests/inventories.py, no root needed) and configs pointing at either."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from nvct.config import Config
from nvct.config.container import Log
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
        "log": Log(file=str(tmp / "nvct.log")),
    }
    values.update(overrides)
    return Config(**values)  # type: ignore[arg-type]


def sim_inventory(sim, tmp: Path) -> Inventory:
    return load_inventory(sim_config(sim, tmp), use_cache=False)


# Nodes of the optional NVIDIA features (GDS, MOFED, NVSwitch, GDRCopy, IMEX): (path, major,
# minor). The majors are made up (no driver answers them); tests check paths and numbers.
FEATURE_NODES = (
    ("dev/nvidia-fs0", 245, 0),
    ("dev/nvidia-fs1", 245, 1),
    ("dev/infiniband/uverbs0", 231, 192),
    ("dev/infiniband/rdma_cm", 10, 122),
    ("dev/nvidia-nvswitchctl", 236, 255),
    ("dev/nvidia-nvswitch0", 236, 0),
    ("dev/gdrdrv", 237, 0),
    ("dev/nvidia-caps-imex-channels/channel0", 234, 0),
    ("dev/nvidia-caps-imex-channels/channel1", 234, 1),
)
IMEX_MAJOR = 234
DRM_MAJOR = 226


def with_feature_nodes(sim, tmp: Path) -> tuple[Path, Path]:
    """A copy of ``sim``'s dev and proc roots under ``tmp`` that also has ``FEATURE_NODES``,
    GPU 1's DRM nodes and the IMEX channel driver in ``devices``: (dev root, proc root)."""
    import subprocess

    dev_root, proc_root = tmp / "featdev", tmp / "featproc"
    dev_root.mkdir()
    subprocess.run(["cp", "-a", f"{sim.dev_root}/dev", str(dev_root)], check=True)
    subprocess.run(["cp", "-a", str(sim.proc_root), str(proc_root)], check=True)
    for rel, major, minor in FEATURE_NODES:
        path = dev_root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(path, 0o20666, os.makedev(major, minor))
    # GPU 1's DRM nodes, named by PCI bus id as udev names them.
    domain, _, rest = sim.spec.gpus[1].pci_bus_id.partition(":")
    bus = f"{int(domain, 16):04x}:{rest.lower()}"
    dri = dev_root / "dev/dri"
    (dri / "by-path").mkdir(parents=True)
    for name, minor, kind in (("card1", 1, "card"), ("renderD129", 129, "render")):
        os.mknod(dri / name, 0o20666, os.makedev(DRM_MAJOR, minor))
        (dri / "by-path" / f"pci-{bus}-{kind}").symlink_to(f"../{name}")
    devices = proc_root / "devices"
    devices.write_text(
        devices.read_text().replace(
            "Character devices:\n", f"Character devices:\n{IMEX_MAJOR} nvidia-caps-imex-channels\n"
        )
    )
    return dev_root, proc_root
