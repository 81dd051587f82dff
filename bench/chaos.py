"""A bounded chaos run of nvct-device-plugin against the kubelet stand-in, on the simulated
4-GPU driver: Allocate calls while the kubelet restarts, one GPU's NVML queries fail
intermittently, XIDs arrive on the others, and the plugin is SIGKILLed and started again.

``python -m bench.chaos [--allocations N] [--output FILE]`` (root: the simulated driver's
device nodes). ``integration/test_chaos.py`` runs the same ``run_chaos`` in CI.

Checked at the end (``violations`` lists what failed):
- every device's health is right: the XID'd and the flaky GPUs Healthy again (XID 8, "GPU
  stopped processing", is an application-level XID: it recovers after the quiet period), the
  GPU lost at the end Unhealthy with the reason (NVML's GPU_IS_LOST, or the driver's XID 79);
  the kubelet and the status file agree;
- no allocation was answered for an Unhealthy device: after an XID at ``t`` the kubelet heard
  Unhealthy at ``u``; the plugin cannot recover before ``t + quiet``, so every Allocate of that
  device sent after ``u`` and answered before ``t + quiet`` must be refused (the run aims some
  of its Allocate calls there, as a kubelet with a stale view would);
- no socket is stale: every socket in the directory accepts a connection;
- every status-file read parsed (a reader thread reads it every 2 ms throughout).

Latency: from writing an XID into the simulated driver to the kubelet stand-in receiving the
ListAndWatch message with that device Unhealthy. Left out: XIDs written while the plugin was
not registered (from a kubelet restart or a plugin kill to the next registration) or whose
report spans such a gap; an XID while no plugin runs is never seen (NVML delivers events only
to an event set that existed when they happened).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from integration.harness.deviceplugin import PluginProcess
from integration.kubelet.standin import Kubelet
from integration.simdriver import inject
from nvct.node.status import read_status

GPU = "nvidia.com/gpu"
PRESET = "h100x4-550"
XID = 8  # ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT: NVIDIA's catalogue says RESTART_APP
QUIET_S = 1.0
FLAKY_GPU, LOST_GPU = 3, 2  # by index; XIDs go to 0, 1 and 2


@dataclass(frozen=True)
class Settings:
    allocations: int = 200
    kubelet_restarts: int = 10
    plugin_kills: int = 2
    flaky: float = 0.03  # share of the flaky GPU's NVML queries that fail
    pace_s: float = 0.06  # between two Allocate calls
    seed: int = 25


@dataclass
class Attempt:
    device: str
    sent: float
    answered: float
    code: str  # OK, or the gRPC status code's name


@dataclass
class Run:
    """What happened, for the checks afterwards."""

    xids: list[tuple[float, str]] = field(default_factory=list)  # (written at, device)
    attempts: list[Attempt] = field(default_factory=list)
    disruptions: list[float] = field(default_factory=list)  # kubelet restarts, plugin kills
    kills: list[float] = field(default_factory=list)
    status_reads: int = 0
    status_unparsed: list[str] = field(default_factory=list)


class StatusReader(threading.Thread):
    """Reads the status file every 2 ms until stopped; counts what did not parse."""

    def __init__(self, directory: Path, run: Run) -> None:
        super().__init__(daemon=True)
        self.directory, self.run_ = directory, run
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.002):
            status, why = read_status(self.directory)
            if status is not None:
                self.run_.status_reads += 1
            elif why:
                self.run_.status_unparsed.append(why)


def run_chaos(work: Path, sim: Any, settings: Settings = Settings()) -> dict[str, Any]:
    """The run in ``work``; its results (``violations`` empty when every check held)."""
    rng = random.Random(settings.seed)  # noqa: S311 - a repeatable schedule, not a secret
    kubelet = Kubelet(work / "device-plugins").start()
    ids = [g.uuid for g in sim.spec.gpus]
    toml = {"device-plugin.ignored-xids": "[]"}  # the run's XIDs all count, whatever the default
    args = ("--quiet-period", str(QUIET_S))
    plugin = PluginProcess(work, sim, kubelet.plugin_dir, *args, **toml).start()
    run = Run()
    reader = StatusReader(kubelet.plugin_dir, run)
    began = time.monotonic()
    try:
        if not kubelet.wait(lambda: kubelet.devices(GPU) == dict.fromkeys(ids, "Healthy"), 60):
            raise RuntimeError(f"the plugin did not register:\n{plugin.output()}")
        reader.start()
        inject.flaky(plugin.control, sim.spec.gpus[FLAKY_GPU].minor, settings.flaky)
        restart_at = _spread(settings.allocations, settings.kubelet_restarts, 0.05)
        kill_at = _spread(settings.allocations, settings.plugin_kills, 0.3)
        for n in range(settings.allocations):
            if n in restart_at:
                run.disruptions.append(time.monotonic())
                kubelet.restart()
            if n in kill_at:
                plugin = _kill_and_restart(plugin, run)
            _maybe_xid(kubelet, plugin, sim, run, rng)
            _allocate(kubelet, run, rng, ids)
            time.sleep(settings.pace_s)
        inject.flaky(plugin.control, sim.spec.gpus[FLAKY_GPU].minor, 0)
        inject.lose(plugin.control, sim.spec.gpus[LOST_GPU].minor)
        expected = dict.fromkeys(ids, "Healthy") | {ids[LOST_GPU]: "Unhealthy"}
        settled = kubelet.wait(lambda: kubelet.devices(GPU) == expected, 4 * QUIET_S + 5)
        time.sleep(0.05)  # the status file is written before ListAndWatch is told
        final_status = _status(kubelet.plugin_dir)
        alive = plugin.proc is not None and plugin.proc.poll() is None
        stale = _stale_sockets(kubelet.plugin_dir)
        final = kubelet.devices(GPU)
    finally:
        reader.stopping.set()
        if reader.is_alive():
            reader.join()
        exit_code = plugin.stop()
        kubelet.stop()
    duration = time.monotonic() - began
    checks, unhealthy_answers = _must_refuse(run, kubelet)
    latencies = _latencies(run, kubelet)
    violations = [f"allocation answered for an Unhealthy device: {a}" for a in unhealthy_answers]
    if not settled or final != expected:
        violations.append(f"final health {final}, expected {expected}")
    lost = final_status.get(ids[LOST_GPU], ("", ""))
    if lost[0] != "Unhealthy" or not ("GPU is lost" in lost[1] or "XID 79" in lost[1]):
        violations.append(f"the status file says {lost} for the lost GPU")
    if {d: h for d, (h, _) in final_status.items()} != expected:
        violations.append(f"the status file says {final_status}")
    if stale:
        violations.append(f"stale sockets: {stale}")
    if run.status_unparsed:
        violations.append(f"status reads that did not parse: {run.status_unparsed[:3]}")
    if not alive or exit_code != 0:
        violations.append(f"the plugin died or exited {exit_code} on SIGTERM")
    if checks == 0:
        violations.append("no Allocate fell inside a known-Unhealthy window: nothing was checked")
    codes = [a.code for a in run.attempts]
    return {
        "settings": settings.__dict__,
        "duration_s": round(duration, 1),
        "allocate_calls": len(run.attempts),
        "allocate_answers": {c: codes.count(c) for c in sorted(set(codes))},
        "allocations_checked_in_unhealthy_windows": checks,
        "kubelet_restarts": settings.kubelet_restarts,
        "plugin_kills": len(run.kills),
        "xids_injected": len(run.xids),
        "xids_while_unregistered": len(run.xids) - len(_outside_gaps(run, kubelet)),
        "status_reads": run.status_reads,
        "status_reads_unparsed": len(run.status_unparsed),
        "health_event_to_list_and_watch_ms": _percentiles(latencies),
        "violations": violations,
    }


def _spread(total: int, count: int, start: float) -> set[int]:
    """``count`` allocation numbers spread over the run, the first after ``start`` of it."""
    if count == 0:
        return set()
    step = (1 - start) / count
    return {int(total * (start + i * step)) for i in range(count)}


def _kill_and_restart(plugin: PluginProcess, run: Run) -> PluginProcess:
    assert plugin.proc is not None
    run.kills.append(time.monotonic())
    run.disruptions.append(run.kills[-1])
    plugin.proc.send_signal(signal.SIGKILL)
    plugin.proc.wait()
    return plugin.start()  # the same work directory and control directory (the node's state)


def _maybe_xid(
    kubelet: Kubelet, plugin: PluginProcess, sim: Any, run: Run, rng: random.Random
) -> None:
    """An XID on a GPU (not the flaky one) the kubelet has Healthy and no XID hit lately."""
    seen = kubelet.devices(GPU)
    last = {d: t for t, d in run.xids}
    now = time.monotonic()
    candidates = [
        (i, g.uuid)
        for i, g in enumerate(sim.spec.gpus)
        if i != FLAKY_GPU
        and seen.get(g.uuid) == "Healthy"
        and now - last.get(g.uuid, 0) > QUIET_S + 0.2
    ]
    if candidates and rng.random() < 0.5:
        i, uuid = rng.choice(candidates)
        run.xids.append((time.monotonic(), uuid))
        inject.xid(plugin.control, sim.spec.gpus[i].minor, XID)


def _allocate(kubelet: Kubelet, run: Run, rng: random.Random, ids: list[str]) -> None:
    """One Allocate: usually of a device the kubelet has Healthy; else (a stale kubelet) of
    one an XID has just made Unhealthy."""
    seen = kubelet.devices(GPU)
    now = time.monotonic()
    recent = [d for t, d in run.xids if now - t < QUIET_S - 0.2 and seen.get(d) == "Unhealthy"]
    healthy = [d for d in ids if seen.get(d) == "Healthy"]
    pool = recent if recent and rng.random() < 0.4 else healthy or ids
    device = rng.choice(pool)
    sent = time.monotonic()
    try:
        kubelet.allocate(GPU, [device])
        code = "OK"
    except grpc.RpcError as err:
        code = err.code().name
    except (AssertionError, ValueError):  # not registered (a restart), or its channel closed
        code = "NOT_REGISTERED"
        kubelet.wait(lambda: kubelet.registered(GPU) is not None, 10)
    run.attempts.append(Attempt(device, sent, time.monotonic(), code))


def _first_unhealthy(kubelet: Kubelet, device: str, after: float) -> float | None:
    for at, resource, health in kubelet.received:
        if at >= after and resource == GPU and health.get(device) == "Unhealthy":
            return at
    return None


def _must_refuse(run: Run, kubelet: Kubelet) -> tuple[int, list[Attempt]]:
    """How many Allocate calls fell inside a window where the device was surely Unhealthy in
    the plugin, and those of them that were answered."""
    checked, answered = 0, []
    for t, device in run.xids:
        heard = _first_unhealthy(kubelet, device, t)
        if heard is None:
            continue
        end = t + QUIET_S
        if any(t <= k <= end for k in run.kills):  # a new plugin knows nothing of the XID
            end = min(k for k in run.kills if k >= t)
        for a in run.attempts:
            if a.device == device and a.sent >= heard and a.answered < end:
                checked += 1
                if a.code == "OK":
                    answered.append(a)
    return checked, answered


def _latencies(run: Run, kubelet: Kubelet) -> list[float]:
    gaps = _gaps(run, kubelet)
    out = []
    for t, device in run.xids:
        heard = _first_unhealthy(kubelet, device, t)
        if heard is not None and not any(start <= heard and t <= end for start, end in gaps):
            out.append((heard - t) * 1000)
    return out


def _outside_gaps(run: Run, kubelet: Kubelet) -> list[tuple[float, str]]:
    gaps = _gaps(run, kubelet)
    return [(t, d) for t, d in run.xids if not any(start <= t <= end for start, end in gaps)]


def _gaps(run: Run, kubelet: Kubelet) -> list[tuple[float, float]]:
    """From each kubelet restart or plugin kill to the plugin's next registration."""
    return [(d, _registered_after(kubelet, d)) for d in run.disruptions]


def _registered_after(kubelet: Kubelet, at: float) -> float:
    """When the plugin was registered again after a disruption at ``at``."""
    return min(
        (r for r, resource in kubelet.registrations if r >= at and resource == GPU),
        default=float("inf"),
    )


def _percentiles(samples: list[float]) -> dict[str, float]:
    if len(samples) < 2:
        return {"n": len(samples)}
    q = statistics.quantiles(sorted(samples), n=100, method="inclusive")
    return {
        "p50": round(q[49], 1),
        "p99": round(q[98], 1),
        "max": round(max(samples), 1),
        "n": len(samples),
    }


def _status(directory: Path) -> dict[str, tuple[str, str]]:
    status, _ = read_status(directory)
    if status is None:
        return {}
    return {d["id"]: (d["health"], d["reason"]) for d in status.resources.get(GPU, [])}


def _stale_sockets(directory: Path) -> list[str]:
    """Sockets in the directory that no one listens on."""
    stale = []
    for entry in sorted(directory.iterdir()):
        if not entry.is_socket():
            continue
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(str(entry))
            except OSError:
                stale.append(entry.name)
    return stale


def main() -> int:
    from integration.simdriver import cached_driver, preset

    parser = argparse.ArgumentParser(prog="python -m bench.chaos")
    parser.add_argument("--allocations", type=int, default=Settings.allocations)
    parser.add_argument("--output", type=Path, default=Path("bench/results-chaos.json"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench: needs root (the simulated driver's device nodes)", file=sys.stderr)
        return 1
    sim = cached_driver(preset(PRESET), Path("/tmp/nvct-test-simdrivers"))
    with tempfile.TemporaryDirectory(prefix="nvct-chaos-") as work:
        results = run_chaos(Path(work), sim, Settings(allocations=args.allocations))
    text = json.dumps(results, indent=2)
    print(text)
    args.output.write_text(text + "\n")
    return 1 if results["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
