"""One command for a machine with a real NVIDIA GPU: what its driver reports that nvct's health
and advertising depend on, and what nvct makes of it.

    python bench/device_check.py --out DIR [--busybox PATH]

Read straight from NVML (pynvml, not nvct): per GPU, the event types it supports, ECC mode,
remapped rows, retired pages pending, the GPU recovery-action field, MIG mode; and what nvct's
health policy makes of them (the event types its watch registers, ``health_condition`` with
"was reset", through ``nvct.node.health``). Then nvct on
that host, as installed: ``nvct-cli info``, ``list``, ``doctor``, ``labels``, ``cdi generate``;
``nvct-device-plugin`` against the kubelet stand-in (registration, ListAndWatch, preferred
allocation, Allocate); one exporter scrape; and, where runc and a static busybox are at hand,
a real container started through ``nvct-runtime`` that runs ``nvidia-smi -L``.

Every step's output goes to DIR/device-check.txt and a summary to DIR/device-check.json; a
step that fails is recorded and the next one runs. Needs root for the container step.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

EVENT_NAMES = {
    "nvmlEventTypeSingleBitEccError": "single-bit-ecc",
    "nvmlEventTypeDoubleBitEccError": "double-bit-ecc",
    "nvmlEventTypePState": "pstate",
    "nvmlEventTypeXidCriticalError": "xid",
    "nvmlEventTypeClock": "clock",
    "nvmlEventTypePowerSourceChange": "power-source",
    "nvmlEventMigConfigChange": "mig-config-change",
    "nvmlEventTypeSingleBitEccErrorStorm": "single-bit-ecc-storm",
    "nvmlEventTypeDramRetirementEvent": "dram-retirement",
    "nvmlEventTypeDramRetirementFailure": "dram-retirement-failure",
    "nvmlEventTypeNonFatalPoisonError": "non-fatal-poison",
    "nvmlEventTypeFatalPoisonError": "fatal-poison",
    "nvmlEventTypeGpuUnavailableError": "gpu-unavailable",
    "nvmlEventTypeGpuRecoveryAction": "gpu-recovery-action",
}
RECOVERY_ACTIONS = {
    0: "none",
    1: "gpu-reset",
    2: "node-reboot",
    3: "drain-p2p",
    4: "drain-and-reset",
}


class Report:
    """The text log and the JSON summary, written as the steps go."""

    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.text = (out / "device-check.txt").open("w")
        self.json_path = out / "device-check.json"
        self.summary: dict[str, Any] = {}

    def say(self, line: str = "") -> None:
        print(line, flush=True)
        self.text.write(line + "\n")
        self.text.flush()

    def record(self, key: str, value: Any) -> None:
        self.summary[key] = value
        self.json_path.write_text(json.dumps(self.summary, indent=2, default=str) + "\n")

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.say(f"\n===== {name}")
        start = time.monotonic()
        try:
            yield
        except Exception as exc:
            self.say(f"!! {name} failed: {exc!r}")
            self.say(traceback.format_exc())
            self.record(f"failed:{name}", repr(exc))
        self.say(f"----- {name}: {time.monotonic() - start:.2f} s")


def run(report: Report, argv: list[str], timeout: float = 120, **kw: Any) -> str:
    report.say("$ " + " ".join(argv))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)
    out = proc.stdout + (("\n[stderr]\n" + proc.stderr) if proc.stderr.strip() else "")
    report.say(out.rstrip())
    report.say(f"[exit {proc.returncode}]")
    return proc.stdout


def nvml_facts(report: Report) -> None:
    import pynvml as n

    from nvct.node.health.nvml_condition import read_condition
    from nvct.node.health.nvml_events import register

    n.nvmlInit()
    try:
        gpus = []
        report.say(f"driver {n.nvmlSystemGetDriverVersion()}, NVML {n.nvmlSystemGetNVMLVersion()}")
        for i in range(n.nvmlDeviceGetCount()):
            h = n.nvmlDeviceGetHandleByIndex(i)
            gpu: dict[str, Any] = {"index": i, "name": n.nvmlDeviceGetName(h)}
            gpu["uuid"] = n.nvmlDeviceGetUUID(h)
            facts: list[tuple[str, Callable[[], Any]]] = [
                ("pci_bus_id", lambda h=h: n.nvmlDeviceGetPciInfo(h).busId),
                ("supported_events", lambda h=h: _events(n, n.nvmlDeviceGetSupportedEventTypes(h))),
                ("ecc_mode", lambda h=h: n.nvmlDeviceGetEccMode(h)),
                ("remapped_rows", lambda h=h: _rows(n.nvmlDeviceGetRemappedRows(h))),
                (
                    "retired_pages_pending",
                    lambda h=h: n.nvmlDeviceGetRetiredPagesPendingStatus(h),
                ),
                ("recovery_action", lambda h=h: _recovery(n, h)),
                ("mig_mode", lambda h=h: n.nvmlDeviceGetMigMode(h)),
                ("persistence_mode", lambda h=h: n.nvmlDeviceGetPersistenceMode(h)),
                ("compute_mode", lambda h=h: n.nvmlDeviceGetComputeMode(h)),
                ("memory_mib", lambda h=h: n.nvmlDeviceGetMemoryInfo(h).total // 2**20),
                ("cuda_cc", lambda h=h: n.nvmlDeviceGetCudaComputeCapability(h)),
                ("minor", lambda h=h: n.nvmlDeviceGetMinorNumber(h)),
                ("numa_node", lambda h=h: _numa(n, h)),
                ("gpm_supported", lambda h=h: n.nvmlGpmQueryDeviceSupport(h).isSupportedDevice),
            ]
            for key, fact in facts:
                try:
                    gpu[key] = fact()
                except Exception as exc:  # a GPU without the function: say which
                    gpu[key] = f"error: {exc}"
            # what nvct's health watch registers: (XID | double-bit ECC) & what the GPU supports
            try:
                es = n.nvmlEventSetCreate()
                wanted = n.nvmlEventTypeXidCriticalError | n.nvmlEventTypeDoubleBitEccError
                (mask,) = register(n, es, [h], wanted).values()
                gpu["registered_events"] = _events(n, mask)
                try:
                    n.nvmlEventSetWait_v2(es, 10)
                    gpu["event_wait"] = "an event arrived"
                except n.NVMLError as err:
                    gpu["event_wait"] = f"10 ms wait: {err}"
                n.nvmlEventSetFree(es)
                gpu["register_events"] = "ok"
            except Exception as exc:
                gpu["register_events"] = f"error: {exc}"
            condition = read_condition(n, h)  # what the health policy judges by
            gpu["health_condition"] = {
                **dataclasses.asdict(condition),
                "was_reset": condition.was_reset,
                "asks": condition.asks(),
            }
            gpus.append(gpu)
            for key, value in gpu.items():
                report.say(f"  gpu{i} {key}: {value}")
        report.record("nvml", {"driver": n.nvmlSystemGetDriverVersion(), "gpus": gpus})
    finally:
        n.nvmlShutdown()


def _events(n: Any, mask: int) -> list[str]:
    names = [v for k, v in EVENT_NAMES.items() if hasattr(n, k) and mask & getattr(n, k)]
    known = 0
    for k in EVENT_NAMES:
        known |= getattr(n, k, 0)
    if mask & ~known:
        names.append(f"other:{mask & ~known:#x}")
    return names


def _rows(value: Any) -> dict[str, Any]:
    corr, unc, pending, failure = value
    return {"correctable": corr, "uncorrectable": unc, "pending": pending, "failure": failure}


def _recovery(n: Any, h: Any) -> Any:
    field = n.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    (value,) = n.nvmlDeviceGetFieldValues(h, [field])
    if value.nvmlReturn != n.NVML_SUCCESS:
        return f"field {field}: nvmlReturn {value.nvmlReturn}"
    raw = int(value.value.uiVal)
    return {"raw": raw, "action": RECOVERY_ACTIONS.get(raw, "unknown")}


def _numa(n: Any, h: Any) -> Any:
    bus = n.nvmlDeviceGetPciInfo(h).busId
    bus = bus.decode() if isinstance(bus, bytes) else bus
    dom, _, rest = bus.lower().partition(":")
    path = Path("/sys/bus/pci/devices") / f"{dom[-4:]}:{rest}" / "numa_node"
    return path.read_text().strip() if path.exists() else "no sysfs entry"


def device_plugin(report: Report, cli: list[str], work: Path) -> None:
    from integration.kubelet.standin import Kubelet

    plugin_dir = work / "device-plugins"
    kubelet = Kubelet(plugin_dir).start()
    log = work / "plugin.log"
    argv = [
        sys.executable, "-m", "nvct.deviceplugin", "--plugin-dir", str(plugin_dir),
        "--cdi-spec-dir", str(work / "cdi"),
    ]  # fmt: skip
    report.say("$ " + " ".join(argv))
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out)
    try:
        ok = kubelet.wait(lambda: kubelet.registered("nvidia.com/gpu") is not None, 30)
        report.say(f"registered: {ok} after {time.monotonic() - started:.2f} s")
        report.record("plugin_registered_s", round(time.monotonic() - started, 3) if ok else None)
        if not ok:
            return
        kubelet.wait(lambda: bool(kubelet.devices("nvidia.com/gpu")), 10)
        devices = kubelet.devices("nvidia.com/gpu")
        report.say(f"ListAndWatch: {devices}")
        report.say(f"NUMA: {kubelet.numa('nvidia.com/gpu')}")
        report.record("plugin_devices", devices)
        ids = sorted(devices)
        preferred = kubelet.preferred("nvidia.com/gpu", ids, [], 1)
        report.say(f"GetPreferredAllocation(1 of {ids}): {preferred}")
        t0 = time.monotonic()
        answer = kubelet.allocate("nvidia.com/gpu", ids[:1])
        report.say(f"Allocate({ids[:1]}) in {1000 * (time.monotonic() - t0):.2f} ms:\n{answer}")
        report.record("plugin_allocate", str(answer))
        for f in sorted((work / "cdi").glob("*")):
            report.say(f"CDI spec {f.name}:\n{f.read_text()[:3000]}")
        run(report, [*cli, "device-plugin-status", "--plugin-dir", str(plugin_dir)])
    finally:
        proc.terminate()
        try:
            rc = proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        kubelet.stop()
        report.say(f"plugin exit {rc}; its log:\n{log.read_text(errors='replace')[-6000:]}")


ROOT_KEYS = ("driver-root", "dev-root", "proc-root")


CUDA_CLIENT = """
import sys, time, torch
x = torch.ones(1024, 1024, device="cuda")
for i in range(int(sys.argv[1])):
    y = (x @ x).sum().item()
    torch.cuda.synchronize()
    print(f"step {i} {y:.0f}", flush=True)
    time.sleep(0.2)
print("client done", flush=True)
"""


def mps_processes(report: Report, client_pid: int) -> None:
    """What NVML lists on GPU 0 while an MPS client runs, the exporter's per-pod usage source:
    the compute processes, the MPS clients and the utilization samples (pid, MiB or SM %), with
    the client's pid and the MPS servers'. The simulated driver answers as nvidia-smi shows a
    Volta-or-newer GPU (clients in both lists, the server in the compute list) and gives each
    client its own samples; this records whether a real driver does."""
    import pynvml as n

    servers = sorted(
        int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()
        and b"nvidia-cuda-mps-server" in _read_bytes(d / "cmdline")
    )  # fmt: skip
    n.nvmlInit()
    try:
        h = n.nvmlDeviceGetHandleByIndex(0)

        def rows(call: Any) -> Any:
            try:
                return sorted([p.pid, (p.usedGpuMemory or 0) >> 20] for p in call(h))
            except n.NVMLError as err:
                return str(err)

        try:
            util: Any = sorted([u.pid, u.smUtil] for u in n.nvmlDeviceGetProcessUtilization(h, 0))
        except n.NVMLError as err:
            util = str(err)
        found = {
            "client_pid": client_pid,
            "server_pids": servers,
            "compute": rows(n.nvmlDeviceGetComputeRunningProcesses),
            "mps": rows(n.nvmlDeviceGetMPSComputeRunningProcesses),
            "utilization": util,
        }
    finally:
        n.nvmlShutdown()
    report.say(f"NVML's processes under MPS: {found}")
    report.record("mps_nvml_processes", found)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def mps(report: Report, cli: list[str], work: Path, torch_python: str | None) -> None:
    """GPU 0 shared by MPS (2 replicas): nvct-cli mps-control runs its daemon, the plugin
    advertises the replicas, a CUDA client (PyTorch) works through the daemon while the plugin
    is SIGKILLed and restarted; the daemon's raw answers are recorded."""
    import pynvml as n

    from integration.harness.processes import until
    from integration.kubelet.standin import Kubelet

    n.nvmlInit()
    uuid = n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(0))
    n.nvmlShutdown()
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    root = work / "mps"
    config = work / "mps-config.toml"
    roots = ""  # a dry run off the GPU machine: the simulated driver's roots
    if "NVCT_CONFIG" in os.environ:
        text = Path(os.environ["NVCT_CONFIG"]).read_text().split("\n[", 1)[0]
        roots = "".join(f"{ln}\n" for ln in text.splitlines() if ln.startswith(ROOT_KEYS))
    config.write_text(
        roots + f'cache-dir = "{work / "cache"}"\n[device-plugin.sharing]\nmps-root = "{root}"\n'
        '[[device-plugin.sharing.gpus]]\ndevices = ["0"]\nstrategy = "mps"\nreplicas = 2\n'
    )
    control_log = work / "mps-control.log"
    with control_log.open("wb") as out:
        control = subprocess.Popen(
            [*cli, "--config", str(config), "mps-control"], stdout=out, stderr=out
        )
    plugin_dir = work / "mps-plugins"
    kubelet = Kubelet(plugin_dir).start()
    plugins: list[subprocess.Popen[bytes]] = []
    plugin_log = work / "mps-plugin.log"

    def start_plugin() -> None:
        argv = [
            sys.executable, "-m", "nvct.deviceplugin", "--config", str(config),
            "--plugin-dir", str(plugin_dir), "--cdi-spec-dir", str(work / "mps-cdi"),
        ]  # fmt: skip
        with plugin_log.open("ab") as out:
            plugins.append(subprocess.Popen(argv, stdout=out, stderr=out))

    replicas = {f"{uuid}::0", f"{uuid}::1"}

    def healthy() -> bool:
        devices = kubelet.devices("nvidia.com/gpu")
        return all(devices.get(r) == "Healthy" for r in replicas)

    client: subprocess.Popen[str] | None = None
    try:
        t0 = time.monotonic()
        ok = until(lambda: b"mps_daemon_ready" in control_log.read_bytes(), 30)
        report.say(f"mps-control ready: {ok} after {time.monotonic() - t0:.2f} s")
        pipe, shm = root / uuid / "pipe", root / uuid / "shm"
        mps_env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe)}
        asked = subprocess.run(
            ["nvidia-cuda-mps-control"], env=mps_env, capture_output=True, text=True,
            input="get_default_device_pinned_mem_limit 0\nget_default_active_thread_percentage\n",
            timeout=20, check=False,
        )  # fmt: skip
        report.say(f"the daemon's raw answers: {asked.stdout!r} {asked.stderr!r}")
        report.record("mps_raw_answers", asked.stdout)
        start_plugin()
        ok = kubelet.wait(healthy, 30)
        report.say(f"replicas Healthy: {ok}: {kubelet.devices('nvidia.com/gpu')}")
        report.record("mps_replicas_healthy", ok)
        answer = kubelet.allocate("nvidia.com/gpu", [f"{uuid}::0"])
        report.say(f"Allocate({uuid}::0):\n{answer}")
        if torch_python:
            script = work / "client.py"
            script.write_text(CUDA_CLIENT)
            client = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                 f'mount --bind "{shm}" /dev/shm && exec "$@"', "client",
                 torch_python, str(script), "40"],
                env={**mps_env, "CUDA_MPS_LOG_DIRECTORY": str(root / uuid / "log")},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            time.sleep(3)
            mps_processes(report, client.pid)
        before = kubelet.plugins["nvidia.com/gpu"].at
        plugins[-1].kill()
        plugins[-1].wait()
        report.say("plugin SIGKILLed")
        time.sleep(1)
        start_plugin()
        kubelet.wait(lambda: kubelet.plugins["nvidia.com/gpu"].at != before, 30)
        registered = kubelet.plugins["nvidia.com/gpu"].at
        ok = kubelet.wait(healthy, 30)
        took = time.monotonic() - registered
        report.say(f"after the restart: replicas Healthy {ok}, {took:.3f} s after registering")
        report.record("mps_healthy_after_restart_s", round(took, 3) if ok else None)
        if client is not None:
            out, _ = client.communicate(timeout=120)
            report.say(f"CUDA client through MPS: exit {client.returncode}\n{out[-3000:]}")
            report.record("mps_client", {"rc": client.returncode, "tail": out[-500:]})
        servers = subprocess.run(
            ["nvidia-cuda-mps-control"], env=mps_env, input="get_server_list\n",
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
        report.say(f"get_server_list: {servers.stdout!r}")
    finally:
        if client is not None and client.poll() is None:
            client.kill()
        for proc in plugins:
            proc.terminate()
            proc.wait(10)
        kubelet.stop()
        control.terminate()
        report.say(f"mps-control exit {control.wait(30)}")
        report.say(f"mps-control log:\n{control_log.read_text(errors='replace')[-4000:]}")
        report.say(f"plugin log tail:\n{plugin_log.read_text(errors='replace')[-4000:]}")


def exporter(report: Report, cli: list[str], work: Path) -> None:
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [
        *cli, "exporter", "--address", "127.0.0.1", "--port", str(port), "--interval", "1",
        "--no-kubernetes", "--plugin-dir", str(work / "device-plugins"),
    ]  # fmt: skip
    report.say("$ " + " ".join(argv))
    log = work / "exporter.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out)
    try:
        body = ""
        for _ in range(50):
            time.sleep(0.2)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    body = r.read().decode()
                if "DCGM_FI_DEV_GPU_TEMP" in body:
                    # rates (GPM, NVLink) need two rounds: scrape again after two more
                    time.sleep(2.5)
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                        body = r.read().decode()
                    break
            except OSError:
                continue
        lines = [ln for ln in body.splitlines() if ln and not ln.startswith("#")]
        report.say(f"{len(lines)} series; the GPU ones:")
        for ln in lines:
            if ln.startswith(("DCGM_", "nvct_")):
                report.say("  " + ln)
        report.record("exporter_series", len(lines))
        served_dropped(report, body, log)
    finally:
        proc.terminate()
        proc.wait(10)
        report.say(f"exporter log tail:\n{log.read_text(errors='replace')[-2000:]}")


def served_dropped(report: Report, body: str, log: Path) -> None:
    """Which of dcgm-exporter's default counters this GPU served, and which it dropped (the
    exporter's series_dropped lines, with NVML's reason)."""
    import json

    from nvct.exporter.fields import COUNTERS

    served = sorted({c.name for c in COUNTERS if f"\n{c.name}{{" in f"\n{body}"})
    dropped: dict[str, str] = {}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"series_dropped"' in line:
            event = json.loads(line)
            for field in event.get("fields", []):
                dropped.setdefault(field, event.get("reason", ""))
    missing = sorted({c.name for c in COUNTERS} - set(served) - set(dropped))
    report.say(f"default counters served ({len(served)}/{len(COUNTERS)}): {' '.join(served)}")
    for field, why in sorted(dropped.items()):
        report.say(f"  dropped {field}: {why}")
    if missing:
        report.say(f"  neither served nor dropped (an error this round?): {' '.join(missing)}")
    report.record("exporter_counters_served", len(served))
    report.record("exporter_counters_dropped", sorted(dropped))


def container(report: Report, venv_bin: Path, busybox: Path, work: Path) -> None:
    from integration.harness.bundles import make_bundle, run_runc
    from integration.harness.images import glibc_rootfs

    runc = shutil.which("runc")
    if runc is None:
        report.say("no runc on PATH: container step skipped")
        return
    run(report, [runc, "--version"])
    rootfs = glibc_rootfs(work / "rootfs", busybox=busybox)
    if "NVCT_CONFIG" in os.environ:  # a simulated driver's config (a dry run off the GPU machine)
        config = Path(os.environ["NVCT_CONFIG"])
    else:
        config = work / "nvct-config.toml"
        config.write_text(
            f'cache-dir = "{work / "cache"}"\n[log]\nfile = "{work / "nvct.log"}"\n'
            'level = "debug"\n'
        )
    env = {**os.environ, "NVCT_CONFIG": str(config)}
    cases = (("0", "merged"), ("all", "merged"), ("none", "merged"), ("0", "ldconfig"))
    for visible, cache in cases:
        name = f"{visible}-{cache}"
        own = work / f"rootfs-{name}"  # each container its own copy, as an engine gives
        shutil.copytree(rootfs, own, symlinks=True)
        if cache == "ldconfig":  # a cache nvct cannot merge: the host's ldconfig must run
            (own / "etc/ld.so.cache").write_bytes(b"not a cache")
        bundle = make_bundle(
            work / f"bundle-{name}", own, ["nvidia-smi", "-L"],
            [f"NVIDIA_VISIBLE_DEVICES={visible}", "NVIDIA_DRIVER_CAPABILITIES=utility"],
        )  # fmt: skip
        t0 = time.monotonic()
        proc = run_runc(bundle, f"nvct-check-{name}", runtime=venv_bin / "nvct-runtime", env=env)
        took = time.monotonic() - t0
        report.say(
            f"NVIDIA_VISIBLE_DEVICES={visible}, {cache}: exit {proc.returncode}, {took:.2f} s"
        )
        report.say(proc.stdout + proc.stderr)
        report.record(f"container_{name}", {"rc": proc.returncode, "out": proc.stdout.strip()})
    log = work / "nvct.log"
    if log.exists():  # the config this step wrote
        report.say(f"nvct log tail:\n{log.read_text(errors='replace')[-4000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--busybox", type=Path, default=Path("/bin/busybox"))
    parser.add_argument(
        "--config", type=Path, help="an nvct config.toml (NVCT_CONFIG) for nvct's steps"
    )
    args = parser.parse_args()
    if args.config:
        os.environ["NVCT_CONFIG"] = str(args.config)
    report = Report(args.out)
    venv_bin = Path(sys.executable).parent
    cli = [sys.executable, "-m", "nvct.cli.main"]
    work = Path(tempfile.mkdtemp(prefix="nvct-device-check-"))
    with report.step("host"):
        run(report, ["uname", "-a"])
        run(report, ["nvidia-smi", "-L"])
        run(report, ["nvidia-smi", "-q", "-d", "ECC,ROW_REMAPPER,PAGE_RETIREMENT"])
        facts = (
            "ls -l /dev/nvidia* /dev/dri 2>&1; ldconfig -p | grep -E 'libnvidia-ml|libcuda'; "
            "command -v runc docker containerd podman nvidia-cuda-mps-control || true"
        )
        run(report, ["sh", "-c", facts])
        report.record("python", sys.version)
    with report.step("NVML facts (pynvml)"):
        nvml_facts(report)
    for name, argv in (
        ("nvct-cli info", [*cli, "info"]),
        ("nvct-cli list", [*cli, "list"]),
        ("nvct-cli list --json", [*cli, "list", "--json"]),
        ("nvct-cli doctor", [*cli, "doctor"]),
        ("nvct-cli labels", [*cli, "labels", "--no-timestamp"]),
        ("nvct-cli cdi generate", [*cli, "cdi", "generate"]),
    ):
        with report.step(name):
            report.record(name, run(report, argv)[:20000])
    with report.step("nvct-device-plugin against the kubelet stand-in"):
        device_plugin(report, cli, work)
    with report.step("MPS: nvct-cli mps-control, the plugin restarted under a CUDA client"):
        mps(report, cli, work, os.environ.get("TORCH_PYTHON"))
    with report.step("nvct-cli exporter, one scrape"):
        exporter(report, cli, work)
    with report.step("a container through nvct-runtime (runc)"):
        container(report, venv_bin, args.busybox, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
