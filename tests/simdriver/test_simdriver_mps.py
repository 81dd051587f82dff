"""The simulated nvidia-cuda-mps-control: a daemon on a FIFO in CUDA_MPS_PIPE_DIRECTORY that
keeps its defaults, logs, records every command, and exits on quit."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.harness.processes import until
from integration.simdriver import SimDriver, inject


@pytest.fixture
def mps(h100x4: SimDriver, tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVCT_SIM_", "CUDA_MPS_"))}
    env |= h100x4.env() | {
        inject.ENV_CONTROL_DIR: str(tmp_path / "ctl"),
        "CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "log"),
    }
    (tmp_path / "ctl").mkdir()
    yield env, tmp_path
    pid_file = tmp_path / "pipe/nvidia-cuda-mps-control.pid"
    if pid_file.exists():  # a daemon a failed test left running
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _control(
    driver: SimDriver, env: dict[str, str], stdin: str
) -> subprocess.CompletedProcess[str]:
    exe = str(driver.bin_dir / "nvidia-cuda-mps-control")
    return subprocess.run(
        [exe], input=stdin, env=env, capture_output=True, text=True, timeout=10, check=False
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.split(")")[1].split()[0] != "Z"


def test_daemon_takes_commands_and_quits(
    h100x4: SimDriver, mps: tuple[dict[str, str], Path]
) -> None:
    env, tmp = mps
    exe = str(h100x4.bin_dir / "nvidia-cuda-mps-control")
    assert _control(h100x4, env, "get_server_list\n").stderr.strip() == (
        "Cannot find MPS control daemon process"
    )
    started = subprocess.run([exe, "-d"], env=env, capture_output=True, timeout=10, check=False)
    assert started.returncode == 0  # forks; the parent returns at once
    pid_file = tmp / "pipe/nvidia-cuda-mps-control.pid"
    assert until(lambda: pid_file.exists() and bool(pid_file.read_text()), 10)  # the child's
    pid = int(pid_file.read_text())
    assert _alive(pid)
    assert (tmp / "pipe/control").exists()
    again = subprocess.run(
        [exe, "-d"], env=env, capture_output=True, text=True, timeout=10, check=False
    )
    assert again.returncode == 1 and "already running" in again.stderr

    uuid = h100x4.spec.gpus[0].uuid
    out = _control(
        h100x4,
        env,
        "set_default_active_thread_percentage 25\n"
        f"set_default_device_pinned_mem_limit {uuid} 20389M\n"
        "get_default_active_thread_percentage\n"
        f"get_default_device_pinned_mem_limit {uuid}\n",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["25.0", "25.0", "19G"]  # as driver 580 prints it

    assert _control(h100x4, env, "quit\n").returncode == 0
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid)
    assert not (tmp / "pipe/control").exists()

    pipe = str(tmp / "pipe")
    assert (
        inject.mps_commands(tmp / "ctl")
        == [
            (pipe, "get_server_list"),
            (pipe, "set_default_active_thread_percentage 25"),
            (pipe, f"set_default_device_pinned_mem_limit {uuid} 20389M"),
            (pipe, "get_default_active_thread_percentage"),
            (pipe, f"get_default_device_pinned_mem_limit {uuid}"),
            (pipe, "quit"),
        ][1:]
    )  # the first was refused: no daemon yet
    log = (tmp / "log/control.log").read_text()
    assert "set_default_active_thread_percentage 25" in log
