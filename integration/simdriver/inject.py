"""Drive the simulated driver's state from tests: NVML events, lost GPUs, metrics, slowness.

The fake libnvidia-ml answers from files in the control directory (`_ctl(target)`,
`<driver_root>/run/nvidia-sim`; its path is compiled into the library, and
`NVCT_SIM_CONTROL_DIR` overrides it, e.g. inside a container where the driver root is
mounted elsewhere). These functions only write those files; nothing here fakes an answer.

The first argument of every function is where to write: a SimDriver (its own control
directory) or a Path, which is taken as the control directory itself. Tests that share a
cached driver give each test its own directory: run the NVML user with
`NVCT_SIM_CONTROL_DIR=<tmp>` and pass that same `<tmp>` here.

`gpu` is always the GPU's device minor (`/dev/nvidia<minor>`), which is also its NVML index
when every GPU of the preset is visible.

Files (the library re-reads them on every call, so changes apply at once):
- `events`: one event a line, appended (O_APPEND, one write: atomic for readers):
  `xid <gpu> <xid> [<gi> <ci>]`, `dbe <gpu>`, `lost <gpu>`, `recover <gpu>`.
- `metrics/<gpu>`: `key value` lines (see `set_metrics` and `set_condition`), replaced
  atomically.
- `slow_ms`: every NVML call sleeps this many milliseconds first.
- `flaky/<gpu>`: a per-mille; each query on that GPU fails (NVML_ERROR_UNKNOWN) that often.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

CONTROL_SUBDIR = "run/nvidia-sim"
ENV_CONTROL_DIR = "NVCT_SIM_CONTROL_DIR"

# XID the real driver reports when a GPU has fallen off the bus.
XID_FALLEN_OFF_BUS = 79


class _HasRoot(Protocol):
    @property
    def driver_root(self) -> Path: ...


def control_dir(driver_root: Path) -> Path:
    """The control directory compiled into a driver built under `driver_root`."""
    return driver_root / CONTROL_SUBDIR


Target = Path | _HasRoot  # a control directory, or a SimDriver


def _ctl(target: Target) -> Path:
    return target if isinstance(target, Path) else control_dir(target.driver_root)


def _append(target: Target, line: str) -> None:
    path = _ctl(target) / "events"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


# gpuInstanceId / computeInstanceId of an event or process that concerns the whole GPU.
NO_INSTANCE = 0xFFFFFFFF


def xid(target: Target, gpu: int, code: int, gi: int | None = None, ci: int | None = None) -> None:
    """An XID critical error on GPU `gpu` (event type XidCriticalError, eventData = `code`).

    `gi`/`ci`: the GPU and compute instance of the MIG device it happened on (the event's
    gpuInstanceId/computeInstanceId); left out, the event is GPU-wide (0xFFFFFFFF).
    """
    where = "" if gi is None else f" {int(gi)} {NO_INSTANCE if ci is None else int(ci)}"
    _append(target, f"xid {int(gpu)} {int(code)}{where}")


def double_bit_ecc(target: Target, gpu: int) -> None:
    """A double-bit ECC error on GPU `gpu` (event type DoubleBitEccError)."""
    _append(target, f"dbe {int(gpu)}")


def lose(target: Target, gpu: int) -> None:
    """GPU `gpu` falls off the bus: its queries answer NVML_ERROR_GPU_IS_LOST until recovered.

    An event set with the GPU registered for XidCriticalError gets one XID 79 event for it
    (what the real driver logs when a GPU falls off the bus).
    """
    _append(target, f"lost {int(gpu)}")


def recover(target: Target, gpu: int) -> None:
    """GPU `gpu` answers again (queries succeed; no event is delivered)."""
    _append(target, f"recover {int(gpu)}")


def slow(target: Target, seconds: float) -> None:
    """Every NVML call sleeps `seconds` first (0 turns it off)."""
    _replace(_ctl(target) / "slow_ms", f"{round(seconds * 1000)}\n")


def flaky(target: Target, gpu: int, fraction: float) -> None:
    """Each query on GPU `gpu` fails with NVML_ERROR_UNKNOWN with probability `fraction`
    (1: every query; 0 turns it off): a GPU whose NVML answers come and go."""
    _replace(_ctl(target) / "flaky" / str(int(gpu)), f"{round(fraction * 1000)}\n")


METRIC_KEYS = ("util_gpu", "util_memory", "temp", "power_mw", "sm_clock_mhz", "memory_used_mib")
# The other dcgm-exporter default counters' sources (README "Control directory"), set with
# set_metrics(**more): name -> default before any call.
MORE_METRICS = {
    "mem_clock_mhz": 1593,
    "memory_temp": 40,  # HBM GPUs only
    "energy_mj": 0,
    "pcie_replay": 0,
    "util_encoder": 0,
    "util_decoder": 0,
    "memory_reserved_mib": 0,
    "pcie_tx_kbps": 0,
    "pcie_rx_kbps": 0,
    "nvlink_tx_kib": 0,  # GPUs with NVLink only
    "nvlink_rx_kib": 0,
    "nvlink_kibps": 0,  # traffic: both NVLink counters grow this fast (KiB/s)
    "gpm_graphics": 0,  # % (GPM: Hopper and newer)
    "gpm_tensor": 0,
    "gpm_dram": 0,
    "gpm_pcie_tx_mibs": 0,
    "gpm_pcie_rx_mibs": 0,
    "vgpu_licensed": 1,  # a vGPU guest's licence: 0 expired or never granted
}
# What a MIG device reports of its own (set_mig_metrics), stored as <key>_gi<gi>.
MIG_KEYS = ("memory_used_mib", "gpm_graphics", "gpm_tensor", "gpm_dram")


def set_metrics(
    target: Target,
    gpu: int,
    *,
    util: int | None = None,
    util_memory: int | None = None,
    temp: int | None = None,
    power_mw: int | None = None,
    sm_clock_mhz: int | None = None,
    memory_used_mib: int | None = None,
    **more: int,
) -> None:
    """Set what NVML reports for GPU `gpu`; arguments left out keep their current value.

    Defaults before any call: utilization 0 %, 30 C, 50000 mW, SM clock 1410 MHz, 0 MiB used;
    ``more``: keys of ``MORE_METRICS`` (their defaults there).
    """
    unknown = sorted(set(more) - set(MORE_METRICS))
    if unknown:
        raise ValueError(f"set_metrics: unknown metric {unknown}; known: {sorted(MORE_METRICS)}")
    given: dict[str, int | bool | None] = {
        **more,
        "util_gpu": util,
        "util_memory": util_memory,
        "temp": temp,
        "power_mw": power_mw,
        "sm_clock_mhz": sm_clock_mhz,
        "memory_used_mib": memory_used_mib,
    }
    _update(target, gpu, "set_metrics", given)


CONDITION_KEYS = (
    "remapped_correctable",
    "remapped_uncorrectable",
    "remap_pending",
    "remap_failure",
    "retired_pending",
    "recovery_action",
)


def set_condition(
    target: Target,
    gpu: int,
    *,
    remapped_correctable: int | None = None,
    remapped_uncorrectable: int | None = None,
    remap_pending: bool | None = None,
    remap_failure: bool | None = None,
    retired_pending: bool | None = None,
    recovery_action: int | None = None,
) -> None:
    """Set GPU `gpu`'s memory health as NVML reports it; arguments left out keep their value.

    `nvmlDeviceGetRemappedRows` -> (correctable, uncorrectable, pending, failure) on GPUs that
    remap rows; `nvmlDeviceGetRetiredPagesPendingStatus` -> `retired_pending` on the other ECC
    GPUs; the field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION -> `recovery_action` (NVML's
    NVML_GPU_RECOVERY_ACTION_*: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and
    reset) on drivers 570 and newer. Defaults before any call: all 0.
    """
    given = {
        "remapped_correctable": remapped_correctable,
        "remapped_uncorrectable": remapped_uncorrectable,
        "remap_pending": remap_pending,
        "remap_failure": remap_failure,
        "retired_pending": retired_pending,
        "recovery_action": recovery_action,
    }
    _update(target, gpu, "set_condition", given)


def gpu_process(
    target: Target,
    gpu: int,
    pid: int,
    *,
    used_mib: int,
    sm_util: int = 0,
    mem_util: int = 0,
    mps_client: bool = False,
    gi: int | None = None,
    ci: int = 0,
) -> None:
    """Process ``pid`` (this process's PID namespace: the host's, in tests) runs on GPU ``gpu``:
    NVML lists it (running compute processes, utilization samples) to a caller in this
    namespace under ``pid``, to one in the process's own namespace under its pid there, and to
    no other caller, as the driver does. ``mps_client``: it reaches the GPU through an MPS
    server, so the MPS compute call lists it too (the server itself is a plain process here).
    ``gi``/``ci``: it runs on that MIG device of the GPU (None: the GPU is not in MIG mode).

    Raises:
        ValueError: no such process.
    """
    try:
        status = Path(f"/proc/{int(pid)}/status").read_text()
        inner_ns = os.stat(f"/proc/{int(pid)}/ns/pid").st_ino
    except OSError as err:
        raise ValueError(f"gpu_process: no process {pid}: {err.strerror}") from err
    nspid = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
    outer_ns = os.stat("/proc/self/ns/pid").st_ino
    kind = "M" if mps_client else "C"
    where = f"{NO_INSTANCE} {NO_INSTANCE}" if gi is None else f"{int(gi)} {int(ci)}"
    line = (
        f"{outer_ns} {int(pid)} {inner_ns} {nspid[-1]} {used_mib} {sm_util} {mem_util} "
        f"{kind} {where}\n"
    )
    path = _ctl(target) / "processes" / str(int(gpu))
    _replace(path, (path.read_text() if path.exists() else "") + line)


def clear_processes(target: Target, gpu: int) -> None:
    """No process runs on GPU ``gpu`` any more."""
    (_ctl(target) / "processes" / str(int(gpu))).unlink(missing_ok=True)


def set_mig_metrics(target: Target, gpu: int, gi: int, **values: int) -> None:
    """Set what NVML reports for the MIG device with GPU instance `gi` on GPU `gpu`: keys of
    ``MIG_KEYS`` (memory used; GPM through nvmlGpmMigSampleGet)."""
    unknown = sorted(set(values) - set(MIG_KEYS))
    if unknown:
        raise ValueError(f"set_mig_metrics: unknown metric {unknown}; known: {list(MIG_KEYS)}")
    _update(target, gpu, "set_mig_metrics", {f"{k}_gi{int(gi)}": v for k, v in values.items()})


def _known(key: str) -> bool:
    base, _, gi = key.rpartition("_gi")
    return (key in METRIC_KEYS or key in CONDITION_KEYS or key in MORE_METRICS) or (
        base in MIG_KEYS and gi.isdigit()
    )


def _update(target: Target, gpu: int, caller: str, given: dict[str, int | bool | None]) -> None:
    """Merge `given` (None: keep) into GPU `gpu`'s `metrics/<gpu>` file."""
    path = _ctl(target) / "metrics" / str(int(gpu))
    current: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if _known(key) and value.strip().isdigit():
                current[key] = int(value)
    for key, value in given.items():
        if value is not None:
            if value < 0:
                raise ValueError(f"{caller}: {key}={value} must be >= 0")
            current[key] = int(value)
    _replace(path, "".join(f"{k} {v}\n" for k, v in sorted(current.items())))


def reset(target: Target) -> None:
    """Forget every injected event, metric, slowness and flakiness (a fresh driver state)."""
    ctl = _ctl(target)
    for name in ("events", "slow_ms"):
        (ctl / name).unlink(missing_ok=True)
    for sub in ("metrics", "flaky", "processes", "timeslice", "computemode"):
        if (ctl / sub).is_dir():
            for f in (ctl / sub).iterdir():
                f.unlink()


def timeslice(target: Target, gpu: int) -> int:
    """GPU `gpu`'s compute time-slice as `nvidia-smi compute-policy --set-timeslice` left it
    (0 Default, 1 Short, 2 Medium, 3 Long; 0 when never set)."""
    path = _ctl(target) / "timeslice" / str(gpu)
    return int(path.read_text()) if path.exists() else 0


def set_compute_mode(target: Target, gpu: int, mode: int) -> None:
    """GPU `gpu` in compute mode `mode` (0 DEFAULT, 2 PROHIBITED, 3 EXCLUSIVE_PROCESS), as an
    administrator's `nvidia-smi -c` before nvct runs."""
    _replace(_ctl(target) / "computemode" / str(int(gpu)), f"{int(mode)}\n")


def compute_mode(target: Target, gpu: int) -> int:
    """GPU `gpu`'s compute mode as `nvidia-smi -c` left it (NVML's nvmlComputeMode_t: 0 DEFAULT,
    2 PROHIBITED, 3 EXCLUSIVE_PROCESS; 0 when never set)."""
    path = _ctl(target) / "computemode" / str(gpu)
    return int(path.read_text()) if path.exists() else 0


def mps_commands(target: Target) -> list[tuple[str, str]]:
    """(pipe directory, command) for every command the simulated MPS control daemons
    received, in order (`nvidia-cuda-mps-control` appends them to `mps-commands`)."""
    path = _ctl(target) / "mps-commands"
    if not path.exists():
        return []
    out: list[tuple[str, str]] = []
    for line in path.read_text().splitlines():
        pipe, _, cmd = line.partition("\t")
        out.append((pipe, cmd))
    return out
