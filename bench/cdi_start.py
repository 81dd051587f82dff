"""What a CDI GPU start costs under podman, and how much of it is nvct's createContainer hook.

As root from the repository root, after ``make venv`` (podman and runc installed; a few
minutes)::

    .venv/bin/python -m bench.cdi_start [--rounds N] [--seed N] [--against DIR | --parts] \\
        [--output FILE]

``nvct-cli cdi generate`` (this checkout's venv; the spec names this venv's
``nvct-cdi-hook``) writes the simulated 4-GPU driver's spec into ``/var/run/cdi`` under a
name of its own, and copies of it under other kinds, one at a time: each start has its own
spec alone in the directory (podman reads every spec there on each run). In interleaved rounds
(podman with runc and private overlay storage, the glibc image, ``true``) it times, each paired
with plain ``podman run``:

- ``CDI, 1 GPU``: ``--device nvidia.com/gpu=0``, the spec as written: the device nodes, the
  driver's files mounted one by one, and the hook (the SONAME links and the ld.so.cache);
- ``CDI without the hook``: the same nodes and mounts, no hook; a variant's hook costs what
  it takes more than this (``hook ms``, the paired median), which is nvct's own code here;
- ``CDI, device nodes only``: what podman's CDI handling and the nodes cost alone;
- ``CDI, 1 GPU, one library directory`` (and the same without its hook, and with the
  Python hook in place of the installed one): the spec that ``cdi generate
  --library-mounts directory`` writes (the packages' refresh service does), whose libraries
  and their links come as one bind of a directory of hard links;
- with ``--against DIR`` (``git archive main | tar -x -C DIR``): the spec's hook run from
  this checkout and from ``DIR``, both as ``python -c`` on this venv's interpreter (with
  site, as the console script), in the same rounds.

``--parts`` runs instead the directory spec built up one part at a time, each variant the one
before it plus one part: a device whose only edit is an env variable (podman's CDI handling
alone), the device nodes, the two library directories, the hook on those, the other mounts
(no hook), the whole spec with ``/bin/true`` as its hook (runc starting a hook at all), the
whole spec, and the spec ``--driver-capabilities compute,utility`` writes; ``parts_ms`` in the
results holds each part's paired median.

After the rounds one more ``CDI, 1 GPU`` container lists its ``/etc/ld.so.cache`` and
``libcuda.so.1`` link (what the hook made), kept in the results file beside each start's
time, the ratios and the hooks' shares.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.bench import config_for, quantiles
from bench.stats import paired
from integration.harness.images import glibc_rootfs
from integration.harness.podman import RUN_FLAGS, TAG, private_podman, spec_in_cdi_dir
from integration.simdriver import cached_driver, preset

OUTPUT = Path("bench/results-cdi-start.json")
CLI = Path(".venv/bin/nvct-cli")
SPEC, NOHOOK, NODES = "CDI, 1 GPU", "CDI without the hook", "CDI, device nodes only"
THIS, AGAINST = "CDI, 1 GPU, this tree's hook", "CDI, 1 GPU, DIR's hook"
LIBDIR, LIBDIR_NOHOOK = "CDI, 1 GPU, one library directory", "one library directory, no hook"
LIBDIR_PY = "one library directory, Python hook"
# --parts: the packages' spec (one library directory) built up part by part, each variant the
# one before it plus one part; LIBDIR_NOHOOK and LIBDIR are its last two steps.
ENV_ONLY = "CDI, an env edit only"
PART_NODES = "directory spec: device nodes only"
PART_LIBDIRS = "directory spec: nodes, library directories"
PART_LIBDIRS_HOOK = "directory spec: nodes, library directories, hook"
PART_TRUE = "directory spec, /bin/true as its hook"
# The same spec generated with --driver-capabilities compute,utility (the hook its own).
COMPUTE = "directory spec, compute and utility only"
PARTS = (
    ENV_ONLY,
    PART_NODES,
    PART_LIBDIRS,
    PART_LIBDIRS_HOOK,
    LIBDIR_NOHOOK,
    PART_TRUE,
    LIBDIR,
    COMPUTE,
)
# The --parts variants the default run leaves out (it has the whole directory spec's two).
PARTS_ONLY = frozenset(PARTS) - {LIBDIR_NOHOOK, LIBDIR}
# What each part costs: a variant against the one without that part (paired medians).
STEPS = {
    "podman's CDI handling (an env edit)": (ENV_ONLY, "podman"),
    "device nodes": (PART_NODES, "podman"),
    "the two library directories": (PART_LIBDIRS, PART_NODES),
    "the hook, on nodes and library directories": (PART_LIBDIRS_HOOK, PART_LIBDIRS),
    "the other mounts (binaries, sockets, firmware, graphics)": (LIBDIR_NOHOOK, PART_LIBDIRS),
    "the hook, on the whole spec": (LIBDIR, LIBDIR_NOHOOK),
    "a hook that does nothing (/bin/true), on the whole spec": (PART_TRUE, LIBDIR_NOHOOK),
    "compute and utility only, against the whole spec": (COMPUTE, LIBDIR),
}
# The kind of each variant's spec: the written spec's own, or a copy's.
KINDS = {
    "podman": None,
    SPEC: "nvidia.com/gpu",
    NOHOOK: "nvct-bench.example.com/nohook",
    NODES: "nvct-bench.example.com/nodes",
    LIBDIR: "nvct-bench.example.com/libdir",
    LIBDIR_NOHOOK: "nvct-bench.example.com/libdir-nohook",
    LIBDIR_PY: "nvct-bench.example.com/libdir-python",
    THIS: "nvct-bench.example.com/this",
    AGAINST: "nvct-bench.example.com/against",
    ENV_ONLY: "nvct-bench.example.com/env-only",
    PART_NODES: "nvct-bench.example.com/part-nodes",
    PART_LIBDIRS: "nvct-bench.example.com/part-libdirs",
    PART_LIBDIRS_HOOK: "nvct-bench.example.com/part-libdirs-hook",
    PART_TRUE: "nvct-bench.example.com/part-true",
    COMPUTE: "nvct-bench.example.com/compute",
}


def copy_of(
    spec: dict[str, Any],
    kind: str,
    hook: list[str] | None,
    *,
    mounts: bool | Callable[[dict[str, Any]], bool] = True,
    nodes: bool = True,
) -> dict[str, Any]:
    """``spec`` under ``kind``, its hook run by the command ``hook`` (its arguments after
    the hook's own; no hook when empty; None: the spec's own), with its mounts, none, or those
    ``mounts`` keeps; without ``nodes`` no device node either, and each device an env edit
    instead (a CDI device needs one edit)."""
    copy: dict[str, Any] = json.loads(json.dumps(spec))
    copy["kind"] = kind
    edits = copy["containerEdits"]
    if hook is None:
        pass
    elif not hook:
        edits.pop("hooks", None)
    else:
        (entry,) = edits["hooks"]
        entry["path"], entry["args"] = hook[0], [*hook, *entry["args"][1:]]
    if mounts is False:
        edits.pop("mounts", None)
    elif mounts is not True:
        edits["mounts"] = [m for m in edits.get("mounts", []) if mounts(m)]
    if not nodes:
        edits.pop("deviceNodes", None)
        for device in copy["devices"]:
            device["containerEdits"] = {"env": [f"NVCT_BENCH_DEVICE={device['name']}"]}
    return copy


def library_directory(mount: dict[str, Any]) -> bool:
    """A mount of the directory spec's library directories (64- and 32-bit)."""
    return str(mount["containerPath"]).endswith("/nvidia-driver")


def mounts_of(spec: dict[str, Any]) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = spec["containerEdits"].get("mounts", [])
    return mounts


def tree_hook(tree: Path) -> list[str]:
    """nvct-cdi-hook of the checkout ``tree`` on this venv's interpreter, with site as the
    console script runs it."""
    code = f"import sys; sys.path.insert(0, {str(tree)!r}); from nvct.hook.cdi import main; "
    return [os.path.abspath(".venv/bin/python3"), "-c", code + "sys.exit(main())"]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cdi_start")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=6, help="seed of the per-round order")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="also the hook of another checkout (git archive main | tar -x -C DIR) beside this "
        "one's, both run the same way, in the same rounds",
    )
    parser.add_argument(
        "--parts",
        action="store_true",
        help="instead, the packages' spec built up part by part (podman's CDI handling, the "
        "nodes, the library directories, the other mounts, the hook): what each costs",
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench.cdi_start: needs root (podman, /var/run/cdi)", file=sys.stderr)
        return 1
    if not CLI.exists():
        print(f"bench.cdi_start: needs {CLI} (make venv)", file=sys.stderr)
        return 1
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="nvct-bench-cdi-"))
    sim = cached_driver(preset("h100x4-550"), Path("/tmp/nvct-test-simdrivers"))
    config = config_for(sim, work / "nvct")
    rootfs = glibc_rootfs(work / "rootfs")
    (work / "podman").mkdir()
    if args.parts:
        kinds = {n: k for n, k in KINDS.items() if n == "podman" or n in PARTS}
    else:
        kinds = {
            n: k
            for n, k in KINDS.items()
            if n not in PARTS_ONLY and (args.against or n not in (THIS, AGAINST))
        }
    with (
        private_podman(work / "podman", rootfs, "overlay") as podman,
        spec_in_cdi_dir(".json") as path,
    ):
        generate = [str(CLI), "--config", str(config), "cdi", "generate", "-o", str(path)]
        subprocess.run(generate, check=True, capture_output=True)
        spec = json.loads(path.read_text())
        libs = ["--library-mounts", "directory", "--library-dir", str(work / "cdi-libs")]
        subprocess.run([*generate, *libs], check=True, capture_output=True)
        libdir_spec = json.loads(path.read_text())
        if args.parts:
            compute = ["--driver-capabilities", "compute,utility"]
            subprocess.run([*generate, *libs, *compute], check=True, capture_output=True)
            compute_spec = json.loads(path.read_text())
        path.unlink()
        if not any(m["containerPath"].endswith("/nvidia-driver") for m in mounts_of(libdir_spec)):
            print("bench.cdi_start: no library directory could be made", file=sys.stderr)
            return 1
        texts = {
            SPEC: json.dumps(spec),
            NOHOOK: json.dumps(copy_of(spec, KINDS[NOHOOK] or "", [])),
            NODES: json.dumps(copy_of(spec, KINDS[NODES] or "", [], mounts=False)),
            LIBDIR: json.dumps(copy_of(libdir_spec, KINDS[LIBDIR] or "", None)),
            LIBDIR_NOHOOK: json.dumps(copy_of(libdir_spec, KINDS[LIBDIR_NOHOOK] or "", [])),
            LIBDIR_PY: json.dumps(
                copy_of(libdir_spec, KINDS[LIBDIR_PY] or "", tree_hook(Path.cwd()))
            ),
        }
        if args.parts:

            def part(name: str, hook: list[str] | None, **how: Any) -> str:
                return json.dumps(copy_of(libdir_spec, KINDS[name] or "", hook, **how))

            texts |= {
                ENV_ONLY: part(ENV_ONLY, [], mounts=False, nodes=False),
                PART_NODES: part(PART_NODES, [], mounts=False),
                PART_LIBDIRS: part(PART_LIBDIRS, [], mounts=library_directory),
                PART_LIBDIRS_HOOK: part(PART_LIBDIRS_HOOK, None, mounts=library_directory),
                PART_TRUE: part(PART_TRUE, [shutil.which("true") or "/bin/true"]),
                COMPUTE: json.dumps(copy_of(compute_spec, KINDS[COMPUTE] or "", None)),
            }
        if args.against:
            texts[THIS] = json.dumps(copy_of(spec, KINDS[THIS] or "", tree_hook(Path.cwd())))
            texts[AGAINST] = json.dumps(
                copy_of(spec, KINDS[AGAINST] or "", tree_hook(args.against))
            )
        run = [*podman, "run", "--rm", *RUN_FLAGS]
        argvs = {
            name: [*run, *(["--device", f"{kind}=0"] if kind else []), TAG, "true"]
            for name, kind in kinds.items()
        }

        def start(name: str) -> float:
            """One start of ``name``, its spec the only one in the CDI directory (podman
            reads every spec there on each run: copies beside it would cost each start)."""
            if name in texts:
                path.write_text(texts[name])
            try:
                began = time.perf_counter()
                subprocess.run(argvs[name], check=True, capture_output=True)
                return (time.perf_counter() - began) * 1000
            finally:
                path.unlink(missing_ok=True)

        for name in argvs:  # warm: the page cache, podman's storage
            for _ in range(2):
                start(name)
        samples: dict[str, list[float]] = {name: [] for name in argvs}
        order = random.Random(args.seed)  # noqa: S311 - an order, not a secret
        for _ in range(args.rounds):
            for name in order.sample(list(argvs), len(argvs)):
                samples[name].append(start(name))
        path.write_text(texts[SPEC])
        seen = subprocess.run(
            [*run, "--device", "nvidia.com/gpu=0", TAG, "sh", "-c",
             "ls -l /etc/ld.so.cache; readlink /usr/lib/x86_64-linux-gnu/libcuda.so.1"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
    base = samples["podman"]
    compared = {name: paired(s, base).as_dict() for name, s in samples.items() if name != "podman"}
    # What each hook adds: a start with it against one with the same spec and no hook.
    bare = {
        SPEC: NOHOOK,
        THIS: NOHOOK,
        AGAINST: NOHOOK,
        LIBDIR: LIBDIR_NOHOOK,
        LIBDIR_PY: LIBDIR_NOHOOK,
    }

    def paired_ms(variant: str, base: str) -> float:
        """The median of the per-round differences of ``variant`` over ``base``."""
        pairs = zip(samples[variant], samples[base], strict=True)
        return round(statistics.median(a - b for a, b in pairs), 2)

    shares = {name: paired_ms(name, bare[name]) for name in samples if name in bare}
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpus": os.cpu_count(),
        "load_after": list(os.getloadavg()),
        "driver": "simulated h100x4-550",
        "spec": {
            "mounts": len(spec["containerEdits"].get("mounts", [])),
            "mounts_with_one_library_directory": len(mounts_of(libdir_spec)),
            "hook_args": len(spec["containerEdits"]["hooks"][0]["args"]),
            "hook": spec["containerEdits"]["hooks"][0]["path"],
        },
        "rounds": args.rounds,
        "seed": args.seed,
        "results": {name: quantiles(s) for name, s in samples.items()},
        "paired_vs_podman": compared,
        "against": str(args.against or ""),
        "hook_share_ms": shares,
        "parts_ms": {
            step: paired_ms(v, w) for step, (v, w) in STEPS.items() if v in samples and w in samples
        },
        "container_saw": seen.strip().splitlines(),
        "seconds": round(time.monotonic() - began),
        "samples": {name: [round(x, 2) for x in s] for name, s in samples.items()},
    }
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"{'variant':48} {'median':>8}  x podman  95% interval       extra ms  hook ms")
    for name, s in samples.items():
        row = compared.get(name)
        tail = f"  {row['ratio']:.3f}  {row['ci95']}  {row['extra_ms']:+.1f}" if row else ""
        hook = f"  {shares[name]:+.1f}" if name in shares else ""
        print(f"{name:48} {statistics.median(s):8.1f}{tail}{hook}")
    print("hook ms: paired median over the same spec without its hook")
    parts = results["parts_ms"]
    assert isinstance(parts, dict)
    for step, ms in parts.items():
        print(f"part: {step:58} {ms:+.1f} ms")
    print(f"spec: {results['spec']}; written: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
