"""The simulated NVML's compute processes and their utilization samples answer only the
processes in the caller's PID namespace, under their pid there, as the driver does: real
processes in real PID namespaces (``unshare --pid``), NVML asked from the host's, from the
processes' own and from an unrelated namespace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.harness.processes import terminate
from integration.harness.skips import need_binary, need_root, require
from integration.simdriver import SimDriver, cached_driver, inject, preset

pytestmark = [pytest.mark.root]

_PROBE = r"""
import json, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
procs = sorted((p.pid, p.usedGpuMemory >> 20) for p in n.nvmlDeviceGetComputeRunningProcesses(h))
try:
    util = sorted((s.pid, s.smUtil) for s in n.nvmlDeviceGetProcessUtilization(h, 0))
except n.NVMLError_NotFound:
    util = []
print(json.dumps({"procs": procs, "util": util}))
"""


@pytest.fixture
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The other simdriver tests' cache (tests/simdriver/test_simdriver.py's sim_cache)."""
    require(need_root(), need_binary("gcc"), need_binary("unshare"), need_binary("nsenter"))
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    return base / "simdriver-cache"


@pytest.fixture
def driver(cache: Path) -> SimDriver:
    return cached_driver(preset("h100x4-550"), cache)


@pytest.fixture
def contained() -> Iterator[int]:
    """A process alone in a new PID namespace (pid 1 there); its pid in ours."""
    outer = subprocess.Popen(["unshare", "--pid", "--fork", "--", "sleep", "60"])
    children = Path(f"/proc/{outer.pid}/task/{outer.pid}/children")
    deadline = time.monotonic() + 10
    while not children.read_text().split():
        assert time.monotonic() < deadline, "unshare did not fork"
        time.sleep(0.01)
    yield int(children.read_text().split()[0])
    terminate(outer)


def ask(driver: SimDriver, control: Path, prefix: list[str]) -> dict[str, list[list[int]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVCT_SIM_")}
    env |= driver.env() | {inject.ENV_CONTROL_DIR: str(control)}
    done = subprocess.run(
        [*prefix, sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out: dict[str, list[list[int]]] = json.loads(done.stdout)
    return out


def test_nvml_lists_only_the_processes_of_the_callers_pid_namespace(
    driver: SimDriver, contained: int, tmp_path: Path
) -> None:
    control = tmp_path / "control"
    host = subprocess.Popen(["sleep", "60"])  # a process in our (the host's) namespace
    try:
        inject.gpu_process(control, 0, host.pid, used_mib=1000, sm_util=30)
        inject.gpu_process(control, 0, contained, used_mib=2000, sm_util=60)

        # the host's namespace sees both, under their pids here
        seen = ask(driver, control, [])
        assert seen == {
            "procs": sorted([[host.pid, 1000], [contained, 2000]]),
            "util": sorted([[host.pid, 30], [contained, 60]]),
        }
        # in the contained process's namespace: only itself, as pid 1
        inside = ask(driver, control, ["nsenter", "--target", str(contained), "--pid", "--"])
        assert inside == {"procs": [[1, 2000]], "util": [[1, 60]]}
        # an unrelated namespace (a container without hostPID): none at all
        apart = ask(driver, control, ["unshare", "--pid", "--fork", "--"])
        assert apart == {"procs": [], "util": []}

        inject.clear_processes(control, 0)
        assert ask(driver, control, []) == {"procs": [], "util": []}
    finally:
        terminate(host)
    with pytest.raises(ValueError, match="no process"):
        inject.gpu_process(control, 0, host.pid, used_mib=1)


_LISTS = r"""
import json, sys, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(int(sys.argv[1]))
handles = {"gpu": h}
if n.nvmlDeviceGetMigMode(h)[0] if sys.argv[2] == "mig" else False:
    for i in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except n.NVMLError:
            continue
        handles[f"gi{n.nvmlDeviceGetGpuInstanceId(m)}"] = m
def rows(call, handle):
    return sorted([p.pid, p.usedGpuMemory >> 20, p.gpuInstanceId, p.computeInstanceId]
                  for p in call(handle))
print(json.dumps({name: {"compute": rows(n.nvmlDeviceGetComputeRunningProcesses, handle),
                         "mps": rows(n.nvmlDeviceGetMPSComputeRunningProcesses, handle)}
                  for name, handle in handles.items()}))
"""
NONE = inject.NO_INSTANCE


def lists(driver: SimDriver, control: Path, gpu: int, mig: bool = False) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVCT_SIM_")}
    env |= driver.env() | {inject.ENV_CONTROL_DIR: str(control)}
    done = subprocess.run(
        [sys.executable, "-c", _LISTS, str(gpu), "mig" if mig else "whole"], env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_mps_clients_are_listed_by_both_calls_and_the_server_by_the_compute_call_only(
    driver: SimDriver, tmp_path: Path
) -> None:
    control = tmp_path / "control"
    server, a, b = (subprocess.Popen(["sleep", "60"]) for _ in range(3))
    try:
        inject.gpu_process(control, 0, server.pid, used_mib=28)
        inject.gpu_process(control, 0, a.pid, used_mib=3000, mps_client=True)
        inject.gpu_process(control, 0, b.pid, used_mib=5000, mps_client=True)
        found = lists(driver, control, 0)["gpu"]
        # nvidia-smi's rows under MPS on Volta or newer: "M+C" clients, a "C" server
        assert found["compute"] == sorted(
            [[server.pid, 28, NONE, NONE], [a.pid, 3000, NONE, NONE], [b.pid, 5000, NONE, NONE]]
        )
        assert found["mps"] == sorted([[a.pid, 3000, NONE, NONE], [b.pid, 5000, NONE, NONE]])
        assert lists(driver, control, 1)["gpu"] == {"compute": [], "mps": []}  # another GPU
    finally:
        for p in (server, a, b):
            terminate(p)


def test_processes_on_mig_devices_carry_their_instance_ids(cache: Path, tmp_path: Path) -> None:
    driver = cached_driver(preset("a100x8-570-mig"), cache)
    control = tmp_path / "control"
    one, two = subprocess.Popen(["sleep", "60"]), subprocess.Popen(["sleep", "60"])
    try:
        inject.gpu_process(control, 0, one.pid, used_mib=1000, gi=1, ci=0)
        inject.gpu_process(control, 0, two.pid, used_mib=2000, gi=5, ci=0, mps_client=True)
        found = lists(driver, control, 0, mig=True)
        # the GPU's handle lists every instance's processes with their IDs
        assert found["gpu"]["compute"] == sorted([[one.pid, 1000, 1, 0], [two.pid, 2000, 5, 0]])
        # a MIG device's handle only its own; MPS on a MIG device lists its clients there
        assert found["gi1"] == {"compute": [[one.pid, 1000, 1, 0]], "mps": []}
        assert found["gi5"] == {"compute": [[two.pid, 2000, 5, 0]], "mps": [[two.pid, 2000, 5, 0]]}
        assert found["gi13"] == {"compute": [], "mps": []}
    finally:
        terminate(one)
        terminate(two)
