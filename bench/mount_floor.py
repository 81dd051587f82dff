"""The floor of a 1-GPU ``docker run``: what the GPU's mounts and device nodes cost with no nvct.

As root from the repository root, after ``make venv`` (a minute or two)::

    .venv/bin/python -m bench.mount_floor [--rounds N] [--seed N] [--docker-kit FILE]
        [--driver sim|host] [--budget-s S] [--library-mounts MODE] [--output FILE]

nvct plans a 1-GPU container (the simulated 4-GPU driver, or with ``--driver host`` the
host's own, ``NVIDIA_VISIBLE_DEVICES=0``, the glibc image) and the same bind mounts and
device nodes are handed to docker itself (``--mount
type=bind,...,readonly,bind-propagation=private`` and ``--device``), with plain runc and no
nvct program anywhere in the start. Whatever injects a GPU this way (nvct, NVIDIA's
hook, a CDI spec) makes these mounts and nodes, so their cost over plain runc is a floor no
injector's code can go under. Interleaved per round, in a seeded random order:

- ``runc``: the baseline;
- ``the GPU's mounts`` / ``the GPU's device nodes`` / ``mounts and nodes``: docker's own flags;
- ``nvct, 1 GPU``: this checkout's ``nvct-runtime`` with its shim daemon, as ``bench.gpus_goal``
  runs the ``venv`` install (what nvct adds on top: the launcher's native create from the entry
  the daemon wrote for the first start, ``ld.so.cache`` and the ``ld.so.conf.d`` entry, the
  launcher's exec on the other runtime calls).

Printed and written (``--output``, default ``bench/results-mount-floor-<docker version>.json``):
per variant the median, and against runc the median of per-round ratios with its bootstrap
95 % interval and the median paired extra ms (``bench.stats``). ``--docker-kit`` runs docker
from a tarball ``bench.docker_kit`` packed (another docker than the host's); ``--budget-s``
ends the rounds, whole, once the run has taken that long (a lent machine's minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench import gpu_spec_edits, import_image, quantiles, server_version, timed
from bench.stats import paired

GPU = ["-e", "NVIDIA_VISIBLE_DEVICES=0"]


def docker_flags(
    edited: dict[str, Any], plain: dict[str, Any], dev_root: str
) -> dict[str, list[str]]:
    """docker's flags for the bind mounts and device nodes nvct's edits add to ``plain``:
    ``{"mounts": [...], "devices": [...]}``. A device's host node is under ``dev_root``."""
    before = {m["destination"] for m in plain.get("mounts", [])}
    mounts: list[str] = []
    for mount in edited.get("mounts", []):
        options = mount.get("options", [])
        if mount["destination"] in before or "bind" not in options:
            continue
        spec = f"type=bind,source={mount['source']},target={mount['destination']}"
        if "ro" in options:
            spec += ",readonly"
        if "private" in options:
            spec += ",bind-propagation=private"
        mounts += ["--mount", spec]
    known = {d["path"] for d in plain.get("linux", {}).get("devices", [])}
    devices: list[str] = []
    for device in edited.get("linux", {}).get("devices", []):
        if device["path"] in known:
            continue
        host = os.path.join(dev_root, device["path"].lstrip("/"))
        devices += ["--device", f"{host}:{device['path']}:rwm"]
    return {"mounts": mounts, "devices": devices}


def main() -> int:
    from bench.runc_only import add_inject_options, driver_config

    parser = argparse.ArgumentParser(prog="python -m bench.mount_floor")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--docker-kit", type=Path, help="docker packed by bench.docker_kit")
    parser.add_argument("--driver", choices=("sim", "host"), default="sim")
    parser.add_argument("--budget-s", type=float, help="end the rounds after this long")
    add_inject_options(parser, "library-mounts")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    from bench.gpus_goal import cannot_start, running_daemon, start_paths, venv_install
    from integration.harness.bundles import runc_spec
    from integration.harness.dockerd import Dockerd
    from integration.harness.images import GLIBC_TAG
    from nvct.config import load_config

    refused = cannot_start("bench.mount_floor", "dockerd, device nodes")
    if refused:
        print(refused, file=sys.stderr)
        return 1
    began, load = time.monotonic(), os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="nvct-bench-floor-"))
    if args.docker_kit:
        from bench.docker_kit import unpack

        os.environ["PATH"] = f"{unpack(args.docker_kit, work / 'docker')}:{os.environ['PATH']}"
    config, card = driver_config(args.driver, work / "nvct", args.library_mounts)
    dev_root = str(load_config(str(config)).dev_root)  # "/" for the host's driver
    os.environ["NVCT_CONFIG"] = str(config)  # dockerd -> nvct-runtime
    install = venv_install()
    dockerd = Dockerd({"runtimes": {"nvct": {"path": str(install.launcher)}}})
    dockerd.start()
    try:
        version = server_version(dockerd)
        rootfs = import_image(dockerd, "glibc", work / "rootfs")
        flags = docker_flags(gpu_spec_edits(config, rootfs), runc_spec(), dev_root)
        base = [dockerd.docker_cli, "-H", dockerd.host, "run", "--rm", "--network", "none"]
        variants = {
            "runc": [],
            "the GPU's mounts": flags["mounts"],
            "the GPU's device nodes": flags["devices"],
            "mounts and nodes": flags["mounts"] + flags["devices"],
            "nvct, 1 GPU": ["--runtime", "nvct", *GPU],
        }
        argvs = {name: [*base, *extra, GLIBC_TAG, "true"] for name, extra in variants.items()}
        env = dockerd.cli_env()
        samples: dict[str, list[float]] = {name: [] for name in argvs}
        with running_daemon(install, work / "shimd.log"):
            for argv in argvs.values():  # warm, and fail loudly: a failed start is fast
                for _ in range(2):
                    timed(argv, env)
                dockerd.docker(*argv[3:])  # raises with docker's error
            order = random.Random(args.seed)  # noqa: S311 - an order, not a secret
            until = began + (args.budget_s if args.budget_s is not None else float("inf"))
            rounds = 0
            while rounds < args.rounds and time.monotonic() < until:
                rounds += 1
                os.sync()
                for name in order.sample(list(argvs), len(argvs)):
                    samples[name].append(timed(argvs[name], env))
    finally:
        dockerd.stop()
    paths = start_paths(config.parent / "nvct.log", 0)
    # The rounds, the warm-up and the check: the first through the daemon (which writes the
    # native entry), every later one by the launcher's native create.
    native = paths.get("create:native", 0)
    if (
        set(paths) - {"create:daemon", "create:native"}
        or native + 1 < sum(paths.values())
        or (sum(paths.values()) != rounds + 3)
    ):
        raise SystemExit(f"bench.mount_floor: nvct's creates took other paths: {paths}")
    compared = {
        name: paired(s, samples["runc"], seed=args.seed)
        for name, s in samples.items()
        if name != "runc"
    }
    print(f"{card}; docker {version}, {rounds} rounds; mounts {len(flags['mounts']) // 2}, "
          f"device nodes {len(flags['devices']) // 2}")  # fmt: skip
    print(f"{'variant':<24} {'median':>8}  {'x runc':>6}  95% interval    extra ms")
    for name, s in samples.items():
        c = compared.get(name)
        tail = f"{c.median:6.3f}  [{c.low:.3f}, {c.high:.3f}]  {c.extra_ms:+7.2f}" if c else ""
        print(f"{name:<24} {quantiles(s)['median']:8.1f}  {tail}")
    output = args.output or Path(f"bench/results-mount-floor-docker-{version.split('+')[0]}.json")
    output.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "docker_version": version,
                "machine": {
                    "cpus": os.cpu_count(),
                    "kernel": os.uname().release,
                    "load_before_after": [round(load, 2), round(os.getloadavg()[0], 2)],
                    "driver": card,
                },
                "rounds": rounds,
                "budget_s": args.budget_s,
                "library_mounts": args.library_mounts or "directory (default)",
                "seed": args.seed,
                "flags": flags,
                "results": {name: quantiles(s) for name, s in samples.items()},
                "paired_vs_runc": {name: c.as_dict() for name, c in compared.items()},
                "samples": {name: [round(x, 2) for x in s] for name, s in samples.items()},
                "seconds": round(time.monotonic() - began),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written: {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
