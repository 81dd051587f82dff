"""doctor's driver checks on the simulated driver: NVML, ld.so.cache, kernel module,
persistence mode."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nvct.doctor import FAIL, PASS, WARN, driver
from tests.doctor.conftest import context, facts_of, sim_ctx


@pytest.mark.root
def test_nvml_reports_the_driver_always_rediscovered(h100x4, tmp_path) -> None:
    ctx = sim_ctx(h100x4, tmp_path)
    facts, result = driver.probe_nvml(ctx)
    assert result.status == PASS
    assert "reports driver 550.54.15, CUDA 12.4, 4 GPU(s)" in result.message
    assert facts.driver_version == "550.54.15" and len(facts.gpus) == 4
    assert not (tmp_path / "cache").exists()  # doctor never reads or writes the cache
    assert driver.check_kernel_module(ctx, facts).status == PASS


def test_no_driver_root_fails_nvml_and_ldcache(tmp_path) -> None:
    root = tmp_path / "empty-driver"
    (root / "etc").mkdir(parents=True)
    (root / "etc/ld.so.conf").write_text("")
    subprocess.run(["ldconfig", "-X", "-r", str(root)], check=True)
    ctx = context(tmp_path, sim_config_like(root, tmp_path))
    facts, nvml = driver.probe_nvml(ctx)
    assert nvml.status == FAIL and "lists no 64-bit libnvidia-ml.so.1" in nvml.message
    assert "driver-root" in nvml.fix
    ldcache = driver.check_ldcache(ctx, facts)
    assert ldcache.status == FAIL
    assert "no libnvidia-ml.so.1; no libcuda.so.1" in ldcache.message
    assert ldcache.fix.startswith(f"run ldconfig -r {root}")


def sim_config_like(root: Path, tmp: Path) -> Any:
    from nvct.config import Config

    return Config(driver_root=root, dev_root=root, proc_root=root / "proc", cache_dir=str(tmp))


@pytest.mark.root
def test_ldcache_without_libcuda_fails(h100x4, tmp_path) -> None:
    copy = tmp_path / "driver"
    shutil.copytree(
        h100x4.driver_root,
        copy,
        symlinks=True,
        ignore=lambda d, names: (
            [n for n in names if n in ("dev", "proc", "var", "tmp")]
            if Path(d) == h100x4.driver_root
            else []
        ),
    )
    for lib in copy.rglob("libcuda.so*"):
        lib.unlink()
    subprocess.run(["ldconfig", "-X", "-r", str(copy)], check=True)
    ctx = sim_ctx(h100x4, tmp_path, driver_root=copy)
    facts = facts_of(ctx)  # NVML is still there
    result = driver.check_ldcache(ctx, facts)
    assert result.status == FAIL
    assert "lists no libcuda.so.1 of driver 550.54.15" in result.message
    assert result.fix.startswith(f"run ldconfig -r {copy}")


@pytest.mark.root
def test_ldcache_warns_about_an_old_drivers_libcuda_listed_first(h100x4, tmp_path) -> None:
    ctx = sim_ctx(h100x4, tmp_path)
    result = driver.check_ldcache(ctx, facts_of(ctx))
    assert result.status == WARN
    assert "libcuda.so.1 resolves first to /usr/lib/nvidia-535/libcuda.so.1" in result.message
    assert "remove the old driver's libraries" in result.fix


@pytest.mark.root
def test_kernel_module_mismatch_fails_with_reboot(h100x4, tmp_path) -> None:
    proc = tmp_path / "driver-proc"
    shutil.copytree(h100x4.proc_root, proc)
    version = proc / "driver/nvidia/version"
    version.chmod(0o644)
    version.write_text(version.read_text().replace("550.54.15", "545.23.08"))
    ctx = sim_ctx(h100x4, tmp_path, proc_root=proc)
    result = driver.check_kernel_module(ctx, facts_of(ctx))
    assert result.status == FAIL
    assert "kernel module 545.23.08, user-space driver (NVML) 550.54.15" in result.message
    assert "reboot" in result.fix


@pytest.mark.root
def test_persistence_off_on_four_gpus_warns(h100x4, a100mig, tmp_path) -> None:
    ctx = sim_ctx(h100x4, tmp_path)
    result = driver.check_persistence(ctx, facts_of(ctx))
    assert result.status == WARN
    assert "persistence mode is off on 4 of 4 GPUs" in result.message
    assert "nvidia-smi -pm 1" in result.fix and "nvidia-persistenced" in result.fix
    relaxed = sim_ctx(h100x4, tmp_path, many_gpus=8)
    assert driver.check_persistence(relaxed, facts_of(relaxed)).status == PASS
    eight = sim_ctx(a100mig, tmp_path / "a")
    assert "off on 8 of 8 GPUs" in driver.check_persistence(eight, facts_of(eight)).message
