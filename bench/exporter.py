"""``nvct-cli exporter``'s cost on an 8-GPU node with every series.

``python -m bench.exporter [--scrapes N] [--cpu-seconds S] [--output FILE]`` (root: the
simulated driver's device nodes): the real exporter on the HGX H100 simulated driver
(h100x8-nvswitch: NVLink, GPM, HBM, so every default counter NVML gives is served), each GPU
time-sliced into 4 replicas held by 2 containers (the kubelet stand-in's pod-resources), then:

- one scrape of ``/metrics`` over HTTP, p50/p99 of N (goal: under 10 ms);
- the sampler's CPU cost at the default interval (10 s): the process's user+system CPU over S
  seconds without scrapes, as a share of one core (goal: under 1 %), and one round's duration;
- the process's resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.deviceplugin import percentiles, rss_mib, timed_ms
from integration.harness.nvct_config import write_nvct_config
from integration.kubelet.podresources import Container, PodResources
from integration.simdriver import cached_driver, inject, preset

PRESET = "h100x8-nvswitch"
SHARED = "nvidia.com/gpu.shared"
REPLICAS = 4


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process used so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pods(uuids: list[str]) -> tuple[list[Container], dict[str, list[str]]]:
    """Two containers per GPU, each holding one of its replicas."""
    held = [
        Container(f"pod-{i}-{c}", "bench", "main", {SHARED: [f"{uuid}::{c}"]})
        for i, uuid in enumerate(uuids)
        for c in range(2)
    ]
    return held, {SHARED: [f"{u}::{n}" for u in uuids for n in range(REPLICAS)]}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.exporter")
    parser.add_argument("--scrapes", type=int, default=300)
    parser.add_argument("--cpu-seconds", type=float, default=60.0)
    parser.add_argument("--output", type=Path, default=Path("bench/results-exporter.json"))
    args = parser.parse_args()
    sim = cached_driver(preset(PRESET), Path("/tmp/nvct-test-simdrivers"))
    work = Path(tempfile.mkdtemp(prefix="nvct-bench-exporter-"))
    control = work / "nvml-control"
    control.mkdir()
    uuids = [g.uuid for g in sim.spec.gpus]
    for g in sim.spec.gpus:  # busy GPUs: every value non-zero, NVLink traffic flowing
        inject.set_metrics(control, g.minor, util=70, memory_used_mib=40000, nvlink_kibps=1 << 20,
                           gpm_graphics=70, gpm_tensor=40, gpm_dram=50, util_encoder=1)  # fmt: skip
    kubelet = PodResources(work / "pod-resources" / "kubelet.sock").start()
    held, allocatable = pods(uuids)
    kubelet.set_containers(held)
    kubelet.set_allocatable(allocatable)
    config = write_nvct_config(work / "config.toml", sim)
    port = free_port()
    argv = [
        sys.executable, "-m", "nvct.cli.main", "--config", str(config), "exporter",
        "--address", "127.0.0.1", "--port", str(port), "--plugin-dir", str(work / "plugins"),
        "--pod-resources-socket", str(kubelet.socket),
    ]  # fmt: skip
    env = {**os.environ, inject.ENV_CONTROL_DIR: str(control)}
    log = (work / "exporter.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        body = ""
        deadline = time.monotonic() + 60
        while "DCGM_FI_DEV_GPU_TEMP" not in body:  # the first round (default interval: 10 s)
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"exporter did not serve: {(work / 'exporter.log').read_text()}")
            time.sleep(0.2)
            try:
                body = urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:
                continue
        time.sleep(10.5)  # the second round: the rates (NVLink, GPM) need two
        body = urllib.request.urlopen(url, timeout=5).read().decode()
        series = [ln for ln in body.splitlines() if ln and not ln.startswith("#")]
        names = sorted({ln.split("{")[0].split(" ")[0] for ln in series})

        def scrape() -> None:
            with urllib.request.urlopen(url, timeout=5) as r:
                r.read()

        scrapes = percentiles([timed_ms(scrape) for _ in range(args.scrapes)])
        # CPU at the default interval, no scrapes: the sampler, the XID watch, the HTTP server idle
        before, started = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(args.cpu_seconds)
        used, wall = cpu_seconds(proc.pid) - before, time.monotonic() - started
        body = urllib.request.urlopen(url, timeout=5).read().decode()
        duration = next(
            float(ln.split()[-1])
            for ln in body.splitlines()
            if ln.startswith("nvct_exporter_sample_duration_seconds ")
        )
        result = {
            "preset": PRESET,
            "gpus": len(uuids),
            "containers": len(held),
            "series": len(series),
            "families": len(names),
            "body_bytes": len(body),
            "scrape": scrapes,
            "interval_s": 10.0,
            "cpu_share_of_one_core_pct": round(100 * used / wall, 3),
            "cpu_seconds": round(used, 3),
            "cpu_window_s": round(wall, 1),
            "round_duration_ms": round(duration * 1000, 2),
            "rss_mib": rss_mib(proc.pid),
            "load_average_1m": round(os.getloadavg()[0], 2),  # other jobs on this machine
            "python": sys.version.split()[0],
            "cpu_count": os.cpu_count(),
        }
    finally:
        proc.terminate()
        proc.wait(30)
        kubelet.stop()
        log.close()
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
