"""One Kubernetes-facing nvct command's start-up on each install path, against the stand-in API
server: what ``bench.configmanager`` and ``bench.k8s_startup`` run (bench/README.md).

The install paths (``INSTALLS``):

- ``make venv``: this checkout's ``.venv/bin/<program>`` (the editable install);
- ``pip wheel``: the wheel (``pip wheel .``) installed by a new non-root user into a fresh venv
  (integration/harness/wheel.py: ``install_as_user``), run as that user;
- ``deb``: the .deb (``make -C packaging deb``, as integration/test_packaging.py builds it)
  installed by ``dpkg --root`` into an overlay of this machine's root in a private mount
  namespace (the host's own /usr is not touched), run chrooted there as root; ``--deb
  NAME=FILE`` adds another .deb the same way (another commit's: before/after in one run).

A ``Command`` says what runs (the console script and its arguments) and what it must leave
behind; each run is checked for that result (a fast failure never passes for a fast start).
Per round, in a seeded random order of the installs:

- ``written_ms``: process start to the command's result stored (the command's ``Job`` says
  when: a file's mtime, or the stand-in's own clock at the write); ``exit_ms``: to its exit;
  ``cpu_ms``: the CPU time (user + system) the process used, which a busy machine moves far
  less than the wall times;
- ``import_ms``: every import of a run under ``-X importtime`` (the launcher's interpreter
  and flags), summed; ``imports``: the biggest top-level imports' medians;
- ``interpreter_ms``: the same interpreter and flags running nothing (``-c pass``);
- ``paired_written_ms``, ``paired_cpu_ms``: per pair of installs, the median of the rounds'
  differences.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.bench import quantiles
from integration.apiserver.certs import make_certs
from integration.apiserver.server import APIServer
from integration.apiserver.store import Kind, Store
from integration.harness.nvct_config import NVCT_BIN
from integration.harness.packages import build_packages
from integration.harness.wheel import build_wheel, install_as_user, unused_uid

INSTALLS = ("make venv", "pip wheel", "deb")
PRIVATE_NS = "NVCT_BENCH_PRIVATE_MOUNTS"  # set once re-executed under ``unshare -m``
TOP = 8  # top-level imports kept per install


class NotDone(Exception):
    """A run exited 0 without leaving the result its command must leave (what was found)."""


@dataclass
class Job:
    """One install's runs of a command: its arguments (after the program) and environment,
    ``reset`` (the state it changes put back before each run), and ``written_ns`` (the wall
    time, ns, its result was stored; raises ``NotDone`` where the result is not there or not
    the expected one)."""

    argv: list[str]
    env: dict[str, str]
    reset: Callable[[], None]
    written_ns: Callable[[], int]


class Command(Protocol):
    """What a bench times: ``program`` (the console script every install has) and, per
    install, a ``Job`` in a directory of its own on the one stand-in API server."""

    name: str
    program: str

    def serve(self, server: APIServer) -> None:
        """What the cluster holds before any install runs (Nodes, CRDs)."""

    def job(self, directory: Path, server: APIServer) -> Job:
        """An install's job; ``directory`` (made here) becomes its user's afterwards."""


@dataclass(frozen=True)
class Stamp:
    """One write the stand-in stored: its wall time (ns), resource, (namespace, name), and
    the object as stored."""

    ns: int
    resource: str
    key: tuple[str, str]
    obj: dict[str, Any]


@dataclass
class StampedStore(Store):
    """The stand-in's store, stamping each write with the wall time it was stored (this
    process's clock, the one the runs' starts are read from)."""

    stamps: list[Stamp] = field(default_factory=list)

    def _record(
        self, kind: Kind, kind_type: str, key: tuple[str, str], obj: dict[str, Any]
    ) -> None:
        super()._record(kind, kind_type, key, obj)
        self.stamps.append(
            Stamp(time.time_ns(), kind.resource, key, self.history[kind.resource][-1].obj)
        )


def first_write(
    stamps: list[Stamp], resource: str, key: tuple[str, str], done: Callable[[dict[str, Any]], str]
) -> int:
    """The time of the first stored write of ``key`` that ``done`` finds right (``done``: an
    empty string, else what is wrong with it).

    Raises:
        NotDone: no such write; says what the writes of ``key`` were instead.
    """
    wrong = []
    for stamp in stamps:
        if stamp.resource == resource and stamp.key == key:
            said = done(stamp.obj)
            if not said:
                return stamp.ns
            wrong.append(said)
    where = f"{resource} {'/'.join(k for k in key if k)}"
    raise NotDone(f"{where}: {'; '.join(wrong) if wrong else 'never written'}")


@dataclass
class Install:
    """How one install path's program is started: ``program`` (its launcher), the
    interpreter line of that launcher, as whom and in which root, and its ``job``."""

    name: str
    program: str
    interpreter: list[str]
    job: Job
    user: int | None = None
    root: Path | None = None
    samples: dict[str, list[float]] = field(default_factory=dict)
    imports: dict[str, list[float]] = field(default_factory=dict)

    def spawn(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        env = {"PATH": "/usr/bin:/bin", **self.job.env}
        who: dict[str, Any] = {}
        if self.user is not None:
            who = {"user": self.user, "group": self.user, "extra_groups": []}
        if self.root is not None:
            who["preexec_fn"] = chrooted(self.root)
        return subprocess.Popen(argv, env=env, **who, **kwargs)

    def sample(self, key: str, value: float) -> None:
        self.samples.setdefault(key, []).append(value)


def chrooted(root: Path) -> Callable[[], None]:
    def enter() -> None:
        os.chroot(root)
        os.chdir("/")

    return enter


def interpreter_of(script: Path, root: Path | None = None) -> list[str]:
    """A launcher's ``#!`` line as argv: the interpreter and its flags."""
    where = (root / script.relative_to("/")) if root else script
    first = where.read_text(errors="replace").splitlines()[0]
    if not first.startswith("#!"):
        raise SystemExit(f"bench: {where} is not a script (its first line: {first[:40]!r})")
    return first[2:].split()


def children_cpu_s() -> float:
    """User + system CPU of this process's waited-for children so far (the one run waited
    for between two reads: its own CPU, which the machine's load moves far less than its
    wall time)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def checked(install: Install, proc: subprocess.Popen[bytes], err: bytes, began: int) -> int:
    """The run's written time (ns after ``began``), once it is known to have done its job."""
    if proc.returncode != 0:
        raise SystemExit(f"bench: {install.name} failed ({proc.returncode}): {err[-2000:]!r}")
    try:
        return install.job.written_ns() - began
    except NotDone as missing:
        raise SystemExit(
            f"bench: {install.name} exited 0 but did not do its job: {missing}"
        ) from None


def one_run(install: Install) -> None:
    """A run: start to result written, start to exit, CPU."""
    install.job.reset()
    cpu = children_cpu_s()
    began = time.time_ns()
    argv = [install.program, *install.job.argv]
    proc = install.spawn(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=60)
    ended = time.time_ns()
    install.sample("cpu_ms", (children_cpu_s() - cpu) * 1000)
    install.sample("written_ms", checked(install, proc, err, began) / 1e6)
    install.sample("exit_ms", (ended - began) / 1e6)


def import_run(install: Install) -> None:
    """The run under ``-X importtime``: every import's cumulative time at top level."""
    install.job.reset()
    python, *flags = install.interpreter
    argv = [python, "-X", "importtime", *flags, install.program, *install.job.argv]
    began = time.time_ns()
    proc = install.spawn(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=60)
    checked(install, proc, err, began)
    top = top_level_imports(err.decode(errors="replace"))
    install.sample("import_ms", sum(top.values()))
    for name, ms in top.items():
        install.imports.setdefault(name, []).append(ms)


def top_level_imports(report: str) -> dict[str, float]:
    """``-X importtime``'s top-level imports: name -> cumulative ms (a name imported again
    at top level, in another thread, adds up)."""
    found: dict[str, float] = {}
    for line in report.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3 or "cumulative" in parts[1]:
            continue
        label = parts[2][1:]  # one space after the bar, then two per level of nesting
        if not label.startswith(" "):
            found[label] = found.get(label, 0.0) + int(parts[1]) / 1000
    return found


def interpreter_run(install: Install) -> None:
    python, *flags = install.interpreter
    began = time.perf_counter()
    install.spawn([python, *flags, "-c", "pass"]).wait(timeout=30)
    install.sample("interpreter_ms", (time.perf_counter() - began) * 1000)


def job_for(command: Command, directory: Path, server: APIServer, user: int | None) -> Job:
    job = command.job(directory, server)
    if user is not None:
        for path in (directory, *directory.rglob("*")):
            os.lchown(path, user, user)
    return job


def deb_root(work: Path, deb: Path, name: str = "deb") -> Path:
    """The .deb installed by dpkg into an overlay of / (this process's private mounts):
    maintainer scripts and all, the host untouched; ``work`` bound in at its own path."""
    scratch = work / "roots" / name.replace(" ", "-")
    scratch.mkdir(parents=True)
    run("mount", "--make-rprivate", "/")
    run("mount", "-t", "tmpfs", "nvct-bench", scratch)
    for name in ("upper", "work", "root"):
        (scratch / name).mkdir()
    root = scratch / "root"
    options = f"lowerdir=/,upperdir={scratch / 'upper'},workdir={scratch / 'work'}"
    run("mount", "-t", "overlay", "overlay", "-o", options, root)
    run("mount", "--rbind", "/dev", root / "dev")
    run("mount", "-t", "proc", "proc", root / "proc")
    inside = root / work.relative_to("/")
    inside.mkdir(parents=True, exist_ok=True)
    run("mount", "--bind", work, inside)
    # Other jobs may install or purge nvct on this host meanwhile, and an overlay's lower layer
    # must not change under it: nvct's directories are this root's own tmpfs, and an nvct the
    # host has is purged from this root (only) first.
    for private in ("usr/share/nvct", "usr/lib/nvct"):
        (root / private).mkdir(parents=True, exist_ok=True)
        run("mount", "-t", "tmpfs", "nvct-bench", root / private)
    purge = ["dpkg", "--root", str(root), "--purge", "--force-all", "nvct-oci-hook", "nvct"]
    subprocess.run(purge, capture_output=True, check=False)
    run("dpkg", "--root", root, "-i", deb)
    return root


def remove(work: Path) -> None:
    """``work``, once nothing is mounted under it (a deb's root holds /dev and ``work``
    itself, bound: never delete through a mount)."""
    roots = sorted((work / "roots").glob("*")) if (work / "roots").exists() else []
    for scratch in roots:
        subprocess.run(["umount", "-R", str(scratch)], capture_output=True, check=False)
    mounted = [p for s in roots for p in (s, s / "root") if os.path.ismount(p)]
    if mounted:
        print(f"bench: {mounted[0]} is still mounted; left {work} as it is", file=sys.stderr)
        return
    shutil.rmtree(work, ignore_errors=True)


def run(*argv: str | Path) -> None:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench: {' '.join(map(str, argv))}: {done.stderr.strip()[-2000:]}")


def installs(
    command: Command, chosen: list[str], debs: dict[str, Path], work: Path, server: APIServer
) -> list[Install]:
    out = []
    if "make venv" in chosen:
        program = NVCT_BIN / command.program
        job = job_for(command, work / "venv-job", server, None)
        out.append(Install("make venv", str(program), interpreter_of(program), job))
    if "pip wheel" in chosen:
        uid = unused_uid()
        home = work / "wheel-user"
        binary = install_as_user(build_wheel(work / "dist"), home, uid)
        program = binary / command.program
        job = job_for(command, work / "wheel-job", server, uid)
        out.append(Install("pip wheel", str(program), interpreter_of(program), job, user=uid))
    if "deb" in chosen:
        debs = {"deb": build_packages().deb, **debs}
    for name, deb in debs.items():
        root = deb_root(work, deb, name)
        program = Path("/usr/bin") / command.program
        job = job_for(command, work / f"{name.replace(' ', '-')}-job", server, None)
        interpreter = interpreter_of(program, root)
        out.append(Install(name, str(program), interpreter, job, root=root))
    return out


def named_debs(values: list[str]) -> dict[str, Path]:
    """``--deb NAME=FILE`` options: more .deb files to measure beside this checkout's."""
    debs = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not Path(path).is_file():
            raise SystemExit(f"bench: --deb {value!r}: give NAME=FILE of an existing .deb")
        debs[name] = Path(path)
    return debs


def summary(install: Install) -> dict[str, Any]:
    medians = {n: statistics.median(v) for n, v in install.imports.items()}
    top = sorted(medians.items(), key=lambda kv: -kv[1])[:TOP]
    return {
        "program": " ".join([*install.interpreter, install.program, *install.job.argv]),
        "user": "root" if install.user is None else f"uid {install.user} (no passwd entry)",
        "chroot": str(install.root) if install.root else None,
        **{key: quantiles(values) for key, values in install.samples.items()},
        "imports_median_ms": {name: round(ms, 1) for name, ms in top},
    }


def paired(chosen: list[Install], key: str) -> dict[str, float]:
    """The rounds' own differences (a - b) per pair: the load moves both sides alike."""
    return {
        f"{a.name} - {b.name}": round(
            statistics.median(x - y for x, y in zip(a.samples[key], b.samples[key], strict=True)),
            1,
        )
        for i, a in enumerate(chosen)
        for b in chosen[i + 1 :]
    }


def parser(prog: str, output: Path) -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(prog=prog)
    found.add_argument("--rounds", type=int, default=20)
    found.add_argument("--seed", type=int, default=6)
    found.add_argument("--installs", default=",".join(INSTALLS))
    found.add_argument("--output", type=Path, default=output)
    found.add_argument(
        "--deb", action="append", default=[], metavar="NAME=FILE",
        help="also measure this .deb (e.g. another commit's), as install NAME",
    )  # fmt: skip
    return found


def measure(command: Command, args: argparse.Namespace, module: str) -> int:
    """Time ``command`` per install as ``args`` say; ``module``: the ``python -m`` module run
    again under ``unshare -m`` for a .deb's private mounts."""
    debs = named_debs(args.deb)
    keep = bool(os.environ.get("NVCT_BENCH_KEEP"))  # look into the roots after a failure
    chosen = [i.strip() for i in args.installs.split(",") if i.strip()]
    unknown = [i for i in chosen if i not in INSTALLS]
    if unknown:
        raise SystemExit(
            f"bench: --installs: unknown {unknown} (choose from {', '.join(INSTALLS)})"
        )
    if os.geteuid() != 0:
        print("bench: needs root (a new user, dpkg into a private overlay)", file=sys.stderr)
        return 1
    if ("deb" in chosen or debs) and not os.environ.get(PRIVATE_NS):
        # the overlay and its mounts live and die with a private mount namespace
        argv = ["unshare", "-m", sys.executable, "-m", module, *sys.argv[1:]]
        os.execvpe("unshare", argv, {**os.environ, PRIVATE_NS: "1"})
    work = Path(tempfile.mkdtemp(prefix=f"nvct-bench-{command.name}-"))
    work.chmod(0o755)  # the wheel's user reaches its home and job through it
    server = APIServer(make_certs(work / "pki"), StampedStore())
    server.start()
    try:
        command.serve(server)
        chosen_installs = installs(command, chosen, debs, work, server)
        load = [os.getloadavg()[0]]
        for each in chosen_installs:  # warm: byte code, page cache; not counted
            one_run(each)
            import_run(each)
            each.samples.clear()
            each.imports.clear()
        order = random.Random(args.seed)  # noqa: S311 - an order, not a secret
        for _ in range(args.rounds):
            for each in order.sample(chosen_installs, len(chosen_installs)):
                one_run(each)
                import_run(each)
                interpreter_run(each)
        load.append(os.getloadavg()[0])
    finally:
        server.stop()
        if not keep:
            remove(work)
    results = {
        "command": command.name,
        "rounds": args.rounds,
        "seed": args.seed,
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "load_average_1m": {"start": load[0], "end": load[-1]},
        "installs": {each.name: summary(each) for each in chosen_installs},
        **{f"paired_{key}": paired(chosen_installs, key) for key in ("written_ms", "cpu_ms")},
    }
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    for each in chosen_installs:
        s = results["installs"][each.name]
        print(
            f"{each.name:14} written {s['written_ms']['median']:7.1f} ms  cpu "
            f"{s['cpu_ms']['median']:6.1f} ms  exit "
            f"{s['exit_ms']['median']:7.1f} ms  imports {s['import_ms']['median']:6.1f} ms  "
            f"interpreter {s['interpreter_ms']['median']:5.1f} ms"
        )
    return 0
