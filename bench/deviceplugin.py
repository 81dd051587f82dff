"""nvct-device-plugin's latencies, seen from the kubelet stand-in over gRPC on Unix sockets.

``python -m bench.deviceplugin [--rounds N] [--output FILE]`` (root: the simulated driver's
device nodes): the real plugin process on the 8-GPU simulated driver with NVLink pairs behind
PCIe switches (h100pcie-x8-nvlink-pairs), then GetPreferredAllocation (1 to 7 of 8 GPUs) and
Allocate (1 GPU, cdi-cri and envvar answers) p50/p99 through gRPC, the policy alone in process
(the same topology, so gRPC's share shows), the time from a kubelet restart (kubelet.sock
re-created) to the plugin's new registration, and the plugin's resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench import config_for
from integration.kubelet.standin import Kubelet
from integration.simdriver import cached_driver, preset

GPU = "nvidia.com/gpu"
PRESET = "h100pcie-x8-nvlink-pairs"


def policy_alone(sim: object, rounds: int) -> dict[str, dict[str, float]]:
    """``preferred`` for 1..7 of the 8 GPUs, in process, on the topology the plugin reads
    (the simulated driver's NVML, through the plugin's own reader)."""
    from nvct.deviceplugin.preferred import pcie_score, preferred
    from nvct.host.arch import host_arch
    from nvct.host.discover.libraries import driver_nvml_library
    from nvct.host.discover.nvml import open_nvml
    from nvct.node.devices import PluginDevice
    from nvct.node.topology import read_topology

    gpus = sim.spec.gpus  # type: ignore[attr-defined]
    devices = [
        PluginDevice(g.uuid, g.uuid, str(i), i, g.pci_bus_id, g.numa_node, g.minor)
        for i, g in enumerate(gpus)
    ]
    nvml = open_nvml(driver_nvml_library(sim.driver_root, host_arch()))  # type: ignore[attr-defined]
    try:
        topology = read_topology(nvml, devices)
    finally:
        nvml.nvmlShutdown()
    close = topology.pcie_closeness(pcie_score)
    out = {}
    for size in range(1, len(devices)):
        samples = [
            timed_ms(lambda s=size: preferred(devices, [], s, topology.links, pcie=close))
            for _ in range(rounds)
        ]
        out[f"{size} of {len(devices)}"] = percentiles(samples)
    return out


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=100)
    return {"p50_ms": round(q[49], 3), "p99_ms": round(q[98], 3), "n": len(ordered)}


def timed_ms(call: object) -> float:
    start = time.perf_counter()
    call()  # type: ignore[operator]
    return (time.perf_counter() - start) * 1000


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.deviceplugin")
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--restarts", type=int, default=20)
    parser.add_argument("--output", type=Path, default=Path("bench/results-deviceplugin.json"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench: needs root (the simulated driver's device nodes)", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="nvct-bench-dp-"))
    sim = cached_driver(preset(PRESET), Path("/tmp/nvct-test-simdrivers"))
    config = config_for(sim, work / "nvct")
    kubelet = Kubelet(work / "device-plugins").start()
    argv = [sys.executable, "-m", "nvct.deviceplugin", "--config", str(config)]
    argv += ["--plugin-dir", str(kubelet.plugin_dir), "--cdi-spec-dir", str(work / "cdi")]
    argv += ["--device-list-strategy", "cdi-cri,envvar", "--sysfs-root", str(sim.sys_root)]
    plugin = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates, 60):
            print("bench: the plugin did not register", file=sys.stderr)
            return 1
        ids = sorted(kubelet.devices(GPU))
        results: dict[str, object] = {"gpus": len(ids)}
        for size in range(1, len(ids)):
            samples = [
                timed_ms(lambda s=size: kubelet.preferred(GPU, ids, [], s))
                for _ in range(args.rounds)
            ]
            results[f"GetPreferredAllocation {size} of {len(ids)}"] = percentiles(samples)
        results["policy alone (in process)"] = policy_alone(sim, args.rounds)
        samples = [timed_ms(lambda: kubelet.allocate(GPU, ids[:1])) for _ in range(args.rounds)]
        results["Allocate 1 GPU (cdi-cri + envvar)"] = percentiles(samples)
        took = []
        for _ in range(args.restarts):
            restarted = kubelet.restart()
            kubelet.wait(lambda: GPU in kubelet.plugins, timeout=10)
            took.append((kubelet.plugins[GPU].at - restarted) * 1000)
        results["kubelet restart -> registered"] = {
            "median_ms": round(statistics.median(took), 1),
            "max_ms": round(max(took), 1),
            "n": len(took),
        }
        results["plugin RSS (MiB)"] = rss_mib(plugin.pid)
    finally:
        plugin.send_signal(signal.SIGTERM)
        plugin.wait(timeout=15)
        kubelet.stop()
    print(json.dumps(results, indent=2))
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
