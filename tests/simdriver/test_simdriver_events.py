"""The simulated NVML's mutable state, driven through integration.simdriver.inject and read
back through pynvml in a subprocess (loading the fake NVML in-process would stay loaded)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from integration.simdriver import SimDriver, inject

# Evaluates one Python expression a line (pynvml as `n`, GPU handles as `h`) and answers one
# JSON line: {"ok": value} or {"err": NVML return code}.
_REPL = r"""
import ctypes, json, sys, time, pynvml as n
n.nvmlInit()
h = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
def ev(es, ms):
    d = n.nvmlEventSetWait_v2(es, ms)
    # By handle, not by a query: a lost GPU's queries fail, its handle is still the same.
    addr = lambda x: ctypes.cast(x, ctypes.c_void_p).value
    index = [i for i, x in enumerate(h) if addr(x) == addr(d.device)]
    return [d.eventType, d.eventData, index[0], d.gpuInstanceId]
def timed(f):
    t = time.monotonic()
    f()
    return time.monotonic() - t
env = {"n": n, "h": h, "ev": ev, "timed": timed}
for line in sys.stdin:
    try:
        out = {"ok": eval(line, env)}
    except n.NVMLError as e:
        out = {"err": e.value}
    print(json.dumps(out, default=str), flush=True)
"""

XID = 0x8
DBE = 0x2
TIMEOUT = 10
GPU_IS_LOST = 15
NOT_SUPPORTED = 3


class Nvml:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def send(self, expr: str) -> None:
        stdin: IO[str] | None = self.proc.stdin
        assert stdin is not None
        stdin.write(expr + "\n")
        stdin.flush()

    def read(self) -> dict[str, object]:
        stdout: IO[str] | None = self.proc.stdout
        assert stdout is not None
        line = stdout.readline()
        assert line, f"pynvml subprocess died: rc={self.proc.poll()}"
        result: dict[str, object] = json.loads(line)
        return result

    def __call__(self, expr: str) -> object:
        self.send(expr)
        out = self.read()
        assert "ok" in out, f"{expr} -> NVML error {out}"
        return out["ok"]

    def err(self, expr: str) -> object:
        self.send(expr)
        return self.read().get("err")


@pytest.fixture
def ctl(tmp_path: Path) -> Path:
    return tmp_path / "ctl"


@contextlib.contextmanager
def _repl(sim: SimDriver, ctl: Path) -> Iterator[Nvml]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVCT_SIM_")}
    env |= sim.env() | {inject.ENV_CONTROL_DIR: str(ctl)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _REPL],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        yield Nvml(proc)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def nvml(h100x4: SimDriver, ctl: Path) -> Iterator[Nvml]:
    with _repl(h100x4, ctl) as repl:
        yield repl


@pytest.fixture
def nvml_of(ctl: Path, sim_factory: Callable[[str], SimDriver]) -> Iterator[Callable[[str], Nvml]]:
    """NVML of another preset, by name (one subprocess per call, all stopped at the end)."""
    with contextlib.ExitStack() as stack:
        yield lambda name: stack.enter_context(_repl(sim_factory(name), ctl))


def test_xid_and_double_bit_ecc_are_delivered_once_in_order(nvml: Nvml, ctl: Path) -> None:
    inject.xid(ctl, 0, 13)  # before the set exists: not delivered
    nvml("(es := n.nvmlEventSetCreate()) and None")
    for i in range(4):
        nvml(f"n.nvmlDeviceRegisterEvents(h[{i}], {XID | DBE}, es)")
    assert nvml.err("ev(es, 50)") == TIMEOUT
    inject.xid(ctl, 2, 48)
    inject.double_bit_ecc(ctl, 1)
    assert nvml("ev(es, 1000)") == [XID, 48, 2, 0xFFFFFFFF]
    assert nvml("ev(es, 1000)") == [DBE, 0, 1, 0xFFFFFFFF]
    assert nvml.err("ev(es, 50)") == TIMEOUT
    nvml("n.nvmlEventSetFree(es)")


def test_wait_wakes_when_an_event_is_injected(nvml: Nvml, ctl: Path) -> None:
    nvml("(es := n.nvmlEventSetCreate()) and None")
    nvml(f"n.nvmlDeviceRegisterEvents(h[3], {XID}, es)")
    start = time.monotonic()
    nvml.send("ev(es, 5000)")
    time.sleep(0.2)
    inject.xid(ctl, 3, 31)
    assert nvml.read() == {"ok": [XID, 31, 3, 0xFFFFFFFF]}
    assert time.monotonic() - start < 1.5


def test_wait_honours_its_timeout(nvml: Nvml) -> None:
    nvml("(es := n.nvmlEventSetCreate()) and None")
    nvml(f"n.nvmlDeviceRegisterEvents(h[0], {XID}, es)")
    start = time.monotonic()
    assert nvml.err("ev(es, 300)") == TIMEOUT
    assert 0.3 <= time.monotonic() - start < 10.0  # the upper bound only catches a hang


def test_only_registered_gpus_and_types_are_delivered(nvml: Nvml, ctl: Path) -> None:
    nvml("(es := n.nvmlEventSetCreate()) and None")
    nvml(f"n.nvmlDeviceRegisterEvents(h[0], {XID}, es)")
    inject.xid(ctl, 1, 43)  # GPU 1 not registered
    inject.double_bit_ecc(ctl, 0)  # type not registered
    inject.xid(ctl, 0, 94)
    assert nvml("ev(es, 1000)") == [XID, 94, 0, 0xFFFFFFFF]
    assert nvml.err("ev(es, 50)") == TIMEOUT


def test_supported_event_types(nvml: Nvml) -> None:
    assert nvml("n.nvmlDeviceGetSupportedEventTypes(h[0])") == 0x1 | DBE | XID
    nvml("(es := n.nvmlEventSetCreate()) and None")
    assert nvml.err("n.nvmlDeviceRegisterEvents(h[0], 0x4, es)") == NOT_SUPPORTED


def test_lost_gpu_answers_gpu_is_lost_until_recovered(nvml: Nvml, ctl: Path) -> None:
    uuid1 = nvml("n.nvmlDeviceGetUUID(h[1])")
    nvml("(es := n.nvmlEventSetCreate()) and None")
    nvml(f"n.nvmlDeviceRegisterEvents(h[1], {XID}, es)")
    inject.lose(ctl, 1)
    assert nvml.err("n.nvmlDeviceGetUUID(h[1])") == GPU_IS_LOST
    assert nvml.err("n.nvmlDeviceGetMemoryInfo(h[1]).total") == GPU_IS_LOST
    assert nvml.err("n.nvmlDeviceGetName(h[1])") == GPU_IS_LOST
    assert nvml("n.nvmlDeviceGetUUID(h[0])") != uuid1  # the others still answer
    assert nvml("ev(es, 1000)") == [XID, inject.XID_FALLEN_OFF_BUS, 1, 0xFFFFFFFF]
    inject.recover(ctl, 1)
    assert nvml("n.nvmlDeviceGetUUID(h[1])") == uuid1
    assert nvml.err("ev(es, 50)") == TIMEOUT  # recovery is no event


def test_metrics_default_then_follow_the_state(nvml: Nvml, ctl: Path) -> None:
    total = nvml("n.nvmlDeviceGetMemoryInfo(h[2]).total")
    assert isinstance(total, int)
    assert nvml(
        "[n.nvmlDeviceGetUtilizationRates(h[2]).gpu, n.nvmlDeviceGetTemperature(h[2], 0)]"
    ) == [0, 30]
    inject.set_metrics(ctl, 2, util=87, util_memory=40, temp=71, power_mw=312000)
    inject.set_metrics(ctl, 2, sm_clock_mhz=1755, memory_used_mib=2048)
    u = nvml(
        "[n.nvmlDeviceGetUtilizationRates(h[2]).gpu, n.nvmlDeviceGetUtilizationRates(h[2]).memory]"
    )
    assert u == [87, 40]
    assert nvml("n.nvmlDeviceGetTemperature(h[2], n.NVML_TEMPERATURE_GPU)") == 71
    assert nvml("n.nvmlDeviceGetPowerUsage(h[2])") == 312000
    assert nvml("n.nvmlDeviceGetClockInfo(h[2], n.NVML_CLOCK_SM)") == 1755
    mem = nvml("[(m := n.nvmlDeviceGetMemoryInfo(h[2])).used, m.free]")
    assert mem == [2048 << 20, total - (2048 << 20)]
    assert nvml("n.nvmlDeviceGetTemperature(h[1], 0)") == 30  # other GPUs unchanged


def test_slow_knob_delays_every_call(nvml: Nvml, ctl: Path) -> None:
    assert nvml("timed(lambda: n.nvmlDeviceGetTemperature(h[0], 0))") < 0.2
    inject.slow(ctl, 0.3)
    assert nvml("timed(lambda: n.nvmlDeviceGetTemperature(h[0], 0))") >= 0.3
    inject.slow(ctl, 0)
    assert nvml("timed(lambda: n.nvmlDeviceGetTemperature(h[0], 0))") < 0.2


def test_flaky_knob_fails_that_share_of_one_gpus_queries(nvml: Nvml, ctl: Path) -> None:
    unknown = 999  # NVML_ERROR_UNKNOWN
    inject.flaky(ctl, 3, 1)
    assert nvml.err("n.nvmlDeviceGetMemoryInfo(h[3]).total") == unknown
    inject.flaky(ctl, 3, 0.3)
    answers = [nvml.err("n.nvmlDeviceGetTemperature(h[3], 0)") for _ in range(300)]
    failed = answers.count(unknown)
    assert 50 < failed < 130 and set(answers) == {None, unknown}, failed  # 30 % of 300
    assert nvml("n.nvmlDeviceGetTemperature(h[2], 0)") == 30  # the other GPUs answer
    inject.flaky(ctl, 3, 0)
    assert nvml("n.nvmlDeviceGetTemperature(h[3], 0)") == 30


def test_reset_forgets_the_state(nvml: Nvml, ctl: Path) -> None:
    inject.lose(ctl, 0)
    inject.flaky(ctl, 1, 1)
    inject.set_metrics(ctl, 0, temp=90)
    inject.reset(ctl)
    assert nvml("n.nvmlDeviceGetTemperature(h[0], 0)") == 30
    assert nvml("n.nvmlDeviceGetTemperature(h[1], 0)") == 30


def test_compiled_in_control_dir(h100x4: SimDriver) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVCT_SIM_")}
    script = (
        "import pynvml as n, sys\n"
        "n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)\n"
        "es = n.nvmlEventSetCreate(); n.nvmlDeviceRegisterEvents(h, 8, es)\n"
        "print('ready', flush=True); sys.stdin.readline()\n"
        "print(n.nvmlEventSetWait_v2(es, 2000).eventData)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env | h100x4.env(),
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready"
    # Harmless to other tests sharing this driver: only sets made after now see it.
    inject.xid(h100x4, 0, 109)
    out, _ = proc.communicate("go\n", timeout=10)
    assert out.strip() == "109"
    assert inject.control_dir(h100x4.driver_root).is_dir()


RECOVERY_FIELD = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
SBE = 0x1


def test_supported_events_follow_ecc_per_gpu(nvml_of: Callable[[str], Nvml], ctl: Path) -> None:
    """mixed-ecc-x3: an ECC GPU, one without ECC (XIDs only), one with no events at all."""
    nvml = nvml_of("mixed-ecc-x3")
    assert nvml("n.nvmlDeviceGetSupportedEventTypes(h[0])") == SBE | DBE | XID
    assert nvml("n.nvmlDeviceGetSupportedEventTypes(h[1])") == XID
    assert nvml.err("n.nvmlDeviceGetSupportedEventTypes(h[2])") == NOT_SUPPORTED
    nvml("(es := n.nvmlEventSetCreate()) and None")
    assert nvml.err(f"n.nvmlDeviceRegisterEvents(h[1], {XID | DBE}, es)") == NOT_SUPPORTED
    assert nvml.err(f"n.nvmlDeviceRegisterEvents(h[2], {XID}, es)") == NOT_SUPPORTED
    nvml(f"n.nvmlDeviceRegisterEvents(h[1], {XID}, es)")
    inject.xid(ctl, 2, 48)  # nothing registered on GPU 2
    inject.xid(ctl, 1, 43)
    assert nvml("ev(es, 1000)") == [XID, 43, 1, 0xFFFFFFFF]
    assert nvml.err("ev(es, 50)") == TIMEOUT


def test_mig_events_name_their_instances(nvml_of: Callable[[str], Nvml], ctl: Path) -> None:
    nvml = nvml_of("a100x8-570-mig")
    mig = "n.nvmlDeviceGetMigDeviceHandleByIndex(h[0], 1)"
    assert nvml.err(f"n.nvmlDeviceGetSupportedEventTypes({mig})") == NOT_SUPPORTED
    nvml("(es := n.nvmlEventSetCreate()) and None")
    assert nvml.err(f"n.nvmlDeviceRegisterEvents({mig}, {XID}, es)") == NOT_SUPPORTED
    nvml(f"n.nvmlDeviceRegisterEvents(h[0], {XID}, es)")
    inject.xid(ctl, 0, 31, gi=5, ci=0)
    inject.xid(ctl, 0, 48)
    wait = (
        "[(d := n.nvmlEventSetWait_v2(es, 1000)).eventData, d.gpuInstanceId, d.computeInstanceId]"
    )
    assert nvml(wait) == [31, 5, 0]
    assert nvml(wait) == [48, 0xFFFFFFFF, 0xFFFFFFFF]


def test_memory_health_and_the_recovery_action(nvml_of: Callable[[str], Nvml], ctl: Path) -> None:
    a100 = nvml_of("a100x8-570-mig")  # row remapping; driver 570 reports the recovery action
    field = (
        f"[(v := n.nvmlDeviceGetFieldValues(h[{{}}], [{RECOVERY_FIELD}])[0]).nvmlReturn, "
        "v.value.uiVal]"
    )
    assert a100("n.nvmlDeviceGetRemappedRows(h[3])") == [0, 0, 0, 0]
    assert a100(field.format(3)) == [0, 0]
    inject.set_condition(ctl, 3, remapped_uncorrectable=2, remap_pending=True, recovery_action=1)
    assert a100("n.nvmlDeviceGetRemappedRows(h[3])") == [0, 2, 1, 0]
    assert a100(field.format(3)) == [0, 1]
    inject.set_condition(ctl, 3, remap_pending=False, remap_failure=True)
    assert a100("n.nvmlDeviceGetRemappedRows(h[3])") == [0, 2, 0, 1]
    assert a100("n.nvmlDeviceGetRemappedRows(h[2])") == [0, 0, 0, 0]  # per GPU
    assert a100.err("n.nvmlDeviceGetRetiredPagesPendingStatus(h[3])") == NOT_SUPPORTED
    mig = "n.nvmlDeviceGetMigDeviceHandleByIndex(h[0], 0)"
    assert a100.err(f"n.nvmlDeviceGetRemappedRows({mig})") == NOT_SUPPORTED
    h100 = nvml_of("h100x4-550")  # before 570: the field is not reported
    assert h100(field.format(3)) == [NOT_SUPPORTED, 0]
    t4 = nvml_of("t4x1-535")  # ECC without row remapping: retired pages
    assert t4.err("n.nvmlDeviceGetRemappedRows(h[0])") == NOT_SUPPORTED
    assert t4("n.nvmlDeviceGetRetiredPagesPendingStatus(h[0])") == 0
    inject.set_condition(ctl, 0, retired_pending=True)
    assert t4("n.nvmlDeviceGetRetiredPagesPendingStatus(h[0])") == 1
