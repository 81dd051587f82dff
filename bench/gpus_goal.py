"""Are the start-time goals met? Every install path, both hook paths, with a verdict each.

As root from the repository root, after ``make venv`` (a C compiler, docker, dpkg-buildpackage)::

    .venv/bin/python -m bench.gpus_goal [--install-path all|packages|wheel|venv ...]
        [--rounds N] [--seed N] [--storage-driver overlay2|vfs] [--image glibc|busybox]
        [--nice N] [--cpus LIST] [--no-sync] [--podman] [--goals-only] [--driver sim|host]
        [--docker-kit FILE] [--budget-s S] [--library-mounts MODE] [--output FILE]

One private dockerd (the simulated 4-GPU driver, nvct's config through ``NVCT_CONFIG`` in
dockerd's environment) serves one phase per install path, in turn:

- ``packages``: the .deb built from this tree (``make -C packaging deb``) installed with
  ``dpkg -i`` and purged afterwards (``integration.harness.packages.install_debs`` under its
  host-wide lock, as the packaging tests do): ``/usr/bin/nvct-runtime``,
  ``/usr/bin/nvidia-container-runtime-hook`` and the packaged daemon
  (``/usr/libexec/nvct/nvct-runtime-daemon``, as its systemd unit runs it) on the system's python3;
- ``wheel``: ``pip wheel .`` installed into a fresh venv (as ``bench.wheel``);
- ``venv``: this checkout's ``make venv``.

Each phase's daemon listens where that install's programs look (``/run/nvct/shim.sock``);
dockerd finds ``--gpus``'s ``nvidia-container-runtime-hook`` through a link on its PATH that
points at the phase's hook. Each round runs, in a fresh seeded random order and back to back,
``docker run --rm --network none IMAGE true`` as:

- ``runc`` (the baseline) and ``runc, another runtime name`` (the control: the same runc
  registered as a runtime of its own, as nvct is: what a runtime name costs, and how far
  two identical variants read apart);
- ``no GPU``, ``1 GPU``: through the install's ``nvct-runtime``, the launcher's native create
  (the entry written by the warm-up's first create of the kind);
- ``1 GPU, no daemon``: the same, the daemon's socket moved aside;
- ``1 GPU, first of its kind[, no daemon]`` (full runs): the native entries moved aside around
  each start, so that the daemon (or the Python shim) prepares it, as the first of a kind;
- ``--gpus device=0``: plain runc with the install's native hook, which does a kind of
  container done before itself (``nativehook.h``);
- ``--gpus device=0, first of its kind`` (full runs): the entries moved aside: its work in a
  daemon worker; ``--gpus device=0, Python hook``: the same, finding no daemon either;
- ``Python floor (only execs runc)``: a native launcher like the install's, no daemon to
  ask, whose "shim" is ``/usr/bin/python3 -I -S`` exec'ing runc: the least any start through a
  Python shim costs (the no-daemon path's floor; it does none of a GPU's work).
- with ``--podman``, podman's hooks.d path (``podman`` with runc, private storage on the
  same kind as dockerd's: ``overlay`` beside overlay2, podman's own default; each
  compared with ``podman`` given an empty hooks directory): ``podman hooks.d, 1 GPU`` (a
  hooks directory whose entry is the packages' ``oci-nvct-hook.json`` naming the install's
  hook, the native hook's own work), ``podman hooks.d, 1 GPU, Python hook`` (no entry, no
  daemon), ``podman
  hooks.d, no GPU`` (the entry runs the hook for every container: one that asks for nothing
  ends in the native hook) and ``podman hooks.d, void`` (``NVIDIA_VISIBLE_DEVICES=void``: the
  whole path through a daemon worker that every container asking for nothing took before),
  and ``podman CDI, 1 GPU`` (``--device nvidia.com/gpu=0``: the spec the install's
  ``nvct-cli cdi generate --library-mounts directory`` writes, as the packages' refresh
  service does, alone in ``/var/run/cdi`` for the phase, whose createContainer hook is the
  install's ``nvct-cdi-hook``).

nvct's log says which path each start took (``via``: native, a daemon worker, the shim, the
Python hook); a phase whose starts did not all take their variant's path fails the run. Per variant:
the median of per-round ratios to runc, its bootstrap 95 % interval (``bench.stats``) and, for
the goals (1 GPU <= 1.05, 1 GPU without the daemon <= 1.08, ``--gpus`` <= 1.05, no GPU <=
1.025, podman's hooks.d <= 1.05 x podman, and <= 1.025 for a container that asks for no GPU
there, podman's CDI <= 1.05 x podman), *met*, *not met* or *undecided* (the interval
straddles the goal).

Pinning: ``--nice N`` (default -5) and ``--cpus LIST`` apply to this process before anything
starts, so dockerd, containerd, the shims, runc, nvct's daemon and the docker CLI inherit them;
``--no-sync`` skips the ``sync`` before each round (the previous round's writeback kept out of
the measured starts). ``--goals-only`` runs only the variants with a goal and their baselines
(runc, the control, podman): about 30 % more rounds in the same time, for narrower intervals.
``--driver host`` runs on the host's own driver instead of the simulated one (the GPU machine);
``--docker-kit FILE`` runs docker from a tarball ``bench.docker_kit`` packed (a machine without
docker); ``--budget-s S`` ends the rounds early, whole, so that the run fits a lent machine's
time (each result records the rounds it ran). Results: ``--output`` (default
``bench/results-goal-<host>.json``), with every start's time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.bench import (
    entries_aside,
    import_image,
    native_entries,
    quantiles,
    server_version,
    timed,
)
from bench.stats import paired
from integration.harness.packages import Debs
from nvct.base.defaults import DEFAULT_SOCKET
from nvct.cli.daemon_cmd import answers

# The packages last: their phase is the only time nvct is installed on the host.
INSTALL_PATHS = ("venv", "wheel", "packages")
BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
SOCKET = Path(DEFAULT_SOCKET)
HIDDEN = SOCKET.with_name(SOCKET.name + ".bench-hidden")
HOOK = "nvidia-container-runtime-hook"
GPU = ["-e", "NVIDIA_VISIBLE_DEVICES=0"]
# Variant -> (docker run arguments before the image, with NVCT standing for the install's
# runtime name; whether its daemon's socket is where the programs look; the path its starts
# must take: the ``via`` of nvct's log events, None where nvct does no work).
VARIANTS: dict[str, tuple[list[str], bool, str | None]] = {
    "runc": ([], True, None),
    "runc, another runtime name": (["--runtime", "runc-control"], True, None),
    "no GPU": (["--runtime", "NVCT"], True, None),
    "1 GPU": (["--runtime", "NVCT", *GPU], True, "create:native"),
    "1 GPU, no daemon": (["--runtime", "NVCT", *GPU], False, "create:native"),
    "1 GPU, first of its kind": (["--runtime", "NVCT", *GPU], True, "create:daemon"),
    "1 GPU, first of its kind, no daemon": (["--runtime", "NVCT", *GPU], False, "create:shim"),
    "--gpus device=0": (["--gpus", "device=0"], True, "hook:native"),
    "--gpus device=0, first of its kind": (["--gpus", "device=0"], True, "hook:daemon"),
    "--gpus device=0, Python hook": (["--gpus", "device=0"], False, "hook:hook"),
    "Python floor (only execs runc)": (["--runtime", "python-floor", *GPU], True, None),
}
# With --podman: podman (runc, private storage) with an empty hooks directory, and with one
# holding the install's hook as the packages' hooks.d entry names it (for every container; the
# hook finds the GPU asked for); name -> (the hooks directory with the hook or the empty one,
# docker-style extra arguments, daemon socket in place, path). Compared with "podman".
PODMAN_VARIANTS: dict[str, tuple[bool, list[str], bool, str | None]] = {
    "podman": (False, [], True, None),
    "podman hooks.d, 1 GPU": (True, GPU, True, "hook:native"),
    "podman hooks.d, 1 GPU, Python hook": (True, GPU, False, "hook:hook"),
    "podman hooks.d, no GPU": (True, [], True, None),
    "podman hooks.d, void": (True, ["-e", "NVIDIA_VISIBLE_DEVICES=void"], True, None),
    # CDI: the spec the install's nvct-cli writes, naming the install's nvct-cdi-hook.
    "podman CDI, 1 GPU": (False, ["--device", "nvidia.com/gpu=0"], True, None),
}
GOALS = {
    "1 GPU": 1.05,
    "1 GPU, no daemon": 1.08,
    "--gpus device=0": 1.05,
    "no GPU": 1.025,
    "podman hooks.d, 1 GPU": 1.05,
    "podman hooks.d, no GPU": 1.025,
    "podman CDI, 1 GPU": 1.05,
}
# The goals whose starts run the same code on every install path (pooled over them too).
POOLED = (
    "no GPU",
    "1 GPU",
    "1 GPU, no daemon",  # the launcher's native create: the same C code in every install
    "--gpus device=0",
    "podman hooks.d, 1 GPU",
    "podman hooks.d, no GPU",
    "podman CDI, 1 GPU",
)
# What a goal's verdict is reckoned against: kept by --goals-only.
BASELINES = ("runc", "runc, another runtime name", "podman")
WARM = 2  # starts per variant before the rounds: inventory, work orders, page cache
# Variants whose every start finds no native entry (the entries moved aside around it, untimed):
# neither the launcher's native create nor the native hook can take it, so the daemon, the
# Python shim or the Python hook does it and writes an entry, as for the first container of a
# kind; the others' entries are back in place for the next start.
FIRST_OF_KIND = (
    "1 GPU, first of its kind",
    "1 GPU, first of its kind, no daemon",
    "--gpus device=0, first of its kind",
    "--gpus device=0, Python hook",
    "podman hooks.d, 1 GPU, Python hook",
)


@dataclass
class Install:
    """One way users install nvct: the programs dockerd and runc run, and its daemon."""

    name: str
    launcher: Path
    hook: Path
    python: Path  # the interpreter its daemon and Python fallbacks run on
    notes: dict[str, str] = field(default_factory=dict)

    def daemon_argv(self) -> list[str]:
        """How this install starts its daemon: the packages' unit's ExecStart, or, for a
        venv, ``nvct-cli daemon start``'s command (``module_argv`` as that venv computes it)."""
        if self.name == "packages":
            return ["/usr/libexec/nvct/nvct-runtime-daemon"]
        code = (
            "import json; from nvct.base._site import module_argv; "
            "print(json.dumps(module_argv('nvct.runtime.launch.daemon')))"
        )
        out = subprocess.run(
            [str(self.python), "-I", "-c", code], capture_output=True, text=True, check=True
        )
        argv: list[str] = json.loads(out.stdout)
        return argv

    def describe(self) -> dict[str, str]:
        return {
            "launcher": str(self.launcher),
            "launcher_native": str(self.launcher.read_bytes()[:4] == b"\x7fELF"),
            "hook": str(self.hook),
            "hook_native": str(self.hook.resolve().read_bytes()[:4] == b"\x7fELF"),
            "daemon": " ".join(self.daemon_argv())[:300],
            "python": str(self.python),
            **self.notes,
        }


@contextlib.contextmanager
def socket_hidden(hidden: bool) -> Iterator[None]:
    """The daemon's socket moved aside (the programs find no daemon, as where none runs) or
    left in place. A bound socket keeps listening under its new name and is put back."""
    if not hidden:
        yield
        return
    os.rename(SOCKET, HIDDEN)
    try:
        yield
    finally:
        os.rename(HIDDEN, SOCKET)


@contextlib.contextmanager
def running_daemon(install: Install, log: Path) -> Iterator[None]:
    """The install's daemon on ``SOCKET``: one the packages' systemd unit started, or one
    started here (stopped by its pid afterwards)."""
    from integration.harness.shimd import ShimDaemon

    if answers(str(SOCKET)):  # systemd's, from the package's postinst
        install.notes["daemon_started_by"] = "systemd"
        yield
        return
    made = not SOCKET.parent.exists()
    SOCKET.parent.mkdir(parents=True, exist_ok=True)
    shimd = ShimDaemon(install.daemon_argv(), SOCKET, log).start()
    install.notes["daemon_started_by"] = "bench"
    try:
        yield
    finally:
        shimd.stop()
        if made:  # the host as it was (a package's postrm would remove its own)
            with contextlib.suppress(OSError):
                SOCKET.parent.rmdir()


def point_hook(link: Path, target: Path) -> None:
    """dockerd's ``nvidia-container-runtime-hook`` (a link on its PATH) -> ``target``."""
    fresh = link.with_name(link.name + ".new")
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(target)
    fresh.replace(link)


def _starts(log: Path, skip_lines: int) -> Iterator[tuple[str, dict[str, object]]]:
    """``(create|hook, event)`` of each start nvct logged after ``skip_lines``."""
    kinds = {"container_prepared": "create", "container_configured": "hook"}
    for line in log.read_text().splitlines()[skip_lines:]:
        event = json.loads(line)
        kind = kinds.get(event.get("event", ""))
        if kind:
            yield kind, event


def start_paths(log: Path, skip_lines: int) -> dict[str, int]:
    """How many creates and hooks each path did, from nvct's log after ``skip_lines``."""
    counts: dict[str, int] = {}
    for kind, event in _starts(log, skip_lines):
        key = f"{kind}:{event.get('via', '?')}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def mounts_per_start(log: Path, skip_lines: int) -> dict[str, list[int]]:
    """The bind mounts nvct gave each kind of start (create, hook), from nvct's log after
    ``skip_lines``: the distinct counts, which say how the driver's files were bound."""
    seen: dict[str, set[int]] = {}
    for kind, event in _starts(log, skip_lines):
        mounts = event.get("mounts")
        if isinstance(mounts, int):
            seen.setdefault(kind, set()).add(mounts)
    return {kind: sorted(counts) for kind, counts in seen.items()}


def hooks_dirs(work: Path, hook: Path) -> tuple[Path, Path]:
    """An empty hooks.d and one whose entry runs ``hook`` as the packages' entry does, with
    nvct's config (podman gives a hook only the entry's environment)."""
    empty, full = work / "hooks-empty", work / "hooks-nvct"
    empty.mkdir(exist_ok=True)
    full.mkdir(exist_ok=True)
    entry = json.loads((ROOT / "hooks" / "oci-nvct-hook.json").read_text())
    entry["hook"]["path"] = str(hook)
    entry["hook"]["env"].append(f"NVCT_CONFIG={os.environ['NVCT_CONFIG']}")
    (full / "oci-nvct-hook.json").write_text(json.dumps(entry))
    return empty, full


@contextlib.contextmanager
def cdi_spec(install: Install, wanted: bool, work: Path) -> Iterator[None]:
    """The install's CDI spec (its ``nvct-cli cdi generate``, naming its ``nvct-cdi-hook``;
    the libraries as one directory under ``work``, as the packages' refresh service writes
    it) alone in ``/var/run/cdi`` for the phase, where podman reads it on each run; removed
    after."""
    if not wanted:
        yield
        return
    from integration.harness.podman import spec_in_cdi_dir

    cli = install.launcher.parent / "nvct-cli"
    with spec_in_cdi_dir(".json") as path:
        subprocess.run(
            [
                str(cli), "cdi", "generate", "-o", str(path), "--library-mounts", "directory",
                "--library-dir", str(work / f"cdi-libs-{install.name}"),
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
        yield


def run_phase(
    install: Install, base: list[str], image: str, env: dict[str, str], args: argparse.Namespace,
    log: Path, work: Path, podman: list[str] | None, until: float = float("inf"),
) -> dict[str, object]:  # fmt: skip
    """Warm-up and interleaved rounds of every variant for one install; its results. The
    rounds stop early, whole, once the monotonic clock passes ``until``."""
    point_hook(work / "hookbin" / HOOK, install.hook)
    variants = {
        name: (
            [*base, *[f"nvct-{install.name}" if a == "NVCT" else a for a in extra], image, "true"],
            served,
            path,
        )
        for name, (extra, served, path) in VARIANTS.items()
    }
    if podman is not None:
        from integration.harness.podman import RUN_FLAGS, TAG

        empty, full = hooks_dirs(work, install.hook)
        for name, (hooked, extra, served, path) in PODMAN_VARIANTS.items():
            hooks = ["--hooks-dir", str(full if hooked else empty)]
            argv = [*podman, *hooks, "run", "--rm", *RUN_FLAGS, *extra, TAG, "true"]
            variants[name] = (argv, served, path)
    if args.goals_only:  # more rounds in the same time for the verdicts
        variants = {n: v for n, v in variants.items() if n in GOALS or n in BASELINES}
    # The docker CLI's environment names the private dockerd; podman's is this process's.
    envs = {name: env if name in VARIANTS else None for name in variants}
    samples: dict[str, list[float]] = {name: [] for name in variants}
    entries = native_entries(Path(os.environ["NVCT_CONFIG"]))
    began = time.monotonic()
    with (
        running_daemon(install, work / f"shimd-{install.name}.log"),
        cdi_spec(install, "podman CDI, 1 GPU" in variants, work),
    ):
        for name, (argv, served, _) in variants.items():
            for _ in range(WARM):
                with (
                    socket_hidden(not served),
                    entries_aside(entries if name in FIRST_OF_KIND else None),
                ):
                    done = subprocess.run(
                        argv, env=envs[name], capture_output=True, text=True, check=False
                    )
                if done.returncode != 0:
                    raise SystemExit(f"bench.gpus_goal: {name}: {' '.join(argv)}:\n{done.stderr}")
        # The warm-up starts wrote the native entries: from here each start takes one path.
        skip = len(log.read_text().splitlines()) if log.exists() else 0
        order = random.Random(args.seed)  # noqa: S311 - an order, not a secret
        rounds = 0
        while rounds < args.rounds and time.monotonic() < until:
            rounds += 1
            if args.sync:
                os.sync()
            for name in order.sample(list(variants), len(variants)):
                argv, served, _ = variants[name]
                with (
                    socket_hidden(not served),
                    entries_aside(entries if name in FIRST_OF_KIND else None),
                ):
                    samples[name].append(timed(argv, envs[name]))
    paths = start_paths(log, skip)
    expected: dict[str, int] = {}
    for _argv, _served, path in variants.values():
        if path:
            expected[path] = expected.get(path, 0) + rounds
    if paths != expected:
        raise SystemExit(
            f"bench.gpus_goal: {install.name}: the starts took other paths than their variants "
            f"name (nvct's log: {paths}, expected {expected})"
        )
    runc = samples["runc"]
    control = samples["runc, another runtime name"]
    compared = {
        name: paired(
            s, samples["podman"] if name in PODMAN_VARIANTS else runc, seed=args.seed
        ).as_dict(GOALS.get(name))
        for name, s in samples.items()
        if name not in ("runc", "podman")
    }
    return {
        "install": install.describe(),
        "rounds": rounds,
        "results": {name: quantiles(s) for name, s in samples.items()},
        "paired_vs_runc": compared,
        "paired_vs_control": {
            name: paired(s, control, seed=args.seed).as_dict()
            for name, s in samples.items()
            if name in VARIANTS and name not in ("runc", "runc, another runtime name")
        },
        "start_paths": paths,
        "mounts_per_start": mounts_per_start(log, skip),
        "seconds": round(time.monotonic() - began),
        # each variant's starts in round order (ms): for other statistics than these
        "samples": {name: [round(x, 2) for x in s] for name, s in samples.items()},
    }


def python_floor(work: Path, config: Path) -> dict[str, object]:
    """dockerd's runtime entry for a native launcher with no daemon to ask whose Python only
    execs runc. Its config (``--nvct-config``) turns caching off, so the launcher finds no
    native entry and every GPU create starts that Python, as the floor must."""
    from nvct.runtime.launch.build import build_native

    floor = work / "python-floor"
    floor_config = work / "python-floor.toml"
    floor_config.write_text(f'cache-dir = ""\n# {config}, without its cache\n')
    exec_runc = "import os, sys; os.execvp('runc', ['runc', *sys.argv[1:]])"
    build_native(floor, f'/usr/bin/python3 -I -S -c "{exec_runc}"', str(config), "")
    return {"path": str(floor), "runtimeArgs": ["--nvct-config", str(floor_config)]}


def venv_install() -> Install:
    """This checkout's ``make venv``. Its native programs carry the code id of the tree they
    were built from, and ``make venv`` builds them once: after an edit of nvct's sources the
    daemon would decline them, so they are built again here, as ``make venv`` builds them."""
    from integration.harness.packages import compiled_code_ids
    from nvct.runtime.launch.build import build_native, default_command, hook_command
    from nvct.runtime.launch.code_id import code_id

    install = Install("venv", BIN / "nvct-runtime", BIN / HOOK, Path(sys.executable))
    current = code_id()
    for path, hook in ((install.launcher, False), (install.hook.resolve(), True)):
        if current not in compiled_code_ids(path.read_bytes()):
            command = hook_command() if hook else default_command()
            build_native(path, command, "/etc/nvct/config.toml", DEFAULT_SOCKET, hook=hook)
            install.notes[f"rebuilt {path.name}"] = "its code id was another tree's"
    return install


def wheel_install(work: Path) -> Install:
    from bench.wheel import wheel_venv

    binary = wheel_venv(work / "wheel")
    return Install("wheel", binary / "nvct-runtime", binary / HOOK, binary / "python3")


PACKAGED = Install(
    "packages",
    Path("/usr/bin/nvct-runtime"),
    Path(f"/usr/bin/{HOOK}"),
    Path("/usr/bin/python3"),
)


@contextlib.contextmanager
def installed(name: str, debs: Debs | None) -> Iterator[None]:
    """The .debs installed for the packages phase (under the packaging tests' lock), else
    nothing to do."""
    if name != "packages":
        yield
        return
    from integration.harness.packages import (
        deb_install_lock,
        install_debs,
        need_no_installed_nvct,
    )

    with deb_install_lock():
        why = need_no_installed_nvct()
        if why:
            raise SystemExit(
                f"bench.gpus_goal: {why}: purge it or leave out --install-path packages"
            )
        assert debs is not None
        with install_debs(debs) as done:
            PACKAGED.notes["deb"] = done.packages.deb.name
            yield


def host_facts(dockerd_version: str) -> dict[str, object]:
    runc = subprocess.run(["runc", "--version"], capture_output=True, text=True, check=False)
    return {
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "kernel": os.uname().release,
        "docker_version": dockerd_version,
        "dockerd": shutil.which("dockerd") or "",
        "runc": (runc.stdout.splitlines() or [""])[0],
    }


def podman_driver(docker_driver: str) -> str:
    """podman's storage on the same kind as dockerd's (its name for overlay2 is overlay)."""
    return "overlay" if docker_driver == "overlay2" else docker_driver


def cannot_start(prog: str, why_root: str) -> str | None:
    """Why a bench that starts nvct's daemon on the default socket cannot run here, if so."""
    if os.geteuid() != 0:
        return f"{prog}: needs root ({why_root})"
    if answers(str(SOCKET)):
        return f"{prog}: a daemon answers on {SOCKET}: stop it first"
    return None


def main() -> int:
    from bench.runc_only import add_inject_options, driver_config

    parser = argparse.ArgumentParser(prog="python -m bench.gpus_goal")
    parser.add_argument(
        "--install-path",
        action="append",
        choices=(*INSTALL_PATHS, "all"),
        help="packages, wheel, venv (repeatable), or all (default)",
    )
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--storage-driver", default="overlay2")
    parser.add_argument("--image", choices=("glibc", "busybox"), default="glibc")
    parser.add_argument("--nice", type=int, default=-5, help="niceness of the measured chain")
    parser.add_argument("--cpus", help="CPUs the measured chain runs on (taskset's list: 0,1)")
    parser.add_argument("--no-sync", dest="sync", action="store_false")
    parser.add_argument(
        "--podman", action="store_true", help="also podman's hooks.d path (about 1.5 x the time)"
    )
    parser.add_argument(
        "--goals-only",
        action="store_true",
        help="only the variants with a goal and their baselines (no Python hook, no floor)",
    )
    parser.add_argument(
        "--driver",
        choices=("sim", "host"),
        default="sim",
        help="the simulated 4-GPU driver, or the host's own (records its first GPU)",
    )
    parser.add_argument(
        "--docker-kit", type=Path, help="docker's programs packed by bench.docker_kit, run from it"
    )
    add_inject_options(parser, "library-mounts", "binaries")
    parser.add_argument(
        "--budget-s",
        type=float,
        help="stop the rounds, whole, once the run has taken this long (each install path gets "
        "an equal share of what is left as it begins): a lent machine's time is counted",
    )
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    chosen = args.install_path or ["all"]
    paths = [p for p in INSTALL_PATHS if "all" in chosen or p in chosen]
    output = args.output or Path(f"bench/results-goal-{socket.gethostname()}.json")
    refused = cannot_start("bench.gpus_goal", "dockerd, dpkg, device nodes")
    if refused:
        print(refused, file=sys.stderr)
        return 1
    began = time.monotonic()
    load_before = os.getloadavg()
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    if args.nice:
        os.nice(args.nice)

    from integration.harness.dockerd import Dockerd
    from integration.harness.images import GLIBC_TAG

    work = Path(tempfile.mkdtemp(prefix="nvct-bench-goal-"))
    if args.docker_kit:
        from bench.docker_kit import unpack

        os.environ["PATH"] = f"{unpack(args.docker_kit, work / 'docker')}:{os.environ['PATH']}"
    config, card = driver_config(args.driver, work / "nvct", args.library_mounts, args.binaries)
    log = config.parent / "nvct.log"
    installs: dict[str, Install] = {}
    debs: Debs | None = None
    if "venv" in paths:
        installs["venv"] = venv_install()
    if "wheel" in paths:
        installs["wheel"] = wheel_install(work)
    if "packages" in paths:
        from integration.harness.packages import build_debs

        debs = build_debs()
        installs["packages"] = PACKAGED
    hookbin = work / "hookbin"
    hookbin.mkdir()
    # dockerd offers --gpus only if it finds the hook as it starts; each phase re-points it.
    point_hook(hookbin / HOOK, Path(shutil.which("true") or "/bin/true"))
    runtimes: dict[str, dict[str, object]] = {
        f"nvct-{name}": {"path": str(i.launcher)} for name, i in installs.items()
    }
    runtimes["runc-control"] = {"path": shutil.which("runc") or "runc"}
    runtimes["python-floor"] = python_floor(work, config)
    os.environ["NVCT_CONFIG"] = str(config)  # dockerd -> the runtimes and the --gpus hooks
    old_path = os.environ["PATH"]
    os.environ["PATH"] = f"{hookbin}:{old_path}"
    dockerd = Dockerd({"runtimes": runtimes}, storage_driver=args.storage_driver)
    try:
        dockerd.start()
    finally:
        os.environ["PATH"] = old_path
    phases: dict[str, dict[str, object]] = {}
    try:
        version = server_version(dockerd)
        rootfs = import_image(dockerd, args.image, work / "rootfs")
        base = [dockerd.docker_cli, "-H", dockerd.host, "run", "--rm", "--network", "none"]
        env = dockerd.cli_env()
        with contextlib.ExitStack() as stack:
            podman = None
            if args.podman:
                from integration.harness.podman import private_podman

                (work / "podman").mkdir()
                driver = podman_driver(args.storage_driver)
                podman = stack.enter_context(private_podman(work / "podman", rootfs, driver))
            for done, name in enumerate(paths):
                until = float("inf")
                if args.budget_s is not None:
                    share = (began + args.budget_s - time.monotonic()) / (len(paths) - done)
                    until = time.monotonic() + share
                with installed(name, debs):
                    phases[name] = run_phase(
                        installs[name], base, GLIBC_TAG, env, args, log, work, podman, until
                    )
                report(name, phases[name])
    finally:
        dockerd.stop()
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {
            **host_facts(version),
            "driver": card,
            "docker_kit": str(args.docker_kit or ""),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
        "storage_driver": args.storage_driver,
        "image": args.image,
        "rounds": args.rounds,
        "budget_s": args.budget_s,
        "library_mounts": args.library_mounts or "directory (default)",
        "binaries": args.binaries or "links (default)",
        "seed": args.seed,
        "pinning": {"nice": args.nice, "cpus": args.cpus or "all", "sync_each_round": args.sync},
        "podman": args.podman,
        "podman_storage_driver": podman_driver(args.storage_driver) if args.podman else "",
        "goals_only": args.goals_only,
        "goals": GOALS,
        "install_paths": phases,
        "pooled": pooled(phases, args.seed),
        "seconds": round(time.monotonic() - began),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    for variant, c in results["pooled"].items():
        assert isinstance(c, dict)
        print(
            f"pooled, every install: {variant:<24} {c['ratio']:6.3f}  "
            f"[{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]  {c['verdict']} (<= {c['goal']})"
        )
    print(f"{results['seconds']} s; written: {output}")
    return 0


def pooled(phases: dict[str, dict[str, object]], seed: int) -> dict[str, dict[str, object]]:
    """The goals over every install path's rounds together where each install runs the same
    launcher, daemon and hook code (only the files' places and the Python fallbacks differ),
    so their rounds are samples of one start; empty for one install. A goal counts the
    phases that measured it (in one run, all or none; ``bench.pool_runs`` passes the phases
    of several runs)."""
    if len(phases) < 2:
        return {}
    found: dict[str, dict[str, object]] = {}
    for name in POOLED:
        variant: list[float] = []
        base: list[float] = []
        for phase in phases.values():
            samples = phase["samples"]
            assert isinstance(samples, dict)
            if name in samples:
                variant += samples[name]
                base += samples["podman" if name in PODMAN_VARIANTS else "runc"]
        if base:
            found[name] = paired(variant, base, seed=seed).as_dict(GOALS[name])
    return found


def report(name: str, phase: dict[str, object]) -> None:
    results = phase["results"]
    compared = phase["paired_vs_runc"]
    assert isinstance(results, dict) and isinstance(compared, dict)
    print(f"== {name} ({phase['seconds']} s; paths {phase['start_paths']})")
    print(
        f"{'variant':<32} {'median':>8} {'p10':>8} {'p90':>8}  {'x runc':>6}  95% interval  verdict"
    )
    for variant, q in results.items():
        c = compared.get(variant)
        ratio = (
            f"{c['ratio']:6.3f}  [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]  "
            + (f"{c['verdict']} (<= {c['goal']})" if "goal" in c else "")
            if c
            else ""
        )
        print(f"{variant:<32} {q['median']:8.1f} {q['p10']:8.1f} {q['p90']:8.1f}  {ratio}")
    if "podman" in results:
        print("(the podman rows: ratio to podman with no hook and no CDI device)")


if __name__ == "__main__":
    sys.exit(main())
