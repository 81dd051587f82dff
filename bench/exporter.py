"""``nvct-cli exporter``'s cost on an 8-GPU node with every series, with and without per-pod
usage.

``python -m bench.exporter [--scrapes N] [--cpu-seconds S] [--output FILE]`` (root: the
simulated driver's device nodes, and cgroups for the pods' processes): the real exporter on the
HGX H100 simulated driver (h100x8-nvswitch: NVLink, GPM, HBM, so every default counter NVML
gives is served), GPUs 0-6 time-sliced into 4 replicas and GPU 7 shared through MPS, two pods
on each (bench/exporter_pods.py: each pod's process in its container's cgroup, NVML told what
each uses, the kubelet's pod-resources and the runtime's CRI listing served by stand-ins), run
twice, one after the other: as the chart runs it by default, and with ``--per-pod-usage``
(each pod's own memory and SM %: NVML's processes, their cgroups, the CRI listing). Each run:

- one scrape of ``/metrics`` over HTTP, p50/p99 of N (goal: under 10 ms);
- the sampler's CPU cost at the default interval (10 s): the process's user+system CPU over S
  seconds without scrapes, as a share of one core (goal: under 1 %), and one round's duration;
- the process's resident memory;
- a check that the pods' values are what that mode serves (the GPU's on every pod, or each
  pod's own), so a broken path is never timed.
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
from typing import Any

from bench.deviceplugin import percentiles, rss_mib, timed_ms
from bench.exporter_pods import GPU_USED_MIB, Pods, running_pods
from integration.harness.nvct_config import write_nvct_config
from integration.simdriver import cached_driver, inject, preset

PRESET = "h100x8-nvswitch"
INTERVAL_S = 10.0  # the exporter's default


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process used so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch(port: int) -> str:
    """One scrape of the exporter's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return str(r.read().decode())


def pod_values(body: str, name: str) -> dict[str, float]:
    """pod → the value of ``name``'s series carrying that pod."""
    out = {}
    for line in body.splitlines():
        if line.startswith(name + "{") and 'pod="' in line:
            pod = line.split('pod="', 1)[1].split('"', 1)[0]
            out[pod] = float(line.rsplit(" ", 1)[1])
    return out


def check(body: str, pods: Pods, per_pod: bool) -> None:
    """Each pod's memory: its own process's with per-pod usage, else the GPU's."""
    got = pod_values(body, "DCGM_FI_DEV_FB_USED")
    want = {h.pod: float(h.used_mib if per_pod else GPU_USED_MIB) for h in pods.holders}
    if got != want:
        raise SystemExit(f"per-pod-usage={per_pod}: pods' memory {got}, expected {want}")


def measure(
    sim: Any, work: Path, control: Path, pods: Pods, per_pod: bool, args: argparse.Namespace
) -> dict[str, Any]:
    """One exporter run: start it, wait for two rounds, time the scrapes, then its idle CPU."""
    config = write_nvct_config(work / "config.toml", sim)
    port = free_port()
    argv = [
        sys.executable, "-m", "nvct.cli.main", "--config", str(config), "exporter",
        "--address", "127.0.0.1", "--port", str(port), "--plugin-dir", str(work / "plugins"),
        "--pod-resources-socket", str(pods.pod_resources.socket),
    ]  # fmt: skip
    if per_pod:
        argv += ["--per-pod-usage", "--cri-socket", str(pods.cri.socket)]
    env = {**os.environ, inject.ENV_CONTROL_DIR: str(control)}
    log_path = work / "exporter.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env)
    try:
        body = ""
        deadline = time.monotonic() + 60
        while "DCGM_FI_DEV_GPU_TEMP" not in body:  # the first round
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"exporter did not serve: {log_path.read_text()}")
            time.sleep(0.2)
            try:
                body = fetch(port)
            except OSError:
                continue
        time.sleep(INTERVAL_S + 0.5)  # the second round: the rates (NVLink, GPM) need two
        body = fetch(port)
        check(body, pods, per_pod)
        series = [ln for ln in body.splitlines() if ln and not ln.startswith("#")]
        names = sorted({ln.split("{")[0].split(" ")[0] for ln in series})
        cri_before = pods.cri.calls["ListContainers"]
        scrapes = percentiles([timed_ms(lambda: fetch(port)) for _ in range(args.scrapes)])
        # CPU at the default interval, no scrapes: the sampler, the XID watch, the HTTP server idle
        before, started = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(args.cpu_seconds)
        used, wall = cpu_seconds(proc.pid) - before, time.monotonic() - started
        rss = rss_mib(proc.pid)
        body = fetch(port)
        duration = next(
            float(ln.split()[-1])
            for ln in body.splitlines()
            if ln.startswith("nvct_exporter_sample_duration_seconds ")
        )
        return {
            "per_pod_usage": per_pod,
            "series": len(series),
            "families": len(names),
            "body_bytes": len(body),
            "scrape": scrapes,
            "cpu_share_of_one_core_pct": round(100 * used / wall, 3),
            "cpu_seconds": round(used, 3),
            "cpu_window_s": round(wall, 1),
            "round_duration_ms": round(duration * 1000, 2),
            "rss_mib": rss,
            # CRI listings during the scrapes and the CPU window: one per round, none per scrape
            "cri_listings": pods.cri.calls["ListContainers"] - cri_before,
            "load_average_1m": round(os.getloadavg()[0], 2),  # other jobs on this machine
        }
    finally:
        proc.terminate()
        proc.wait(30)


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
        inject.set_metrics(control, g.minor, util=70, memory_used_mib=GPU_USED_MIB,
                           nvlink_kibps=1 << 20, gpm_graphics=70, gpm_tensor=40, gpm_dram=50,
                           util_encoder=1)  # fmt: skip
    with running_pods(work, control, uuids) as pods:
        runs = [
            measure(sim, work / mode, control, pods, mode == "per-pod", args)
            for mode in ("gpu-values", "per-pod")
        ]
    result = {
        "preset": PRESET,
        "gpus": len(uuids),
        "pods": len(pods.holders),
        "sharing": "GPUs 0-6 time-sliced (4 replicas, 2 held), GPU 7 MPS (2 replicas, both held)",
        "cri": "stand-in listing (integration/kubelet/crilisting.py), not containerd",
        "interval_s": INTERVAL_S,
        "scrapes": args.scrapes,
        "without_per_pod_usage": runs[0],
        "with_per_pod_usage": runs[1],
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
    }
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
