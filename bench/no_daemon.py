"""Where a 1-GPU create's milliseconds go when no shim daemon answers: the Python shim's process.

As root from the repository root, after ``make venv``::

    .venv/bin/python -m bench.no_daemon [--rounds N] [--seed N] [--wheel] [--against DIR]
        [--output FILE]

Each variant is one process on a fresh overlay of the glibc image holding a 1-GPU bundle
(the simulated 4-GPU driver, the work order cached, the image's ``ld.so.cache`` merged,
``/bin/true`` as the low-level runtime the shim execs), timed for its wall time and its CPU
time (user + system, from ``wait4``: less disturbed than the wall time by other work on the
machine), interleaved round by round in a seeded random order:

- ``interpreter``: this venv's python, ``-I -S -c pass`` (the floor of any Python shim);
- ``+ os``: the same importing ``os`` (a bare ``-S`` start leaves it out; the shim needs it);
- ``+ nvct's imports``: the modules a cached create imports, nothing run;
- ``create``: the shim as ``make venv``'s launcher starts it when no daemon answers;
- ``create, GC on``: the same with the cyclic garbage collector left on (as before bb0f1ae);
- ``native create``: this checkout's native launcher (no daemon to ask) on the same bundle,
  the native entry written by its warm-up starts: the create done in C from that entry
  (``nvct/runtime/launch/native.h``), then the exec of the runtime;
- ``exec only``: ``/bin/true`` itself, the floor of any process the engine starts;
- with ``--wheel``, in a fresh venv holding ``pip wheel .``: ``create, wheel`` (its launcher's
  command, ``python3 -I -S -c`` with the venv's site-packages appended) and ``create, wheel
  -I -m`` (its command before a40276e: ``python3 -I -m nvct.runtime``, runpy and site);
- with ``--against DIR`` (another checkout of nvct, e.g. ``git archive main | tar -x -C DIR``):
  ``create, against`` and ``+ nvct's imports, against``, the same two with DIR's nvct on the
  path instead of this one's, interleaved with the others: a before/after of a change that
  two separate runs, minutes apart on a shared machine, cannot resolve.

Printed per variant: the medians; per step (os, nvct's imports, the create's work, the GC,
the wheel's command and its earlier one, this checkout against DIR) the paired median
difference of the two variants that differ by it. Written to ``--output`` (default
``bench/results-no-daemon.json``). ``python -X importtime`` and ``bench.trace_start`` give
the same split by module and by process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench import config_for, quantiles
from bench.runc_only import bundle, fresh_overlay
from nvct.base._site import nvct_home
from nvct.runtime.launch.build import build_native, default_command

CREATE = ["create", "--bundle"]
HOT_IMPORTS = "import os, nvct.runtime.__main__, nvct.runtime.args, nvct.runtime.lowlevel, "
HOT_IMPORTS += "nvct.runtime.create, nvct.base.log"


def timed(argv: list[str]) -> tuple[float, float]:
    """Run ``argv``; its wall and CPU milliseconds (the CPU of it and its exec'd runtime)."""
    began = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = (time.perf_counter() - began) * 1000
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:  # a failed create must not pass for a fast one: say why
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        raise SystemExit(f"bench.no_daemon: {shlex.join(argv)} failed:\n{done.stderr}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def wheel_commands(work: Path) -> dict[str, list[str]]:
    """The pip wheel's Python fallback, now and before, on a fresh venv holding it."""
    from bench.wheel import wheel_venv

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "packaging" / "backend"))
    # the wheel's build backend: the command its launcher is built with
    import nvct_build  # type: ignore[import-not-found]

    python = str(wheel_venv(work / "wheel") / "python3")
    return {
        "create, wheel": [python, *shlex.split(nvct_build.SHIM_COMMAND)[1:]],
        "create, wheel -I -m": [python, "-I", "-m", "nvct.runtime"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.no_daemon")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--wheel", action="store_true", help="also the pip wheel's commands")
    parser.add_argument("--against", type=Path, help="another nvct checkout to compare with")
    parser.add_argument("--output", type=Path, default=Path("bench/results-no-daemon.json"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench.no_daemon: needs root (overlay mounts)", file=sys.stderr)
        return 1
    from integration.harness.images import glibc_rootfs
    from integration.simdriver import cached_driver, preset

    began, load = time.monotonic(), os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="nvct-bench-nodaemon-"))
    sim = cached_driver(preset("h100x4-550"), Path("/tmp/nvct-test-simdrivers"))
    cfg = config_for(sim, work / "nvct", '[runtime]\nlow-level = ["/bin/true"]\n')
    image = glibc_rootfs(work / "image")
    spec = bundle(work / "b", ["NVIDIA_VISIBLE_DEVICES=0"], None, cfg)
    shim = shlex.split(default_command())
    gc_on = [*shim[:-1], "import gc; gc.disable = lambda: None; " + shim[-1]]
    python = sys.executable
    home = f"sys.path.insert(0, {nvct_home()!r})"  # as the shim's command puts it
    launcher = work / "nvct-runtime"
    build_native(launcher, default_command(), str(cfg), "")
    variants = {
        "exec only": ["/bin/true"],
        "native create": [str(launcher)],
        "interpreter": [python, "-I", "-S", "-c", "pass"],
        "+ os": [python, "-I", "-S", "-c", "import os"],
        "+ nvct's imports": [python, "-I", "-S", "-c", f"import sys; {home}; {HOT_IMPORTS}"],
        "create": shim,
        "create, GC on": gc_on,
    }
    if args.wheel:
        variants.update(wheel_commands(work))
    if args.against:
        other = str(args.against.resolve())
        variants["+ nvct's imports, against"] = [
            *variants["+ nvct's imports"][:-1],
            f"import sys; sys.path.insert(0, {other!r}); {HOT_IMPORTS}",
        ]
        code = shim[-1].replace(repr(nvct_home()), repr(other))
        assert code != shim[-1], "the shim's command names no nvct home to replace"
        variants["create, against"] = [*shim[:-1], code]
    config = ["--nvct-config", str(cfg)]
    argvs = {
        name: [*argv, *config, *CREATE, str(work / "b"), "c"] if "create" in name else argv
        for name, argv in variants.items()
    }
    samples: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in argvs}
    for argv in argvs.values():  # warm: the work order, the merged ld.so.cache, pyc files
        for _ in range(2):
            with fresh_overlay(image, work / "b", spec):
                timed(argv)
    order = random.Random(args.seed)  # noqa: S311 - an order, not a secret
    for _ in range(args.rounds):
        for name in order.sample(list(argvs), len(argvs)):
            with fresh_overlay(image, work / "b", spec):
                wall, cpu = timed(argvs[name])
            samples[name][0].append(wall)
            samples[name][1].append(cpu)
    # The native variant must have been the launcher's own create, not a hand-over to the shim.
    events = [json.loads(line) for line in (cfg.parent / "nvct.log").read_text().splitlines()]
    native = sum(e.get("via") == "native" for e in events if e["event"] == "container_prepared")
    if native != args.rounds + 1:  # the rounds, and the warm-up's second start
        raise SystemExit(f"bench.no_daemon: {native} native creates, not {args.rounds + 1}")
    # What each step adds: (variant, the variant it is paired with).
    pairs = {
        "the native create and runc's exec": ("native create", "exec only"),
        "the Python shim's create against the native one": ("create", "native create"),
        "os": ("+ os", "interpreter"),
        "nvct's imports": ("+ nvct's imports", "+ os"),
        "the create's work and runc's exec": ("create", "+ nvct's imports"),
        "GC on (before bb0f1ae)": ("create, GC on", "create"),
        "the wheel's command vs make venv's": ("create, wheel", "create"),
        "the wheel's -I -m (before a40276e)": ("create, wheel -I -m", "create, wheel"),
        "nvct's imports: this vs --against": ("+ nvct's imports", "+ nvct's imports, against"),
        "create: this vs --against": ("create", "create, against"),
    }
    steps = {
        step: {
            kind: round(statistics.median(x - y for x, y in zip(a, b, strict=True)), 2)
            for kind, a, b in (
                ("wall_ms", samples[name][0], samples[base][0]),
                ("cpu_ms", samples[name][1], samples[base][1]),
            )
        }
        for step, (name, base) in pairs.items()
        if name in samples and base in samples
    }
    print(f"{'variant':<22} {'wall':>8} {'cpu':>8}  (ms, medians)")
    for name, (walls, cpus) in samples.items():
        print(f"{name:<22} {statistics.median(walls):8.2f} {statistics.median(cpus):8.2f}")
    print("paired steps (median of per-round differences):")
    for step, ms in steps.items():
        print(f"  {step:<48} wall {ms['wall_ms']:+6.2f}  cpu {ms['cpu_ms']:+6.2f}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {
                "wall": {n: quantiles(s[0]) for n, s in samples.items()},
                "cpu": {n: quantiles(s[1]) for n, s in samples.items()},
                "paired_steps": steps,
                "rounds": args.rounds,
                "seed": args.seed,
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "machine": {
                    "cpus": os.cpu_count(),
                    "kernel": os.uname().release,
                    "load_before_after": [round(load, 2), round(os.getloadavg()[0], 2)],
                },
                "python": python,
                "against": str(args.against) if args.against else None,
                "seconds": round(time.monotonic() - began),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
