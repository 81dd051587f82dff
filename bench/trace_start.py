"""Where a 1-GPU start spends its time: the launcher -> daemon -> runc chain under strace.

As root from the repository root, after ``make venv``::

    .venv/bin/python -m bench.trace_start [--starts N]

Runs ``runc run`` of ``/bin/true`` on a fresh overlay of the glibc image (as ``bench.runc_only``
does, on the simulated 4-GPU driver) through plain runc, nvct-runtime with the shim daemon and
nvct-runtime without it, each ``N`` times under ``strace --seccomp-bpf -f`` stopping only at
``execve``, ``connect``, ``mount`` and ``mknodat`` (the filter keeps the tracing cost off every
other call), and prints per variant the medians of: the launcher's start to its ``connect`` to
the daemon, from there to runc's ``execve`` (the daemon's round trip and the worker's create),
the launcher's start to runc's ``execve`` (without a daemon: the Python shim), runc's
``execve`` to the container process's (runc's own work), and the count of ``mount`` and
``mknodat`` calls. strace still slows every process it follows: the times are for comparing
the variants and the phases, the counts are exact.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench.bench import config_for
from bench.runc_only import build_programs, bundle, start
from integration.harness.images import glibc_rootfs
from integration.harness.shimd import ShimDaemon

CALLS = "execve,connect,mount,mknodat"
LINE = re.compile(r"(\d+) ([\d.]+) (\w+)\((.*)")


def phases(trace: str) -> dict[str, float]:
    """The phases (ms) and counts of one start's ``strace -f -ttt`` output."""
    events = [(float(m[2]) * 1000, m[3], m[4]) for m in map(LINE.match, trace.splitlines()) if m]
    execs = [(t, args) for t, call, args in events if call == "execve"]
    began = execs[0][0]
    runc = next(t for t, a in execs if a.split(",")[0].strip('"').endswith("/runc"))
    process = next(t for t, a in execs if a.startswith('"/bin/true"'))
    connect = next((t for t, call, a in events if call == "connect" and ".sock" in a), None)
    return {
        "start_to_connect": (connect - began) if connect else 0.0,
        "connect_to_runc": (runc - connect) if connect else 0.0,
        "start_to_runc": runc - began,
        "runc_to_process": process - runc,
        "mount_calls": sum(1 for _, call, _ in events if call == "mount"),
        "mknodat_calls": sum(1 for _, call, _ in events if call == "mknodat"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.trace_start")
    parser.add_argument("--starts", type=int, default=15)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench.trace_start: needs root (runc, overlay mounts)", file=sys.stderr)
        return 1
    from integration.simdriver import cached_driver, preset

    work = Path(tempfile.mkdtemp(prefix="nvct-bench-trace-"))
    driver = cached_driver(preset("h100x4-550"), Path("/tmp/nvct-test-simdrivers"))
    cfg = config_for(driver, work / "nvct")
    os.environ["NVCT_CONFIG"] = str(cfg)
    programs, sock = work / "bin", work / "shim.sock"
    build_programs(programs, str(cfg), sock)
    image = glibc_rootfs(work / "image")
    gpu = ["NVIDIA_VISIBLE_DEVICES=0"]
    variants = {
        "runc": ("runc", []),
        "nvct-runtime, 1 GPU": (str(programs / "nvct-runtime"), gpu),
        "nvct-runtime, 1 GPU, no daemon": (str(programs / "nvct-runtime-alone"), gpu),
    }
    daemon = [sys.executable, "-m", "nvct.runtime.launch.daemon"]
    shimd = ShimDaemon(daemon, sock, work / "shimd.log").start()
    seen: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    try:
        for n in range(args.starts + 2):  # two warm-up rounds: inventory, work order, caches
            for name, (runtime, env) in variants.items():
                log = work / "strace.txt"
                tracer = ["strace", "--seccomp-bpf", "-f", "-ttt", "-e", f"trace={CALLS}"]
                run = [runtime, "--root", str(work / "state"), "run", "--bundle", str(work / "b")]
                start(
                    image,
                    work / "b",
                    bundle(work / "b", env, None, cfg),
                    [*tracer, "-o", str(log), *run, f"c{n}"],
                )
                if n >= 2:
                    seen[name].append(phases(log.read_text()))
    finally:
        shimd.stop()
    shutil.rmtree(work, ignore_errors=True)
    for name, rows in seen.items():
        medians = {k: round(statistics.median(r[k] for r in rows), 2) for k in rows[0]}
        print(f"{name}: {medians}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
