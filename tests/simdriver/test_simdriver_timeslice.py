"""The simulated nvidia-smi's compute-policy: --set-timeslice keeps a GPU's time-slice (by
UUID or index) in the control directory, --list reports it back; ``-c`` keeps a GPU's compute
mode there, which NVML and ``--query-gpu=compute_mode`` report; bad values, and a caller
without CAP_SYS_ADMIN, are refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from integration.simdriver import SimDriver, inject


def _smi(driver: SimDriver, ctl: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run(driver, ctl, str(driver.bin_dir / "nvidia-smi"), "compute-policy", *args)


def _run(driver: SimDriver, ctl: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVCT_SIM_")}
    env |= driver.env() | {inject.ENV_CONTROL_DIR: str(ctl)}
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=30, check=False
    )  # fmt: skip


def test_a_gpus_timeslice_is_set_by_uuid_or_index_and_listed(
    h100x4: SimDriver, tmp_path: Path
) -> None:
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    uuids = [g.uuid for g in h100x4.spec.gpus]
    assert [inject.timeslice(ctl, g) for g in range(4)] == [0, 0, 0, 0]
    done = _smi(h100x4, ctl, "-i", uuids[2], "--set-timeslice", "3")
    assert done.returncode == 0, done.stderr
    assert _smi(h100x4, ctl, "-i", "1", "--set-timeslice=1").returncode == 0
    assert [inject.timeslice(ctl, g) for g in range(4)] == [0, 1, 3, 0]
    listed = _smi(h100x4, ctl, "-l")
    assert listed.stdout.splitlines() == [
        f"GPU {uuids[0]}: Timeslice: Default",
        f"GPU {uuids[1]}: Timeslice: Short",
        f"GPU {uuids[2]}: Timeslice: Long",
        f"GPU {uuids[3]}: Timeslice: Default",
    ]
    assert _smi(h100x4, ctl, "-i", uuids[2], "--list").stdout.split()[-1] == "Long"
    assert _smi(h100x4, ctl, "-i", uuids[2], "--set-timeslice", "0").returncode == 0
    assert inject.timeslice(ctl, 2) == 0


def test_bad_values_and_unknown_gpus_are_refused(h100x4: SimDriver, tmp_path: Path) -> None:
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    for value in ("4", "-1", "long", ""):
        done = _smi(h100x4, ctl, "--set-timeslice", value)
        assert done.returncode == 2 and "Invalid timeslice value" in done.stderr, done
    assert _smi(h100x4, ctl, "-i", "GPU-nope", "--set-timeslice", "1").returncode == 6
    assert _smi(h100x4, ctl).returncode == 2
    # the driver's administrator test is CAP_SYS_ADMIN, not the uid
    smi = [str(h100x4.bin_dir / "nvidia-smi"), "compute-policy", "--set-timeslice", "1"]
    env = os.environ | h100x4.env() | {inject.ENV_CONTROL_DIR: str(ctl)}
    done = subprocess.run(
        ["setpriv", "--bounding-set=-sys_admin", *smi],
        env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (4, "Insufficient Permissions")
    assert not (ctl / "timeslice").exists() or not list((ctl / "timeslice").iterdir())


@pytest.fixture
def ctl(tmp_path: Path) -> Path:
    """A private control directory."""
    (tmp_path / "ctl").mkdir()
    return tmp_path / "ctl"


def test_a_gpus_compute_mode_is_set_by_uuid_or_index_and_reported_by_nvml(
    h100x4: SimDriver, ctl: Path
) -> None:
    smi = str(h100x4.bin_dir / "nvidia-smi")
    uuids = [g.uuid for g in h100x4.spec.gpus]
    done = _run(h100x4, ctl, smi, "-i", uuids[1], "-c", "EXCLUSIVE_PROCESS")
    assert done.returncode == 0, done.stderr
    bus = h100x4.spec.gpus[1].pci_bus_id.lower()
    said = done.stdout.splitlines()[0].lower()
    assert said == f"set compute mode to exclusive_process for gpu {bus}."
    assert _run(h100x4, ctl, smi, "-i", "3", "--compute-mode=2").returncode == 0
    assert [inject.compute_mode(ctl, g) for g in range(4)] == [0, 3, 0, 2]
    query = _run(h100x4, ctl, smi, "--query-gpu=uuid,compute_mode", "--format=csv,noheader")
    assert query.stdout.splitlines() == [
        f"{uuids[0]}, Default", f"{uuids[1]}, Exclusive_Process",
        f"{uuids[2]}, Default", f"{uuids[3]}, Prohibited",
    ]  # fmt: skip
    modes = "import pynvml as n; n.nvmlInit(); print([n.nvmlDeviceGetComputeMode(\
n.nvmlDeviceGetHandleByIndex(i)) for i in range(4)])"
    assert _run(h100x4, ctl, sys.executable, "-c", modes).stdout.strip() == "[0, 3, 0, 2]"
    assert _run(h100x4, ctl, smi, "-i", uuids[1], "-c", "default").returncode == 0
    assert inject.compute_mode(ctl, 1) == 0


def test_bad_compute_modes_and_a_caller_without_sys_admin_are_refused(
    h100x4: SimDriver, ctl: Path
) -> None:
    smi = str(h100x4.bin_dir / "nvidia-smi")
    for value in ("4", "1", "EXCLUSIVE_THREAD", "shared", ""):
        done = _run(h100x4, ctl, smi, "-c", value)
        assert done.returncode == 2 and "Invalid compute mode" in done.stderr, done
    assert _run(h100x4, ctl, smi, "-i", "GPU-nope", "-c", "3").returncode == 6
    done = _run(h100x4, ctl, "setpriv", "--bounding-set=-sys_admin", smi, "-c", "3")
    assert (done.returncode, done.stdout.split("\n")[0]) == (4, "Insufficient Permissions")
    assert [inject.compute_mode(ctl, g) for g in range(4)] == [0, 0, 0, 0]
