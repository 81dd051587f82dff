"""nvct-config-manager's start-up on each install path, against the stand-in API server.

``python -m bench.configmanager [--rounds N] [--seed N] [--installs LIST] [--deb NAME=FILE]
[--output FILE]`` (root; a few minutes for 25 rounds on a busy 2-core VM, plus the package
build once): the manager as each install path puts it on a machine, run as the chart's init
container runs it (``ONESHOT=true``: read the Node over HTTPS, write the labelled entry, exit):

- ``make venv``: this checkout's ``.venv/bin/nvct-config-manager`` (the editable install);
- ``pip wheel``: the wheel (``pip wheel .``) installed by a new non-root user into a fresh venv
  (integration/harness/wheel.py: ``install_as_user``), run as that user;
- ``deb``: the .deb (``make -C packaging deb``, as integration/test_packaging.py builds it)
  installed by ``dpkg --root`` into an overlay of this machine's root in a private mount
  namespace (the host's own /usr is not touched), run chrooted there as root:
  ``/usr/bin/python3 -IS /usr/bin/nvct-config-manager`` and its private tree; ``--deb
  NAME=FILE`` adds another .deb the same way (another commit's: before/after in one run).

Per round, in a seeded random order of the installs:

- ``written_ms``: process start to the config file written (the file's mtime, which the
  kernel stamps with its coarse clock: a few ms of resolution); ``exit_ms``: to its exit;
  ``cpu_ms``: the CPU time (user + system) the process used, which a busy machine moves far
  less than the wall times;
- ``import_ms``: every import of a run under ``-X importtime`` (the launcher's interpreter
  and flags), summed; ``imports``: the biggest top-level imports' medians (lightkube and
  httpx2 come in lazily, when the client is made);
- ``interpreter_ms``: the same interpreter and flags running nothing (``-c pass``);
- ``paired_written_ms``, ``paired_cpu_ms``: per pair of installs, the median of the rounds'
  differences.

The results go to ``bench/results-configmanager.json``; the figures to bench/README.md.
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
from typing import Any

from bench.bench import quantiles
from integration.apiserver import cluster_env
from integration.apiserver.certs import make_certs
from integration.apiserver.server import APIServer
from integration.harness.apiserver import CONFIGS, LABEL, NODE, Pod
from integration.harness.nvct_config import NVCT_BIN
from integration.harness.packages import build_packages
from integration.harness.wheel import build_wheel, install_as_user, unused_uid

INSTALLS = ("make venv", "pip wheel", "deb")
PRIVATE_NS = "NVCT_BENCH_PRIVATE_MOUNTS"  # set once re-executed under ``unshare -m``
TOP = 8  # top-level imports kept per install


@dataclass
class Install:
    """How one install path's manager is started: ``program`` (its launcher), the
    interpreter line of that launcher, and as whom and in which root."""

    name: str
    program: str
    interpreter: list[str]
    pod: Pod
    user: int | None = None
    root: Path | None = None
    samples: dict[str, list[float]] = field(default_factory=dict)
    imports: dict[str, list[float]] = field(default_factory=dict)

    def spawn(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        env = {
            "PATH": "/usr/bin:/bin",
            **cluster_env(self.pod.server.url),
            "NVCT_SERVICE_ACCOUNT_DIR": str(self.pod.account),
            **self.pod.env(ONESHOT="true", SEND_SIGNAL="false"),
        }
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


def one_run(install: Install) -> None:
    """The oneshot run: start to file written, start to exit."""
    install.pod.dst.unlink(missing_ok=True)
    cpu = children_cpu_s()
    began = time.time_ns()
    proc = install.spawn([install.program], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=60)
    ended = time.time_ns()
    install.sample("cpu_ms", (children_cpu_s() - cpu) * 1000)
    if proc.returncode != 0 or install.pod.dst.read_text() != CONFIGS["ts4"]:
        raise SystemExit(f"bench: {install.name}'s manager failed ({proc.returncode}): {err!r}")
    install.sample("written_ms", (install.pod.dst.stat().st_mtime_ns - began) / 1e6)
    install.sample("exit_ms", (ended - began) / 1e6)


def import_run(install: Install) -> None:
    """The oneshot run under ``-X importtime``: every import's cumulative time at top level."""
    install.pod.dst.unlink(missing_ok=True)
    python, *flags = install.interpreter
    argv = [python, "-X", "importtime", *flags, install.program]
    proc = install.spawn(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=60)
    if proc.returncode != 0:
        raise SystemExit(f"bench: {install.name} under -X importtime failed: {err[-2000:]!r}")
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


def pod_for(work: Path, server: APIServer, user: int | None = None) -> Pod:
    work.mkdir(parents=True)
    pod = Pod(work, server, CONFIGS)
    if user is not None:
        for path in (work, *work.rglob("*")):
            os.lchown(path, user, user)
    return pod


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
    chosen: list[str], debs: dict[str, Path], work: Path, server: APIServer
) -> list[Install]:
    out = []
    if "make venv" in chosen:
        program = NVCT_BIN / "nvct-config-manager"
        pod = pod_for(work / "venv-pod", server)
        out.append(Install("make venv", str(program), interpreter_of(program), pod))
    if "pip wheel" in chosen:
        uid = unused_uid()
        home = work / "wheel-user"
        binary = install_as_user(build_wheel(work / "dist"), home, uid)
        program = binary / "nvct-config-manager"
        pod = pod_for(work / "wheel-pod", server, uid)
        out.append(Install("pip wheel", str(program), interpreter_of(program), pod, user=uid))
    if "deb" in chosen:
        debs = {"deb": build_packages().deb, **debs}
    for name, deb in debs.items():
        root = deb_root(work, deb, name)
        program = Path("/usr/bin/nvct-config-manager")
        pod = pod_for(work / f"{name.replace(' ', '-')}-pod", server)
        interpreter = interpreter_of(program, root)
        out.append(Install(name, str(program), interpreter, pod, root=root))
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
        "program": " ".join([*install.interpreter, install.program]),
        "user": "root" if install.user is None else f"uid {install.user} (no passwd entry)",
        "chroot": str(install.root) if install.root else None,
        **{key: quantiles(values) for key, values in install.samples.items()},
        "imports_median_ms": {name: round(ms, 1) for name, ms in top},
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.configmanager")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--installs", default=",".join(INSTALLS))
    parser.add_argument("--output", type=Path, default=Path("bench/results-configmanager.json"))
    parser.add_argument(
        "--deb", action="append", default=[], metavar="NAME=FILE",
        help="also measure this .deb (e.g. another commit's), as install NAME",
    )  # fmt: skip
    args = parser.parse_args()
    debs = named_debs(args.deb)
    keep = bool(os.environ.get("NVCT_BENCH_KEEP"))  # look into the roots after a failure
    chosen = [i.strip() for i in args.installs.split(",") if i.strip()]
    unknown = [i for i in chosen if i not in INSTALLS]
    if unknown:
        parser.error(f"--installs: unknown {unknown} (choose from {', '.join(INSTALLS)})")
    if os.geteuid() != 0:
        print("bench: needs root (a new user, dpkg into a private overlay)", file=sys.stderr)
        return 1
    if ("deb" in chosen or debs) and not os.environ.get(PRIVATE_NS):
        # the overlay and its mounts live and die with a private mount namespace
        argv = ["unshare", "-m", sys.executable, "-m", "bench.configmanager", *sys.argv[1:]]
        os.execvpe("unshare", argv, {**os.environ, PRIVATE_NS: "1"})
    work = Path(tempfile.mkdtemp(prefix="nvct-bench-configmanager-"))
    work.chmod(0o755)  # the wheel's user reaches its home and pod through it
    server = APIServer(make_certs(work / "pki"))
    server.start()
    try:
        server.put_node(NODE, {LABEL: "ts4"})
        chosen_installs = installs(chosen, debs, work, server)
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
        "rounds": args.rounds,
        "seed": args.seed,
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "load_average_1m": {"start": load[0], "end": load[-1]},
        "installs": {each.name: summary(each) for each in chosen_installs},
        # the rounds' own differences (a - b): the load moves both sides of a pair alike
        **{
            f"paired_{key}": {
                f"{a.name} - {b.name}": round(
                    statistics.median(
                        x - y for x, y in zip(a.samples[key], b.samples[key], strict=True)
                    ),
                    1,
                )
                for i, a in enumerate(chosen_installs)
                for b in chosen_installs[i + 1 :]
            }
            for key in ("written_ms", "cpu_ms")
        },
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


if __name__ == "__main__":
    sys.exit(main())
