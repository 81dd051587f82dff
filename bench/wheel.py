"""nvct installed by pip from its wheel, against plain runc, on a private dockerd.

``python -m bench.wheel [--rounds N] [--storage-driver vfs|overlay2] [--output FILE]`` (root):
builds the wheel (``pip wheel .``), installs it into a fresh venv on the system's python3
(``--no-deps``; its libraries come from this venv through a ``.pth``, as pip would have fetched
them), registers that venv's ``nvct-runtime`` with the dockerd (a path, no runtimeArgs: the
config comes through ``NVCT_CONFIG`` in dockerd's environment), then times ``docker run --rm
IMAGE true`` round by round, interleaved in a seeded random order:

- with the wheel's shim daemon (``python -m nvct.runtime.launch.daemon`` from that venv, on the
  socket compiled into the launcher): runc, no GPU asked, 1 GPU, and ``--gpus device=0`` on
  plain runc (the wheel's native ``nvidia-container-runtime-hook``, found on dockerd's PATH,
  its work done by the daemon);
- then without a daemon (every GPU create starts the venv's Python shim, every ``--gpus``
  hook the venv's Python hook): runc, 1 GPU, ``--gpus device=0``.

Targets: no GPU <= 1.025 x runc, 1 GPU <= 1.11 x runc (median of per-round ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.bench import config_for, quantiles, timed
from integration.harness.dockerd import Dockerd
from integration.harness.images import GLIBC_TAG, docker_import, glibc_rootfs
from integration.harness.shimd import ShimDaemon
from integration.harness.wheel import build_wheel, install_wheel
from integration.simdriver import cached_driver, preset
from nvct.base.defaults import DEFAULT_SOCKET


def wheel_venv(work: Path) -> Path:
    """A fresh venv holding nvct from its wheel; returns its bin directory."""
    return install_wheel(build_wheel(work / "dist"), work / "venv")


def run_rounds(
    variants: dict[str, list[str]], env: dict[str, str], rounds: int, seed: int
) -> dict[str, list[float]]:
    for argv in variants.values():  # warm: inventory, work order, page cache
        for _ in range(2):
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"bench: {' '.join(argv)} failed:\n{done.stderr}")
    samples: dict[str, list[float]] = {name: [] for name in variants}
    order = random.Random(seed)  # noqa: S311 - an order, not a secret
    for _ in range(rounds):
        for name, argv in order.sample(list(variants.items()), len(variants)):
            samples[name].append(timed(argv, env))
    return samples


def paired(samples: dict[str, list[float]], name: str) -> float:
    return statistics.median(a / b for a, b in zip(samples[name], samples["runc"], strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wheel")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--storage-driver", default="vfs")
    parser.add_argument("--output", type=Path, default=Path("bench/results-wheel.json"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench: needs root (dockerd, device nodes)", file=sys.stderr)
        return 1
    if Path(DEFAULT_SOCKET).exists():
        print(f"bench: {DEFAULT_SOCKET} exists: stop the shim daemon first", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="nvct-bench-wheel-"))
    binary = wheel_venv(work)
    launcher = binary / "nvct-runtime"
    assert launcher.read_bytes()[:4] == b"\x7fELF", "the wheel's nvct-runtime is not native"
    sim = cached_driver(preset("h100x4-550"), Path("/tmp/nvct-test-simdrivers"))
    config = config_for(sim, work / "nvct")
    os.environ["NVCT_CONFIG"] = str(config)  # dockerd -> containerd -> shim -> nvct-runtime
    Path(DEFAULT_SOCKET).parent.mkdir(parents=True, exist_ok=True)
    shimd = ShimDaemon(
        [str(binary / "python3"), "-I", "-m", "nvct.runtime.launch.daemon"],
        Path(DEFAULT_SOCKET),
        work / "shimd.log",
    )
    dockerd = Dockerd(
        {"runtimes": {"wheel": {"path": str(launcher)}}}, storage_driver=args.storage_driver
    )
    old_path = os.environ["PATH"]
    os.environ["PATH"] = f"{binary}:{old_path}"  # dockerd finds the wheel's --gpus hook
    try:
        dockerd.start()
    finally:
        os.environ["PATH"] = old_path
    try:
        docker_import(dockerd, glibc_rootfs(work / "rootfs"), GLIBC_TAG)
        base = [dockerd.docker_cli, "-H", dockerd.host, "run", "--rm", "--network", "none"]
        gpu = ["--runtime", "wheel", "-e", "NVIDIA_VISIBLE_DEVICES=0", GLIBC_TAG, "true"]
        runc = [*base, GLIBC_TAG, "true"]
        gpus = [*base, "--gpus", "device=0", GLIBC_TAG, "true"]
        env = dockerd.cli_env()
        shimd.start()
        try:
            with_daemon = run_rounds(
                {
                    "runc": runc,
                    "no GPU asked": [*base, "--runtime", "wheel", GLIBC_TAG, "true"],
                    "1 GPU": [*base, *gpu],
                    "--gpus device=0": gpus,
                },
                env,
                args.rounds,
                args.seed,
            )
        finally:
            shimd.stop()
        without = run_rounds(
            {"runc": runc, "1 GPU": [*base, *gpu], "--gpus device=0": gpus},
            env,
            args.rounds,
            args.seed,
        )
    finally:
        dockerd.stop()
    events = [json.loads(line) for line in (config.parent / "nvct.log").read_text().splitlines()]
    prepared = [e for e in events if e.get("event") == "container_prepared"]
    assert prepared, "no GPU create reached nvct (NVCT_CONFIG did not reach the runtime)"
    configured = [e["via"] for e in events if e.get("event") == "container_configured"]
    hook_paths = {via: configured.count(via) for via in ("daemon", "hook")}
    ratios = {
        "no GPU / runc (<= 1.025)": paired(with_daemon, "no GPU asked"),
        "1 GPU / runc, shim daemon (<= 1.11)": paired(with_daemon, "1 GPU"),
        "1 GPU / runc, no daemon (<= 1.11)": paired(without, "1 GPU"),
        "--gpus device=0 / runc, shim daemon (<= 1.05)": paired(with_daemon, "--gpus device=0"),
        "--gpus device=0 / runc, no daemon": paired(without, "--gpus device=0"),
    }
    results = {
        "with daemon": {k: quantiles(v) for k, v in with_daemon.items()},
        "no daemon": {k: quantiles(v) for k, v in without.items()},
        "ratios (median of per-round ratios)": {k: round(v, 3) for k, v in ratios.items()},
        "rounds": args.rounds,
        "storage_driver": args.storage_driver,
        "gpus_hook_paths": hook_paths,  # --gpus starts by path: 2 + rounds each expected
    }
    for phase in ("with daemon", "no daemon"):
        for name, q in results[phase].items():
            print(f"{phase:<12} {name:<14} median {q['median']:8.2f} ms  p10 {q['p10']:8.2f}")
    for name, ratio in ratios.items():
        print(f"{name:<46} {ratio:.3f}")
    print(
        f"--gpus hook's work: by a daemon worker {hook_paths['daemon']}, the Python hook "
        f"{hook_paths['hook']} (of {2 + args.rounds} starts each)"
    )
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
