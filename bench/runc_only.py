"""Container start time without docker: ``runc run`` of a fresh overlay, nvct's paths vs runc.

For machines with runc but no docker (the GPU machine) and for a quick look here: as root from
the repository root, after ``make venv`` (a C compiler builds the native programs)::

    .venv/bin/python -m bench.runc_only [--rounds N] [--seed N] [--driver sim|host]
        [--programs DIR] [--busybox PATH] [--output FILE]

Where there is no C compiler, ``--build-programs DIR`` here (same source tree) builds the four
native programs into DIR, and ``--programs DIR`` there uses them: their daemon socket is then
the fixed ``PROGRAMS_SOCKET``, and the config reaches them through ``NVCT_CONFIG``.

Each round runs every variant once, in a fresh seeded random order, each on a fresh overlay
of a glibc image (static busybox with the host's glibc and its ``ld.so.cache``), as docker's
overlay2 gives it, ``/bin/true`` as the process:

- ``runc``: plain runc, no GPU;
- ``nvct-runtime, 1 GPU``: the native launcher with the shim daemon running (a daemon worker
  prepares the first bundle of a kind, the launcher's native create every later one);
- ``nvct-runtime, 1 GPU, no daemon``: the same launcher starting the Python shim;
- ``prestart hook, daemon``: plain runc with nvct's prestart hook and the daemon running
  (``docker --gpus`` and podman's hooks.d: a daemon worker does the first container of a kind,
  the native hook itself every later one);
- ``prestart hook, Python``: the same hook with no daemon to ask (the Python hook runs);
- ``nvct-runtime, no GPU``: the launcher passing a container that asks for nothing to runc.

``--driver sim`` (default) uses a simulated 4-GPU driver; ``--driver host`` the host's own
driver (``nvidia-smi -L``'s first GPU is recorded). ``--driver-fs tmpfs`` builds the simulated
driver on a tmpfs of its own, another filesystem than nvct's cache dir (as a read-only driver
mount, the GPU operator's driver container or GKE keep it: no hard links), and compares, with
the daemon, a 1-GPU start under ``inject.library-mounts = "directory"`` (which then mounts each
library on its own) and ``"directory-copies"`` (one directory of copies), paired per round
(``bench.stats.paired``). ``--compare-no-gpu-hook`` times the prestart hook on a container
that asks for no GPU (ending in the native hook) against the same hook on a ``void`` request
(the whole path, through the daemon's worker or the Python hook), with and without a daemon.
``--python-hook-against DIR`` times the Python hook (no daemon), 1 GPU and ``void``, of this
checkout against another's (DIR), interleaved. Per variant: the median, and the median
of per-round differences and ratios against runc. No targets: a bare ``runc run`` of
``/bin/true`` is a fraction of a ``docker run``, so these ratios are not the README's (they
show the milliseconds each path adds). Everything goes to ``--output`` (default
``bench/results-runc-only.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.bench import config_for, entries_aside, native_entries, quantiles
from integration.harness.bundles import runc_spec
from integration.harness.images import BUSYBOX, glibc_rootfs
from integration.harness.shimd import ShimDaemon
from nvct.runtime.launch.build import build_native, default_command, hook_command

# The four native programs, by file name: (a hook, daemon to ask or not).
PROGRAMS = {
    "nvct-runtime": (False, True),
    "nvct-runtime-alone": (False, False),
    "hook": (True, True),
    "hook-alone": (True, False),
}
# The socket of programs built ahead (--build-programs) for a machine without a compiler.
PROGRAMS_SOCKET = Path("/tmp/nvct-bench-runc-only.sock")


def build_programs(directory: Path, config: str, sock: Path) -> None:
    """The launcher and the hook, each asking the daemon on ``sock`` or no daemon."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, (hook, served) in PROGRAMS.items():
        command = hook_command() if hook else default_command()
        build_native(directory / name, command, config, str(sock) if served else "", hook=hook)


def host_config(directory: Path, extra: str = "") -> Path:
    """nvct's config for the host's own driver (default roots), cache and log in ``directory``,
    then ``extra`` (TOML tables)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.toml"
    path.write_text(
        f'cache-dir = "{directory / "cache"}"\n[log]\nfile = "{directory / "nvct.log"}"\n{extra}'
    )
    return path


def add_inject_options(parser: argparse.ArgumentParser, *keys: str) -> None:
    """``--library-mounts``, ``--binaries`` (those of ``keys``): nvct's ``inject.<key>`` for
    the bench's config, its choices and default nvct's own."""
    from nvct.config.container import BINARIES, LIBRARY_MOUNTS, Inject

    choices = {"library-mounts": LIBRARY_MOUNTS, "binaries": BINARIES}
    for key in keys:
        default = getattr(Inject(), key.replace("-", "_"))
        parser.add_argument(
            f"--{key}",
            choices=choices[key],
            default="",
            help=f"nvct's inject.{key} (default: the config's default, {default})",
        )


def inject_toml(library_mounts: str = "", binaries: str = "") -> str:
    """The config table that sets ``inject.library-mounts`` and ``inject.binaries`` (each "":
    the default; both: no table)."""
    pairs = (("library-mounts", library_mounts), ("binaries", binaries))
    keys = [f'{k} = "{v}"\n' for k, v in pairs if v]
    return "".join(["[inject]\n", *keys]) if keys else ""


def driver_config(
    driver: str, directory: Path, library_mounts: str = "", binaries: str = ""
) -> tuple[Path, str]:
    """nvct's config in ``directory`` for the simulated 4-GPU driver (``sim``) or the host's
    own (``host``), with ``inject.library-mounts`` and ``inject.binaries`` where given, and
    the card the run stands for (the host's first GPU, as nvidia-smi names it)."""
    extra = inject_toml(library_mounts, binaries)
    if driver == "sim":
        from integration.simdriver import cached_driver, preset

        sim = cached_driver(preset("h100x4-550"), Path("/tmp/nvct-test-simdrivers"))
        return config_for(sim, directory, extra), "simulated h100x4-550"
    smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    card = (smi.stdout.splitlines() or ["nvidia-smi -L: nothing"])[0]
    return host_config(directory, extra), card


LINKS = "nvct-runtime, 1 GPU, binaries as links"
MOUNTS = "nvct-runtime, 1 GPU, binaries as mounts"
HOOK_LINKS = "prestart hook, daemon, binaries as links"
HOOK_MOUNTS = "prestart hook, daemon, binaries as mounts"
FILES = "nvct-runtime, 1 GPU, driver elsewhere, one mount per library"
COPIES = "nvct-runtime, 1 GPU, driver elsewhere, directory-copies"


def vs_runc(samples: dict[str, list[float]], *names: str) -> dict[str, object]:
    """``<name>_vs_runc``: each of ``names`` against plain runc, paired per round."""
    from bench.stats import paired

    return {f"{name}_vs_runc": paired(samples[name], samples["runc"]).as_dict() for name in names}


NO_GPU_HOOK = "prestart hook, no GPU, daemon"
VOID_HOOK = "prestart hook, void, daemon"
NO_GPU_HOOK_ALONE = "prestart hook, no GPU, no daemon"
VOID_HOOK_ALONE = "prestart hook, void, Python"


def no_gpu_hook_comparison(samples: dict[str, list[float]]) -> dict[str, object]:
    """A container that asks for no GPU, ending in the native hook, against the path it took
    before (the same hook on a ``void`` request: the daemon's worker, or the Python hook),
    and each against runc without a hook (paired per round)."""
    from bench.stats import paired

    return {
        "daemon_ends_in_hook_vs_worker": paired(samples[NO_GPU_HOOK], samples[VOID_HOOK]).as_dict(),
        "alone_ends_in_hook_vs_python": paired(
            samples[NO_GPU_HOOK_ALONE], samples[VOID_HOOK_ALONE]
        ).as_dict(),
        **vs_runc(samples, NO_GPU_HOOK, VOID_HOOK, NO_GPU_HOOK_ALONE, VOID_HOOK_ALONE),
    }


PY_GPU = "prestart hook, Python, 1 GPU"
PY_GPU_AGAINST = "prestart hook, Python, 1 GPU, against"
PY_VOID = "prestart hook, Python, void"
PY_VOID_AGAINST = "prestart hook, Python, void, against"

# Variants named for the Python shim, the Python hook or a daemon worker: each of their starts
# finds no native entry (moved aside around it, untimed), or the launcher's native create or
# the native hook would take every start after the first.
FIRST_OF_KIND = frozenset(
    {
        "nvct-runtime, 1 GPU, no daemon",
        "prestart hook, Python",
        VOID_HOOK,
        VOID_HOOK_ALONE,
        PY_GPU,
        PY_VOID,
    }
)


def python_hook(output: Path, tree: Path, config: Path) -> Path:
    """A native hook with no daemon to ask whose Python hook is ``tree``'s nvct: this
    checkout's own hook command (``hook_command``) with ``tree`` as its nvct home."""
    from nvct.base._site import nvct_home

    *python, code = shlex.split(hook_command())
    other = code.replace(repr(nvct_home()), repr(str(tree.resolve())))
    if other == code:
        raise SystemExit("bench.runc_only: the hook's command names no nvct home to replace")
    build_native(output, shlex.join([*python, other]), str(config), "", hook=True, native=False)
    return output


def python_hook_comparison(samples: dict[str, list[float]], tree: Path) -> dict[str, object]:
    """This checkout's Python hook against ``tree``'s (paired per round), 1 GPU and void."""
    from bench.stats import paired

    return {
        "against": str(tree),
        "gpu_this_vs_against": paired(samples[PY_GPU], samples[PY_GPU_AGAINST]).as_dict(),
        "void_this_vs_against": paired(samples[PY_VOID], samples[PY_VOID_AGAINST]).as_dict(),
        **vs_runc(samples, PY_GPU, PY_GPU_AGAINST, PY_VOID, PY_VOID_AGAINST),
    }


@contextlib.contextmanager
def other_fs_driver(where: Path) -> Iterator[Any]:
    """The simulated 4-GPU driver built on a tmpfs mounted at ``where`` (unmounted after)."""
    from integration.harness.tmpfs import mounted_tmpfs
    from integration.simdriver import cached_driver, preset

    with mounted_tmpfs(where, size="64m"):
        yield cached_driver(preset("h100x4-550"), where)


def libdir_comparison(
    samples: dict[str, list[float]], files_log: Path, copies_log: Path
) -> dict[str, object]:
    """Copies against one mount per library, and each against runc (paired per round), with
    the mounts each start had (their create's log)."""
    from bench.stats import paired

    def mounts(log: Path) -> list[int]:
        events = [json.loads(line) for line in log.read_text().splitlines()]
        return sorted({e["mounts"] for e in events if e.get("event") == "container_prepared"})

    return {
        "copies_vs_files": paired(samples[COPIES], samples[FILES]).as_dict(),
        **vs_runc(samples, FILES, COPIES),
        "mounts": {"files": mounts(files_log), "copies": mounts(copies_log)},
    }


def binaries_comparison(
    samples: dict[str, list[float]], links_log: Path, mounts_log: Path
) -> dict[str, object]:
    """``inject.binaries`` "links" against "mounts", through nvct-runtime and through the
    --gpus hook (paired per round), with the mounts each start had (from its log line)."""
    from bench.stats import paired

    def mounts(log: Path) -> dict[str, object]:
        """The mounts each kind of start had, and the median of each phase nvct logged."""
        events = [json.loads(line) for line in log.read_text().splitlines()]
        out: dict[str, object] = {}
        for kind in ("container_prepared", "container_configured"):
            mine = [e for e in events if e.get("event") == kind]
            # A native create or hook logs its total and no phases (it has none to name).
            phased = [e for e in mine if "phases_ms" in e]
            phases = {p for e in phased for p in e["phases_ms"]}
            out[kind] = sorted({e["mounts"] for e in mine})
            out[f"{kind}_via"] = dict(Counter(str(e.get("via")) for e in mine))
            out[f"{kind}_phases_ms"] = {
                p: round(statistics.median(e["phases_ms"].get(p, 0.0) for e in phased), 2)
                for p in sorted(phases)
            }
            totals = [e["total_ms"] for e in mine if "total_ms" in e]
            if totals:
                out[f"{kind}_total_ms"] = round(statistics.median(totals), 2)
        return out

    return {
        "runtime_links_vs_mounts": paired(samples[LINKS], samples[MOUNTS]).as_dict(),
        "hook_links_vs_mounts": paired(samples[HOOK_LINKS], samples[HOOK_MOUNTS]).as_dict(),
        **vs_runc(samples, LINKS, MOUNTS, HOOK_LINKS, HOOK_MOUNTS),
        "mounts": {"links": mounts(links_log), "mounts": mounts(mounts_log)},
    }


def bundle(where: Path, env: list[str], hook: Path | None, config: Path) -> str:
    """A bundle's config.json text: runc's spec running ``/bin/true`` on ``where/merged``,
    with ``env`` and, given ``hook``, nvct's prestart hook as docker --gpus writes it."""
    spec = runc_spec()
    spec["process"].update(args=["/bin/true"], terminal=False)
    spec["process"]["env"] += env
    spec["root"] = {"path": str(where / "merged"), "readonly": False}
    if hook is not None:
        spec["hooks"] = {
            "prestart": [
                {
                    "path": str(hook),
                    "args": ["nvidia-container-runtime-hook", "prestart"],
                    "env": [f"NVCT_CONFIG={config}"],
                }
            ]
        }
    return json.dumps(spec)


@contextlib.contextmanager
def fresh_overlay(image: Path, where: Path, spec: str) -> Iterator[Path]:
    """A fresh overlay of ``image`` on ``where``/merged, as docker's overlay2 gives a
    container, and the bundle's config.json ``spec`` in ``where``; removed afterwards."""
    for sub in ("upper", "work", "merged"):
        (where / sub).mkdir(parents=True, exist_ok=True)
    (where / "config.json").write_text(spec)
    options = f"lowerdir={image},upperdir={where / 'upper'},workdir={where / 'work'}"
    mount = ["mount", "-t", "overlay", "overlay", "-o", options, str(where / "merged")]
    subprocess.run(mount, check=True)
    try:
        yield where / "merged"
    finally:
        subprocess.run(["umount", str(where / "merged")], check=True)
        for sub in ("upper", "work"):
            shutil.rmtree(where / sub)


def start(
    image: Path,
    where: Path,
    spec: str,
    argv: list[str],
    env: dict[str, str] | None = None,
    entries: Path | None = None,
) -> float:
    """Mount a fresh overlay of ``image``, write the bundle, time ``argv``, clean up; with
    ``entries``, nvct's native entries moved aside around it."""
    with fresh_overlay(image, where, spec), entries_aside(entries):
        began = time.perf_counter()
        done = subprocess.run(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False
        )
        took = (time.perf_counter() - began) * 1000
        if done.returncode != 0:  # a start that failed fast must not pass for a fast start
            raise SystemExit(f"bench.runc_only: {' '.join(argv)} failed:\n{done.stderr.decode()}")
        return took


OUTPUT = Path("bench/results-runc-only.json")
# Each comparison's name in the results, and its results file unless --output says otherwise.
COMPARED_OUTPUT = {
    "library_mounts": "bench/results-libcopies.json",
    "binaries": "bench/results-binaries.json",
    "no_gpu_hook": "bench/results-hook-no-gpu.json",
    "python_hook": "bench/results-python-hook.json",
}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.runc_only")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--seed", type=int, default=6, help="seed of the per-round order")
    parser.add_argument("--driver", choices=("sim", "host"), default="sim")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--programs", type=Path, help="the native programs, built ahead")
    parser.add_argument(
        "--busybox", type=Path, default=BUSYBOX, help="the static busybox the image is made of"
    )
    parser.add_argument("--build-programs", type=Path, help="build them into DIR, and stop")
    parser.add_argument(
        "--driver-fs",
        choices=("same", "tmpfs"),
        default="same",
        help="tmpfs: the simulated driver on another filesystem; files vs copies (1 GPU)",
    )
    parser.add_argument(
        "--compare-copies",
        action="store_true",
        help="files vs copies (1 GPU) on the driver as it lies (--driver host on a machine "
        "whose driver is on another filesystem than the cache dir)",
    )
    add_inject_options(parser, "library-mounts")
    parser.add_argument(
        "--compare-binaries",
        action="store_true",
        help='inject.binaries "links" vs "mounts" (1 GPU, nvct-runtime and the --gpus hook, '
        "both through the daemon)",
    )
    parser.add_argument(
        "--compare-no-gpu-hook",
        action="store_true",
        help="the prestart hook on a container that asks for no GPU (podman's hooks.d runs it "
        "for every one): ending in the native hook, against the whole path such a container "
        "took before (NVIDIA_VISIBLE_DEVICES=void: the daemon's worker, or the Python hook)",
    )
    parser.add_argument(
        "--python-hook-against",
        type=Path,
        metavar="DIR",
        help="the Python hook (no daemon), 1 GPU and void, of this checkout against another "
        "(DIR: e.g. git archive main | tar -x -C DIR), interleaved",
    )
    args = parser.parse_args()
    chosen = [
        name
        for name, on in (
            ("library_mounts", args.driver_fs == "tmpfs" or args.compare_copies),
            ("binaries", args.compare_binaries),
            ("no_gpu_hook", args.compare_no_gpu_hook),
            ("python_hook", args.python_hook_against is not None),
        )
        if on
    ]
    if len(chosen) > 1:
        parser.error(f"one comparison at a time, not {' and '.join(chosen)}")
    compared_as = chosen[0] if chosen else "library_mounts"
    if chosen and chosen[0] != "no_gpu_hook" and args.programs:
        parser.error(f"comparing {chosen[0]} builds its own programs: no --programs")
    if chosen == ["library_mounts"]:
        if args.library_mounts:
            parser.error("comparing files and copies sets inject.library-mounts itself")
        if args.driver_fs == "tmpfs" and args.driver != "sim":
            parser.error("--driver-fs tmpfs takes the simulated driver")
    if chosen and args.output == OUTPUT:
        args.output = Path(COMPARED_OUTPUT[chosen[0]])
    if args.build_programs:
        build_programs(args.build_programs, "/etc/nvct/config.toml", PROGRAMS_SOCKET)
        return 0
    if os.geteuid() != 0:
        print("bench.runc_only: needs root (runc, overlay mounts)", file=sys.stderr)
        return 1
    tools = ["runc"] if args.programs else ["runc", os.environ.get("CC", "cc")]
    for tool in tools:
        if shutil.which(tool) is None:
            print(f"bench.runc_only: needs {tool} on PATH", file=sys.stderr)
            return 1
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="nvct-bench-runc-"))
    driver_fs = None
    if args.driver_fs == "tmpfs":
        driver_fs = contextlib.ExitStack()
        sim = driver_fs.enter_context(other_fs_driver(work / "driverfs"))
        cfg, card = config_for(sim, work / "nvct"), "simulated h100x4-550 on a tmpfs"
        copies = config_for(sim, work / "copies", inject_toml("directory-copies"))
    elif args.compare_copies:  # the driver as it lies: nothing to mount or unmount
        driver_fs = contextlib.ExitStack()
        cfg, card = driver_config(args.driver, work / "nvct")
        copies, _ = driver_config(args.driver, work / "copies", "directory-copies")
    else:
        cfg, card = driver_config(args.driver, work / "nvct", args.library_mounts)
    if args.compare_binaries:
        mounted, _ = driver_config(args.driver, work / "mounts", args.library_mounts, "mounts")
    os.environ["NVCT_CONFIG"] = str(cfg)  # the launchers' (the hooks': their OCI entry's env)
    if args.programs:
        programs, sock = args.programs, PROGRAMS_SOCKET
    else:
        programs, sock = work / "bin", work / "shim.sock"
        build_programs(programs, str(cfg), sock)
    served, alone = programs / "nvct-runtime", programs / "nvct-runtime-alone"
    hook, hook_alone = programs / "hook", programs / "hook-alone"
    image = glibc_rootfs(work / "image", busybox=args.busybox)
    state = work / "runc-state"
    gpu = ["NVIDIA_VISIBLE_DEVICES=0"]
    variants = {
        "runc": ("runc", [], None),
        "nvct-runtime, 1 GPU": (str(served), gpu, None),
        "nvct-runtime, 1 GPU, no daemon": (str(alone), gpu, None),
        "prestart hook, daemon": ("runc", gpu, hook),
        "prestart hook, Python": ("runc", gpu, hook_alone),
        "nvct-runtime, no GPU": (str(served), [], None),
    }
    envs: dict[str, dict[str, str]] = {}
    if driver_fs is not None:  # one mount per library, or one directory of copies
        variants = {
            "runc": ("runc", [], None),
            FILES: (str(served), gpu, None),
            COPIES: (str(served), gpu, None),
        }
        envs[COPIES] = {**os.environ, "NVCT_CONFIG": str(copies)}
    if args.compare_binaries:
        variants = {
            "runc": ("runc", [], None),
            LINKS: (str(served), gpu, None),
            MOUNTS: (str(served), gpu, None),
            HOOK_LINKS: ("runc", gpu, hook),
            HOOK_MOUNTS: ("runc", gpu, hook),
        }
        envs[MOUNTS] = {**os.environ, "NVCT_CONFIG": str(mounted)}
    if args.compare_no_gpu_hook:
        void = ["NVIDIA_VISIBLE_DEVICES=void"]
        variants = {
            "runc": ("runc", [], None),
            NO_GPU_HOOK: ("runc", [], hook),
            VOID_HOOK: ("runc", void, hook),
            NO_GPU_HOOK_ALONE: ("runc", [], hook_alone),
            VOID_HOOK_ALONE: ("runc", void, hook_alone),
        }
    if args.python_hook_against:
        void = ["NVIDIA_VISIBLE_DEVICES=void"]
        against = python_hook(programs / "hook-against", args.python_hook_against, cfg)
        variants = {
            "runc": ("runc", [], None),
            PY_GPU: ("runc", gpu, hook_alone),
            PY_GPU_AGAINST: ("runc", gpu, against),
            PY_VOID: ("runc", void, hook_alone),
            PY_VOID_AGAINST: ("runc", void, against),
        }
    shimd = ShimDaemon(
        [sys.executable, "-m", "nvct.runtime.launch.daemon"], sock, work / "shimd.log"
    ).start()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    try:
        configs = {HOOK_MOUNTS: mounted} if args.compare_binaries else {}
        specs = {
            n: bundle(work / "b", env, h, configs.get(n, cfg))
            for n, (_, env, h) in variants.items()
        }

        def argv(name: str, n: int) -> list[str]:
            runtime = variants[name][0]
            return [runtime, "--root", str(state), "run", "--bundle", str(work / "b"), f"b{n}"]

        def timed(name: str, n: int) -> float:
            aside = native_entries(configs.get(name, cfg)) if name in FIRST_OF_KIND else None
            return start(image, work / "b", specs[name], argv(name, n), envs.get(name), aside)

        for name in variants:  # warm: the inventory, the work orders, the page cache
            for n in range(2):
                timed(name, n)
        order = random.Random(args.seed)  # noqa: S311 - an order, not a secret
        for r in range(args.rounds):
            for name in order.sample(list(variants), len(variants)):
                samples[name].append(timed(name, r))
    finally:
        shimd.stop()
        if driver_fs is not None:
            driver_fs.close()

    results = {name: quantiles(s) for name, s in samples.items()}
    runc = samples["runc"]
    ratios = {
        name: round(statistics.median(a / b for a, b in zip(s, runc, strict=True)), 4)
        for name, s in samples.items()
        if name != "runc"
    }
    extra_ms = {
        name: round(statistics.median(a - b for a, b in zip(s, runc, strict=True)), 2)
        for name, s in samples.items()
        if name != "runc"
    }
    compared = {}
    if driver_fs is not None:
        compared = libdir_comparison(samples, cfg.parent / "nvct.log", copies.parent / "nvct.log")
        print(json.dumps(compared, indent=2))
    if args.compare_binaries:
        compared = binaries_comparison(
            samples, cfg.parent / "nvct.log", mounted.parent / "nvct.log"
        )
        print(json.dumps(compared, indent=2))
    if args.compare_no_gpu_hook:
        compared = no_gpu_hook_comparison(samples)
        print(json.dumps(compared, indent=2))
    if args.python_hook_against:
        compared = python_hook_comparison(samples, args.python_hook_against)
        print(json.dumps(compared, indent=2))
    paths = {"native": 0, "daemon": 0, "hook": 0}
    logs = [
        cfg.parent / "nvct.log",
        *([mounted.parent / "nvct.log"] if args.compare_binaries else []),
    ]
    for line in (line for log in logs if log.exists() for line in log.read_text().splitlines()):
        event = json.loads(line)
        if event.get("event") == "container_configured":
            paths[event.get("via", "hook")] += 1
    runc_version = subprocess.run(
        ["runc", "--version"], capture_output=True, text=True, check=False
    ).stdout
    width = max(34, *map(len, results))
    head = f"{'median':>8} {'p10':>8} {'p90':>8} {'n':>4}  (ms)  paired: ms, x"
    print(f"{'measurement':<{width}} {head}")
    for name, q in results.items():
        ratio = f"{extra_ms[name]:+7.2f} {ratios[name]:.3f}" if name in ratios else ""
        print(
            f"{name:<{width}} {q['median']:>8.2f} {q['p10']:>8.2f} {q['p90']:>8.2f} "
            f"{q['n']:>4}  {ratio}"
        )
    print(
        f"prestart hooks' work: native {paths['native']}, daemon worker {paths['daemon']}, "
        f"Python hook {paths['hook']}"
    )
    elapsed = time.monotonic() - began
    print(f"driver: {card}; {elapsed:.0f} s")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {
                "results": results,
                "paired_ratios": ratios,
                "paired_extra_ms": extra_ms,
                "hook_paths": paths,
                **({compared_as: compared} if compared else {}),
                "rounds": args.rounds,
                "seed": args.seed,
                "driver": card,
                "runc": runc_version.splitlines()[0] if runc_version else "",
                "date": time.strftime("%Y-%m-%d"),
                "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
                "python": sys.executable,
                "seconds": round(elapsed),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written: {args.output}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
