"""Hostile root filesystems: symlinks out of the rootfs, symlinks swapped mid-hook, mount leaks,
concurrent starts (issue 7, items 1, 2, 4 and 5).

The hook runs as root on the host over a rootfs the image's author controls
(CVE-2024-0132, CVE-2024-0134, CVE-2025-23267). Every symlink here points at a *canary*
directory this test creates on the host, never at a real host directory, so a vulnerable nvct
would damage only the canary, and the test sees it:

- files: a recursive listing with hashes of the canary, before and after;
- mounts: a ``createRuntime`` hook (runc runs it after every prestart hook, still before
  pivot_root, so host paths are visible in the container's mount namespace) copies the
  container's mountinfo; no mount point may lie outside the rootfs other than the ones runc
  made, and none under the canary;
- the host's own mount table (``/proc/self/mountinfo``) keeps its line count.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from integration.harness.bundles import BundleFactory, run_runc
from integration.harness.nvct_config import NVCT_BIN, write_nvct_config
from integration.harness.shimd import expected_via, hook_via

pytestmark = [pytest.mark.runc, pytest.mark.root]

SHIM = str(NVCT_BIN / "nvct-runtime")
LIBDIR = "usr/lib/x86_64-linux-gnu"
# Other engines' containers (other dockerds on this machine) come and go while these tests run;
# their mounts live under these paths and are not ours to count.
# (/tmp/nvd-*, /tmp/nvc-*: the harness's private dockerds and containerds, which other test
# sessions start and stop.)
_FOREIGN_MOUNTS = (
    "/docker",
    "/containerd",
    "/run/netns",
    "/var/lib/kubelet",
    "/tmp/nvd-",
    "/tmp/nvc-",
)
# Names of driver files and nodes nvct injects (packages installing nvct itself may come and go).
_DRIVER_NAMES = ("libcuda", "libnvidia", "nvidia-smi", "nvidia-debugdump", "gsp_", "nvidiactl")

OBSERVER = """\
import json, sys
state = json.load(sys.stdin)
with open(f"/proc/{state['pid']}/mountinfo") as src, open(sys.argv[1], "a") as out:
    out.write(src.read())
"""


# --- evidence -----------------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (not following symlinks): type, mode, link target or hash."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, ""]:
            path = Path(dirpath, name) if name else Path(dirpath)
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = f"link {os.readlink(path)}"
            elif stat.S_ISREG(st.st_mode):
                out[rel] = f"file {st.st_mode:o} {hashlib.sha256(path.read_bytes()).hexdigest()}"
            else:
                out[rel] = f"{stat.S_IFMT(st.st_mode):o} {st.st_mode:o} {st.st_rdev}"
    return out


def host_paths_snapshot() -> dict[str, Any]:
    """The host's real counterparts of the paths the hostile images redirect (names only where
    a directory is big), to show nothing nvct writes ever lands on them."""
    out: dict[str, Any] = {}
    for directory in (f"/{LIBDIR}", "/usr/bin", "/lib/firmware", "/etc/ld.so.conf.d", "/dev"):
        with contextlib.suppress(OSError):
            out[directory] = sorted(
                n
                for n in os.listdir(directory)
                if n.startswith(_DRIVER_NAMES) or (n.startswith("nvidia") and n[6:].isdigit())
            )
    with contextlib.suppress(OSError):
        out["/etc/ld.so.conf.d(all)"] = sorted(os.listdir("/etc/ld.so.conf.d"))
    with contextlib.suppress(OSError):
        out["/etc/ld.so.cache"] = hashlib.sha256(Path("/etc/ld.so.cache").read_bytes()).hexdigest()
    return out


def _foreign(point: str) -> bool:
    """A mount another engine or another test session made: every escape these tests provoke
    aims at the canary, which lies under this session's own pytest directory, so a mount
    under another session's (``/tmp/pytest-of-root/pytest-N``) is that session's doing."""
    if any(f in point for f in _FOREIGN_MOUNTS):
        return True
    own = str(_OWN_BASETEMP) if _OWN_BASETEMP else ""
    pytest_root = str(Path(own).parent) + "/" if own else ""
    return bool(pytest_root) and point.startswith(pytest_root) and not point.startswith(own)


_OWN_BASETEMP: Path | None = None


@pytest.fixture(autouse=True)
def _own_basetemp(tmp_path_factory: pytest.TempPathFactory) -> None:
    global _OWN_BASETEMP  # noqa: PLW0603 - read by the helpers below, which take no fixtures
    _OWN_BASETEMP = tmp_path_factory.getbasetemp().resolve()


def host_mount_lines() -> list[str]:
    """The host's mount table, less other engines' and sessions' mounts (see _foreign)."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [ln for ln in lines if not _foreign(ln.split()[4])]


def mount_points(mountinfo: str) -> list[str]:
    return [ln.split()[4] for ln in mountinfo.splitlines() if ln.strip()]


@contextlib.contextmanager
def host_unchanged(*canaries: Path) -> Iterator[None]:
    """Assert on exit that the canaries, the host paths and the host mount table are as before."""
    before = [snapshot(c) for c in canaries]
    host_before = host_paths_snapshot()
    mounts_before = host_mount_lines()
    yield
    for canary, old in zip(canaries, before, strict=True):
        assert snapshot(canary) == old, f"host canary {canary} changed"
    assert host_paths_snapshot() == host_before
    mounts_after = host_mount_lines()
    assert len(mounts_after) == len(mounts_before), (
        "host mount table changed: "
        f"+{sorted(set(mounts_after) - set(mounts_before))} "
        f"-{sorted(set(mounts_before) - set(mounts_after))}"
    )


def make_canary(root: Path) -> Path:
    """A host directory tree with a marker in every place a hostile image points at."""
    for sub in ("libdir", "bin", "firmware", "ldconf", "dev", "usr/lib/x86_64-linux-gnu", "etc"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / "MARKER").write_text(f"canary {sub}\n")
    (root / "ldconf" / "canary.conf").write_text("/canary/lib\n")
    (root / "ld.so.cache").write_text("canary ld.so.cache\n")
    (root / "etc" / "ld.so.cache").write_text("canary ld.so.cache\n")
    (root / "etc" / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    return root


def observer_hook(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """A createRuntime hook that appends the container's mountinfo to the returned file."""
    script = tmp_path / "observer.py"
    script.write_text(OBSERVER)
    out = tmp_path / "container-mountinfo"
    hook = {"path": sys.executable, "args": [sys.executable, "-I", "-S", str(script), str(out)]}
    return hook, out


def assert_mounts_confined(mountinfo: str, rootfs: Path, canary: Path, host: list[str]) -> None:
    """Mounts in the container's namespace: none under the canary, and every mount point that
    the host does not have lies inside the rootfs."""
    host_points = set(mount_points("\n".join(host)))
    root = str(rootfs.resolve())
    for point in mount_points(mountinfo):
        assert not point.startswith(str(canary)), f"mount on the host canary: {point}"
        if point not in host_points and not _foreign(point):
            assert point == root or point.startswith(root + "/"), f"mount outside rootfs: {point}"


def hook_for(hook_path: Callable[[str], Path], via: str) -> Path:
    """The hook executable for a test's ``via``: ``hook-daemon`` is the native hook served
    by a shim daemon, ``hook-native`` the native hook as installed (no daemon), any other
    ``hook-*`` the Python hook."""
    return hook_path({"hook-daemon": "daemon", "hook-native": "native"}.get(via, "python"))


def assert_hook_path(config: Path, container_id: str, via: str) -> None:
    """The hook did its work (or refused) the way ``via`` names: in a daemon's worker for
    ``hook-daemon``, in its own process for the other hooks, not at all through the shim."""
    ran = hook_via(config.parent / "nvct.log", container_id)
    if via == "shim":
        assert ran == [], ran
    elif via == "hook-native":
        assert ran in (["native"], ["hook"]), ran  # which one: the tests say
    else:
        assert ran == expected_via("daemon" if via == "hook-daemon" else "python"), ran


def shim_env(config: Path) -> dict[str, str]:
    return {**os.environ, "NVCT_CONFIG": str(config)}


def dotdot_to(path: Path) -> str:
    """A relative symlink target that climbs far past any rootfs's / and then names ``path``."""
    return "../" * 40 + str(path).lstrip("/")


def replace_with_symlink(rootfs: Path, rel: str, target: str) -> None:
    path = rootfs / rel
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


# --- 1. symlinks out of the rootfs ------------------------------------------------------------

# (path in the image, canary subdirectory it points at)
ESCAPES = [
    (LIBDIR, "libdir"),
    ("usr/bin", "bin"),
    ("lib/firmware", "firmware"),
    ("etc/ld.so.conf.d", "ldconf"),
    ("etc/ld.so.cache", "ld.so.cache"),
    ("usr/lib", "usr/lib"),
]


def hook_alone(config: Path, *, walk: bool, hook: Path | None = None) -> dict[str, Any]:
    """The prestart hook as dockerd writes it for --gpus (run by plain runc, no shim);
    ``walk`` forces the O_NOFOLLOW walk that stands in for openat2 on old kernels (the Python
    hook's: the daemon's modules chose at import); ``hook``: the executable (default: the
    installed one, which runs the Python hook when no daemon answers)."""
    env = [f"NVCT_CONFIG={config}"] + (["NVCT_TEST_NO_OPENAT2=1"] if walk else [])
    return {
        "path": str(hook or NVCT_BIN / "nvidia-container-runtime-hook"),
        "args": ["nvidia-container-runtime-hook", "prestart"],
        "env": env,
    }


def prepare_natively_next(
    factory: BundleFactory, config: Path, script: str, env: list[str]
) -> None:
    """A benign container of the same kind first, through the shim, which writes the native
    entry: the next create of that kind is the launcher's native create (native.h)."""
    bundle = factory(["/bin/sh", "-c", script], env)
    result = run_runc(bundle, f"benign-{os.getpid()}", runtime=SHIM, env=shim_env(config))
    assert result.returncode == 0, result.stderr


def hook_natively_next(
    factory: BundleFactory, config: Path, hook: dict[str, Any], script: str, env: list[str]
) -> None:
    """A benign container of the same kind first, through the native hook, whose Python hook
    writes the hook's native entry: the next container of that kind is the native hook's own
    work (nativehook.h)."""
    bundle = factory(["/bin/sh", "-c", script], env, extra={"hooks": {"prestart": [hook]}})
    result = run_runc(bundle, f"benign-{os.getpid()}")
    assert result.returncode == 0, result.stderr


LD_CACHE_NOT_MERGED = (
    "the image's ld.so.cache cannot be merged (none, not a regular file, or entries the merge "
    "cannot match: ldconfig runs)"
)


def declined(config: Path, container_id: str) -> list[str]:
    """Why the native path left ``container_id`` to Python, as the Python side logged it."""
    events = [json.loads(line) for line in (config.parent / "nvct.log").read_text().splitlines()]
    return [
        e["native_declined"]
        for e in events
        if e.get("container_id") == container_id and "native_declined" in e
    ]


def created_via(config: Path, container_id: str) -> list[str]:
    """Who prepared ``container_id``'s create: the ``via`` of its container_prepared events."""
    log = (config.parent / "nvct.log").read_text().splitlines()
    events = [json.loads(line) for line in log]
    return [
        e["via"]
        for e in events
        if e.get("event") == "container_prepared" and e.get("container_id") == container_id
    ]


@pytest.mark.parametrize("via", ["shim", "native", "hook-openat2", "hook-daemon", "hook-native"])
@pytest.mark.parametrize("style", ["absolute", "dotdot", "double-slash"])
@pytest.mark.parametrize(("rel", "sub"), ESCAPES, ids=[e[0] for e in ESCAPES])
def test_symlink_out_of_rootfs_stays_inside(
    runc_bundle_factory: BundleFactory,
    container_id: str,
    nvct_config: Path,
    sim_driver: Any,
    tmp_path: Path,
    hook_path: Callable[[str], Path],
    rel: str,
    sub: str,
    style: str,
    via: str,
) -> None:
    """Through the shim (the O_NOFOLLOW walk), the launcher's native create and the hook alone
    (both openat2 RESOLVE_IN_ROOT), in its own process or in a shim daemon's worker."""
    canary = make_canary(tmp_path / "canary")
    target = {
        "absolute": str(canary / sub),
        "dotdot": dotdot_to(canary / sub),
        "double-slash": "/" + str(canary / sub),  # "//host/path": still absolute
    }[style]
    observer, seen = observer_hook(tmp_path)
    script = f"ls /{LIBDIR}/nvidia-driver /usr/bin; nvidia-smi -L; ls /lib/firmware/nvidia/*"
    hooks: dict[str, Any] = {"createRuntime": [observer]}
    if via not in ("shim", "native"):
        hooks["prestart"] = [hook_alone(nvct_config, walk=False, hook=hook_for(hook_path, via))]
    env = ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=all"]
    if via == "native":
        prepare_natively_next(runc_bundle_factory, nvct_config, script, env)
    if via == "hook-native":
        hook_natively_next(runc_bundle_factory, nvct_config, hooks["prestart"][0], script, env)
    bundle = runc_bundle_factory(["/bin/sh", "-c", script], env, extra={"hooks": hooks})
    rootfs = bundle / "rootfs"
    replace_with_symlink(rootfs, rel, target)
    host = host_mount_lines()
    runtime = SHIM if via in ("shim", "native") else "runc"
    with host_unchanged(canary):
        result = run_runc(bundle, container_id, runtime=runtime, env=shim_env(nvct_config))
    if result.returncode == 0:  # mounted inside the rootfs, where the link resolves in-root
        assert sim_driver.spec.gpus[1].uuid in result.stdout, result.stderr
        assert "libcuda.so.1" in result.stdout.split()
        assert "gsp_ga10x.bin" in result.stdout or "gsp" in result.stdout
        assert_mounts_confined(seen.read_text(), rootfs, canary, host)
    else:  # or refused, with one line saying why
        errors = [ln for ln in result.stderr.splitlines() if "nvct" in ln]
        assert errors and "error" in errors[0], result.stderr
    assert not seen.exists() or "MARKER" not in seen.read_text()
    if via == "native" and result.returncode == 0:
        # Where a write would leave the root the native create hands over, nothing written.
        # A directory to make through the image's dangling link (the libraries', binaries'
        # links: rootfs.h's make_dirs) and a symlinked ld.so.cache (merged_cache) are handed to
        # the shim, which makes the same links again its own way; the firmware's mount and the
        # ld.so.conf.d entry the native create does itself, inside the root.
        native = rel in ("lib/firmware", "etc/ld.so.conf.d")
        assert created_via(nvct_config, container_id) == ["native" if native else "shim"]
    assert_hook_path(nvct_config, container_id, "shim" if via == "native" else via)
    if via == "hook-native":
        # The native hook does all of it inside the root, making what the image's dangling
        # links name there as the Python hook does (rootfs.h make_link_targets); a symlinked
        # ld.so.cache (merged_cache declines) goes to the Python hook, before anything is done.
        ran = hook_via(nvct_config.parent / "nvct.log", container_id)
        assert ran == ["hook" if rel == "etc/ld.so.cache" else "native"], ran
        if rel == "etc/ld.so.cache":  # and the Python hook logs the native hook's reason
            assert declined(nvct_config, container_id) == [LD_CACHE_NOT_MERGED]


# (path in the image, canary entry it reaches through procfs): what ldconfig writes or reads.
PROC_ESCAPES = [
    ("etc", "etc"),
    ("etc/ld.so.cache", "etc/ld.so.cache"),
    ("etc/ld.so.conf.d", "ldconf"),
    (LIBDIR, "libdir"),
]


@pytest.mark.parametrize("via", ["shim", "hook-openat2", "hook-walk", "hook-daemon"])
@pytest.mark.parametrize(("rel", "sub"), PROC_ESCAPES, ids=[e[0] for e in PROC_ESCAPES])
def test_procfs_magic_link_out_of_rootfs(
    runc_bundle_factory: BundleFactory,
    container_id: str,
    nvct_config: Path,
    tmp_path: Path,
    hook_path: Callable[[str], Path],
    rel: str,
    sub: str,
    via: str,
) -> None:
    """``/etc -> /proc/1/root/<host dir>``: procfs's magic links are not symlinks a chroot
    confines. Once the runtime has mounted the container's /proc, pid 1 there is the runtime's
    init, whose root is the host's; a chrooted ldconfig following the link wrote the host's
    ld.so.cache (the CVE-2025-23267 class). Whatever becomes of the container, the host canary
    (reached by that very path) stays as it was."""
    canary = make_canary(tmp_path / "canary")
    hooks: dict[str, Any] = {}
    if via != "shim":
        hook = hook_for(hook_path, via)
        hooks["prestart"] = [hook_alone(nvct_config, walk=via == "hook-walk", hook=hook)]
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", "nvidia-smi -L"], ["NVIDIA_VISIBLE_DEVICES=0"], extra={"hooks": hooks}
    )
    replace_with_symlink(bundle / "rootfs", rel, "/proc/1/root" + str(canary / sub))
    with host_unchanged(canary):
        result = run_runc(
            bundle,
            container_id,
            runtime=SHIM if via == "shim" else "runc",
            env=shim_env(nvct_config),
        )
    if result.returncode != 0 and rel.startswith("etc"):
        # No way to write the container's ld.so.cache: refused in one line, nothing started.
        errors = [ln for ln in result.stderr.splitlines() if "nvct" in ln]
        assert errors and "error" in errors[0], result.stderr
    assert_hook_path(nvct_config, container_id, via)


RUNC_DEV_LINKS = {f"dev/{n}" for n in ("fd", "ptmx", "stdin", "stdout", "stderr")}


@pytest.mark.parametrize("via", ["hook-openat2", "hook-walk", "hook-daemon", "hook-native"])
@pytest.mark.parametrize("style", ["absolute", "dotdot"])
def test_dev_symlink_out_of_rootfs_hook_alone(
    runc_bundle_factory: BundleFactory,
    container_id: str,
    nvct_config: Path,
    sim_driver: Any,
    tmp_path: Path,
    hook_path: Callable[[str], Path],
    style: str,
    via: str,
) -> None:
    """--gpus path (plain runc, the hook mknods the device nodes): /dev -> the host canary."""
    canary = make_canary(tmp_path / "canary")
    target = str(canary / "dev") if style == "absolute" else dotdot_to(canary / "dev")
    hook = hook_alone(nvct_config, walk=via == "hook-walk", hook=hook_for(hook_path, via))
    observer, seen = observer_hook(tmp_path)
    if via == "hook-native":
        hook_natively_next(
            runc_bundle_factory, nvct_config, hook, "ls /dev; nvidia-smi -L",
            ["NVIDIA_VISIBLE_DEVICES=0"],
        )  # fmt: skip
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", "ls /dev; nvidia-smi -L"],
        ["NVIDIA_VISIBLE_DEVICES=0"],
        extra={"hooks": {"prestart": [hook], "createRuntime": [observer]}},
    )
    rootfs = bundle / "rootfs"
    replace_with_symlink(rootfs, "dev", target)
    host = host_mount_lines()
    before = snapshot(canary)
    with host_unchanged():
        result = run_runc(bundle, container_id)
    # runc 1.1 itself follows an image's /dev symlink when it makes /dev/fd, /dev/ptmx and
    # /dev/std* (a runc bug, outside nvct's reach); anything else in the canary is nvct's doing.
    after = {k: v for k, v in snapshot(canary).items() if k not in RUNC_DEV_LINKS}
    assert after == before
    if result.returncode == 0:
        assert "nvidia0" in result.stdout.split(), result.stderr
        assert sim_driver.spec.gpus[0].uuid in result.stdout
        assert_mounts_confined(seen.read_text(), rootfs, canary, host)
    else:
        assert "nvct-hook: error" in result.stderr or "error" in result.stderr
    assert_hook_path(nvct_config, container_id, via)
    if via == "hook-native":
        # Done by the native hook: the benign container before it wrote the entry anew even
        # where the session's cache held an older driver's (the full suite once handed this one
        # over: "the driver changed", an entry of the old driver kept under a cached order).
        ran = hook_via(nvct_config.parent / "nvct.log", container_id)
        assert ran == ["native"], (ran, declined(nvct_config, container_id))


# --- 2. a symlink swapped while the container starts --------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: bytes, b: bytes) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(_AT_FDCWD, a, _AT_FDCWD, b, _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class Flipper:
    """Atomically swaps ``path`` between a directory and a symlink to ``target``, non-stop."""

    def __init__(self, path: Path, target: str) -> None:
        self.path = bytes(path)
        self.other = bytes(path.with_name(path.name + ".swap"))
        os.symlink(target, self.other)
        self.stop = threading.Event()
        self.flips = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rng = random.Random(0)  # noqa: S311 - timing jitter, not secrets
        while not self.stop.is_set():
            _exchange(self.path, self.other)
            self.flips += 1
            # Mostly back-to-back swaps, sometimes a pause, so that both states are seen whole
            # by some hooks and torn by others.
            if rng.random() < 0.3:
                time.sleep(rng.random() * 0.004)

    def __enter__(self) -> Flipper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        if os.path.islink(self.path):  # leave the directory in place
            _exchange(self.path, self.other)


RACE_STARTS = 40


def runc_creates_files_through_races() -> bool:
    """runc before 1.1.14 creates a missing mount point through a path a racing writer can
    swap, leaving empty files or directories on the host (CVE-2024-45310): for every bind
    mount in a spec, docker's volumes included; nvct's driver mounts are among them."""
    out = subprocess.run(["runc", "--version"], capture_output=True, text=True, check=False)
    words = out.stdout.split()
    version = words[2] if len(words) > 2 and words[:2] == ["runc", "version"] else "0"
    numbers = tuple(int(n) for n in version.split("+")[0].split("-")[0].split(".")[:3])
    return numbers < (1, 1, 14)


def runc_leftovers(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """Entries new in ``after`` that runc's racy mount-point creation makes: empty, mode 0755,
    regular files (``os.OpenFile(path, O_CREATE, 0755)``) or directories (``MkdirAll``)."""
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    return {
        k: v
        for k, v in after.items()
        if k not in before and v in (f"file 100755 {empty}", f"{stat.S_IFDIR:o} 40755 0")
    }


@pytest.mark.slow
@pytest.mark.parametrize("rel", [LIBDIR, "usr/bin"], ids=["libdir", "usr-bin"])
def test_symlink_swapped_during_start_never_escapes(
    runc_bundle_factory: BundleFactory,
    nvct_config: Path,
    sim_driver: Any,
    tmp_path: Path,
    rel: str,
) -> None:
    """nvct's own writes (mount points, symlinks, ldconfig's cache) and every mount stay in
    the rootfs however the path flips. runc makes the driver's bind mounts, and runc before
    1.1.14 may leave empty files or directories behind on the host while it creates their
    mount points (its CVE-2024-45310): only those are allowed in the canary, only with such
    a runc."""
    canary = make_canary(tmp_path / "canary")
    before = snapshot(canary)
    observer, seen = observer_hook(tmp_path)
    bundle = runc_bundle_factory(
        ["/bin/true"],
        ["NVIDIA_VISIBLE_DEVICES=0"],
        extra={"hooks": {"createRuntime": [observer]}},
    )
    rootfs = bundle / "rootfs"
    host = host_mount_lines()
    outcomes: dict[str, int] = {"ok": 0, "refused": 0}
    errors: set[str] = set()
    with host_unchanged(), Flipper(rootfs / rel, dotdot_to(canary / "libdir")) as flipper:
        for i in range(RACE_STARTS):
            result = run_runc(
                bundle, f"nvct-race-{os.getpid()}-{i}", runtime=SHIM, env=shim_env(nvct_config)
            )
            if result.returncode == 0:
                outcomes["ok"] += 1
            else:
                outcomes["refused"] += 1
                # Failed cleanly, saying why: nvct (symlinks, ldconfig) or runc (its mounts).
                lines = [
                    ln
                    for ln in result.stderr.splitlines()
                    if "nvct-runtime: error" in ln or "level=error" in ln
                ]
                assert lines, result.stderr
                assert "internal error" not in lines[0] and "Traceback" not in result.stderr
                errors.add(lines[0])
        assert flipper.flips > 1000  # the race really ran
    assert outcomes["ok"] > 0, errors  # some containers start between swaps
    assert_mounts_confined(seen.read_text(), rootfs, canary, host)
    after = snapshot(canary)
    allowed = runc_leftovers(before, after)
    if allowed and not runc_creates_files_through_races():
        pytest.fail(f"runc >= 1.1.14 left files on the host: {allowed}")
    assert {k: v for k, v in after.items() if k not in allowed} == before
    assert (rootfs / (rel + ".swap")).is_symlink() and not (rootfs / rel).is_symlink()
    print(f"swap race: {outcomes}, {flipper.flips} flips, refusals: {sorted(errors)}")


# --- 4. no mount leaks -------------------------------------------------------------------------


@contextlib.contextmanager
def shared_mount(path: Path) -> Iterator[None]:
    """Make ``path`` a shared mount point on the host (as a systemd host's / is), so that mounts
    made under it in a container's namespace with shared root propagation come back here."""
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    try:
        subprocess.run(["mount", "--make-rshared", str(path)], check=True)
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


@pytest.mark.slow
@pytest.mark.parametrize("propagation", ["default", "shared"])
def test_host_mount_table_unchanged_after_many_starts(
    runc_bundle_factory: BundleFactory,
    nvct_config: Path,
    sim_driver: Any,
    tmp_path: Path,
    propagation: str,
) -> None:
    """100 GPU containers started and removed with runc's default (rslave) root; and 20 with a
    shared root on a shared host mount, as docker makes for an ``rshared`` volume on a systemd
    host, where a hook that mounts before making its mounts private leaks each one to the host
    (NVIDIA's NCT#697)."""
    shared = propagation == "shared"
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", "test -e /dev/nvidia0 && nvidia-smi -L >/dev/null"],
        ["NVIDIA_VISIBLE_DEVICES=0"],
        extra={"linux": {"rootfsPropagation": "shared"}} if shared else None,
    )
    starts = 20 if shared else 100
    with shared_mount(tmp_path) if shared else contextlib.nullcontext(), host_unchanged():
        for i in range(starts):
            result = run_runc(
                bundle, f"nvct-leak-{os.getpid()}-{i}", runtime=SHIM, env=shim_env(nvct_config)
            )
            assert result.returncode == 0, result.stderr


# --- 5. concurrent starts ---------------------------------------------------------------------


@pytest.mark.slow
def test_concurrent_starts_logs_whole_cache_not_torn(
    runc_bundle_factory: BundleFactory, sim_driver: Any, tmp_path: Path
) -> None:
    config = write_nvct_config(tmp_path / "conc" / "config.toml", sim_driver)
    cache = tmp_path / "conc" / "cache"
    log = tmp_path / "conc" / "nvct.log"
    shutil.rmtree(cache, ignore_errors=True)  # all 20 race to create it
    bundles = [
        runc_bundle_factory(["/bin/sh", "-c", "nvidia-smi -L"], [f"NVIDIA_VISIBLE_DEVICES={i % 4}"])
        for i in range(20)
    ]

    def start(i: int) -> subprocess.CompletedProcess[str]:
        return run_runc(
            bundles[i],
            f"nvct-conc-{os.getpid()}-{i}",
            runtime=SHIM,
            env=shim_env(config),
            timeout=120,
        )

    with host_unchanged(), ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(start, range(20)))
    for i, result in enumerate(results):
        assert result.returncode == 0, f"container {i}: {result.stderr}"
        assert sim_driver.spec.gpus[i % 4].uuid in result.stdout
    lines = log.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line whole
    events = [r["event"] for r in records]
    assert events.count("container_prepared") == 20
    assert "container_configured" not in events  # the shim did it all: no hook ran
    inventories = list(cache.glob("inventory-*.json"))
    assert len(inventories) == 1
    assert json.loads(inventories[0].read_bytes())["inventory"]
    assert not list(cache.glob(".*.tmp")), "temporary cache files left behind"
