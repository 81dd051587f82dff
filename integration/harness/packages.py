"""Building nvct's .deb and .rpm, reading what they carry, installing them, and removing them.

``build_packages`` runs ``make -C packaging deb rpm`` (once per session, under packaging/build/),
``build_debs`` only the .debs (the bench's packages path);
the readers take a package apart without installing it (``dpkg-deb``, ``rpm -qp``,
``rpm2archive``); ``install_debs`` installs the .debs on this machine and purges them whatever
happens, holding ``deb_install_lock`` (the packaging tests and the bench both install them);
``RPM_ROOT_SCRIPT`` installs the .rpms into an overlay of this machine's root.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import struct
import subprocess
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
BUILD = PACKAGING / "build"
VERSION = next(
    line.split('"')[1]
    for line in (ROOT / "nvct" / "_version.py").read_text().splitlines()
    if line.startswith("__version__")
)
BINARIES = (
    "nvct-cli",
    "nvct-hook",
    "nvct-cdi-hook",
    "nvct-runtime",
    "nvidia-container-runtime-hook",
    "nvct-device-plugin",
    "nvct-config-manager",
    "nvct-dra-plugin",
)
PRIVATE = "usr/share/nvct/lib"
# grpcio and msgspec (compiled for the target's Python), protobuf and typing_extensions: only the
# launchers of nvct-device-plugin, nvct-cli and nvct-config-manager append it to sys.path.
GRPC = "usr/lib/nvct/grpc"
# Everything both formats must install (paths without the leading /).
EXPECTED = {
    "etc/nvct/config.toml",
    *(f"usr/bin/{name}" for name in BINARIES),
    "usr/libexec/nvct/nvct-hook",
    "usr/libexec/nvct/nvct-cdi-hook",
    "usr/libexec/nvct/nvct-runtime",
    "usr/libexec/nvct/nvct-runtime-daemon",
    *(f"usr/share/man/man1/{name}.1.gz" for name in BINARIES),
    "usr/share/man/man5/nvct-config.toml.5.gz",
    f"{PRIVATE}/nvct/__init__.py",
    f"{PRIVATE}/nvct/hook/__main__.py",
    f"{PRIVATE}/click/__init__.py",
    f"{PRIVATE}/structlog/__init__.py",
    f"{PRIVATE}/elftools/__init__.py",
    f"{PRIVATE}/jsonschema/__init__.py",
    f"{PRIVATE}/tomlkit/__init__.py",
    f"{PRIVATE}/pynvml.py",
    f"{PRIVATE}/yaml/__init__.py",
    f"{GRPC}/grpc/__init__.py",
    f"{GRPC}/google/protobuf/__init__.py",
    f"{GRPC}/typing_extensions.py",
    # the Kubernetes API client (nvct-config-manager)
    f"{PRIVATE}/lightkube/__init__.py",
    f"{PRIVATE}/lightkube/resources/core_v1.py",
    f"{PRIVATE}/lightkube/resources/resource_v1.py",  # nvct-dra-plugin's ResourceClaims
    f"{PRIVATE}/httpx2/__init__.py",
    f"{PRIVATE}/anyio/__init__.py",
    f"{GRPC}/msgspec/__init__.py",
}
HOOK_JSONS = {f"usr/share/containers/oci/hooks.d/{p.name}" for p in (ROOT / "hooks").glob("*.json")}
# Python launchers: run isolated (-I: no PYTHON* variables, user site or cwd; -S: no site).
PYTHON_LAUNCHERS = (
    "usr/bin/nvct-cli",
    "usr/libexec/nvct/nvct-hook",
    "usr/libexec/nvct/nvct-cdi-hook",
    "usr/libexec/nvct/nvct-runtime",
    "usr/libexec/nvct/nvct-runtime-daemon",
    "usr/bin/nvct-device-plugin",
    "usr/bin/nvct-config-manager",
    "usr/bin/nvct-dra-plugin",
)
# What runs for every container (or keeps running for them): never looks into GRPC.
HOT_PATH = (
    "usr/bin/nvct-runtime",
    "usr/bin/nvct-hook",
    "usr/libexec/nvct/nvct-hook",
    "usr/bin/nvct-cdi-hook",
    "usr/libexec/nvct/nvct-cdi-hook",
    "usr/libexec/nvct/nvct-runtime",
    "usr/libexec/nvct/nvct-runtime-daemon",
)
UNIT = "nvct-runtime-daemon.service"
UNIT_SOURCE = PACKAGING / UNIT
# The CDI refresh (packaging/nvct-cdi-refresh.*): regenerate the spec when the driver changes.
REFRESH_PATH = "nvct-cdi-refresh.path"
REFRESH_SERVICE = "nvct-cdi-refresh.service"
# Debian 12's debhelper installs units from /lib/systemd/system; rpm uses %{_unitdir}.
DEB_UNIT = f"lib/systemd/system/{UNIT}"
RPM_UNIT = f"usr/lib/systemd/system/{UNIT}"
# The device plugin's unit (packaging/nvct-device-plugin.service): shipped, never enabled.
PLUGIN_UNIT = "nvct-device-plugin.service"
PLUGIN_UNIT_SOURCE = PACKAGING / PLUGIN_UNIT
MPS_UNIT = "nvct-mps-control.service"
DAEMON_SOCKET = Path("/run/nvct/shim.sock")
# dpkg's database is the host's: whoever installs nvct's .debs here (the packaging tests, the
# bench's packages path, from any checkout) holds this lock from the check that none is
# installed until the purge, so one never installs over or purges under another.
INSTALL_LOCK = Path("/run/lock/nvct-deb-install.lock")
# Debian packages the build needs, by the command they provide.
BUILD_TOOLS = {
    "dpkg-buildpackage": "dpkg-dev",
    "dh": "debhelper",
    "dh_python3": "dh-python",
    "rpmbuild": "rpm",
    "rpm2archive": "rpm2cpio",
    "gcc": "gcc",
    "lintian": "lintian",
    "make": "make",
}


def sh(*args: str | Path, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure the assertion shows its output."""
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, check=False, **kwargs
    )
    if check:
        assert done.returncode == 0, (
            f"{' '.join(map(str, args))} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
    return done


@dataclass(frozen=True)
class Packages:
    """The four package files ``make -C packaging deb rpm`` built, and what it printed."""

    deb: Path
    deb_hook: Path
    rpm: Path
    rpm_hook: Path
    rpm_arch: str
    build_log: str


def deb_paths(deb: Path) -> set[str]:
    """Regular files and symlinks in a .deb's payload (no leading /)."""
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as p:
        assert p.stdout is not None
        with tarfile.open(fileobj=p.stdout, mode="r|") as tar:
            return {m.name.removeprefix("./") for m in tar if not m.isdir()}


def deb_member(deb: Path, path: str) -> bytes:
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as p:
        assert p.stdout is not None
        with tarfile.open(fileobj=p.stdout, mode="r|") as tar:
            for member in tar:
                if member.name.removeprefix("./") == path:
                    handle = tar.extractfile(member)
                    assert handle is not None
                    return handle.read()
    raise AssertionError(f"{path} is not in {deb.name}")


def payload(paths: set[str]) -> set[str]:
    """What both formats install alike: docs and licenses live where each format puts them,
    dh_python3 adds its rtupdate hook, rpm its build-id links, and Debian 12 keeps units in
    /lib/systemd (the same directory once /usr is merged)."""
    return {
        "usr/" + p if p.startswith("lib/systemd/") else p
        for p in paths
        if not p.startswith(("usr/share/doc/", "usr/share/licenses/", "usr/share/lintian/"))
        and not p.startswith(("usr/share/python3/runtime.d/", "usr/lib/.build-id/"))
    }


def target_ext_suffix(python: str = "/usr/bin/python3") -> str:
    """The extension-module suffix of the packages' target interpreter (``.cpython-311-x86_64-
    linux-gnu.so``): the one grpcio's compiled module in GRPC must carry."""
    code = "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"
    return sh(python, "-I", "-c", code).stdout.strip()


def extract_deb(deb: Path, dest: Path) -> Path:
    sh("dpkg-deb", "-x", deb, dest)
    return dest


def extract_rpm(rpm: Path, dest: Path) -> Path:
    # rpm2archive (Debian's rpm2cpio package, which rpm depends on) writes the payload as a
    # tar.gz: no cpio needed.
    dest.mkdir(parents=True, exist_ok=True)
    with rpm.open("rb") as source:
        archive = subprocess.run(
            ["rpm2archive", "-"], stdin=source, capture_output=True, check=True
        )
    done = subprocess.run(
        ["tar", "-xzf", "-", "-C", str(dest)],
        input=archive.stdout,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dest


# ELF header layout by EI_CLASS (32/64-bit): e_phoff's struct format and offset, and the
# offset of e_phentsize (e_phnum follows it).
ELF_LAYOUT = {1: ("I", 28, 42), 2: ("Q", 32, 54)}
ET_EXEC, ET_DYN, PT_INTERP = 2, 3, 3


def is_elf_executable(data: bytes) -> bool:
    """An ELF program: ET_EXEC, or ET_DYN with an interpreter (a PIE, not a shared library)."""
    if data[:4] != b"\x7fELF" or data[4] not in ELF_LAYOUT or data[5] not in (1, 2):
        return False
    end = "<" if data[5] == 1 else ">"
    phoff_format, phoff_at, phentsize_at = ELF_LAYOUT[data[4]]
    (e_type,) = struct.unpack_from(end + "H", data, 16)
    (phoff,) = struct.unpack_from(end + phoff_format, data, phoff_at)
    phentsize, phnum = struct.unpack_from(end + "HH", data, phentsize_at)
    types = [struct.unpack_from(end + "I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    return e_type == ET_EXEC or (e_type == ET_DYN and PT_INTERP in types)


def compiled_code_ids(binary: bytes) -> list[str]:
    """The code id string constants in a native launcher (what ``strings`` would show)."""
    return [m.decode() for m in re.findall(rb"(?<![\x20-\x7e])[0-9a-f]{32}(?=\0)", binary)]


def tree_code_id(lib: Path) -> str:
    """``nvct.runtime.launch.code_id.code_id()`` as the nvct in private tree ``lib`` computes
    it: the installed daemon's view (its own module, over its own package)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import nvct.runtime.launch.code_id as c; "
        "assert c.__file__.startswith(sys.argv[1]), c.__file__; print(c.code_id())"
    )
    return sh("/usr/bin/python3", "-I", "-S", "-B", "-c", code, lib).stdout.strip()


def unit_settings(text: str) -> dict[str, list[str]]:
    """``Section.Key`` -> values of a systemd unit (comments and blank lines skipped)."""
    found: dict[str, list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, _, value = line.partition("=")
        found.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return found


def rpm_paths(rpm: Path) -> set[str]:
    """Files and symlinks an .rpm installs (no leading /), from its header."""
    out = sh("rpm", "-qp", "--qf", "[%{FILEMODES:perms} %{FILENAMES}\n]", rpm).stdout
    return {
        line.split(" ", 1)[1].lstrip("/") for line in out.splitlines() if not line.startswith("d")
    }


def need_build_tools() -> str | None:
    """Why the packages cannot be built here (as a skip reason), or None."""
    missing = [
        f"{tool} (apt-get install {pkg})"
        for tool, pkg in BUILD_TOOLS.items()
        if shutil.which(tool) is None
    ]
    if missing:
        return "packaging needs " + ", ".join(missing)
    probe = sh("/usr/bin/python3", "-c", "import flit_core, pip", check=False)
    if probe.returncode != 0:
        return (
            "packaging needs flit_core and pip for /usr/bin/python3: "
            "apt-get install flit python3-pip"
        )
    return None


@dataclass(frozen=True)
class Debs:
    """The two .deb files ``make -C packaging deb`` built."""

    deb: Path
    deb_hook: Path


def _debs() -> Debs:
    deb_arch = sh("dpkg", "--print-architecture").stdout.strip()
    return Debs(
        deb=BUILD / f"nvct_{VERSION}_{deb_arch}.deb",
        deb_hook=BUILD / f"nvct-oci-hook_{VERSION}_all.deb",
    )


def build_debs() -> Debs:
    """``make -C packaging deb`` (the .debs alone: the bench installs them, ~1 min here)."""
    done = sh("make", "-C", PACKAGING, "deb", check=False)
    assert done.returncode == 0, (
        f"make -C packaging deb failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    built = _debs()
    for path in (built.deb, built.deb_hook):
        assert path.is_file(), f"make did not produce {path}"
    return built


def build_packages() -> Packages:
    """``make -C packaging deb rpm`` (downloads packaging/vendor.txt from PyPI once)."""
    done = sh("make", "-C", PACKAGING, "deb", "rpm", check=False)
    assert done.returncode == 0, (
        f"make -C packaging deb rpm failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    # nvct carries the native launcher, so it is built for this machine's architecture;
    # nvct-oci-hook (one JSON file) for all.
    debs = _debs()
    rpm_arch = sh("rpm", "--eval", "%{_arch}").stdout.strip()
    built = Packages(
        deb=debs.deb,
        deb_hook=debs.deb_hook,
        rpm=BUILD / f"nvct-{VERSION}-1.{rpm_arch}.rpm",
        rpm_hook=BUILD / f"nvct-oci-hook-{VERSION}-1.noarch.rpm",
        rpm_arch=rpm_arch,
        build_log=done.stdout + done.stderr,
    )
    for path in (built.deb, built.deb_hook, built.rpm, built.rpm_hook):
        assert path.is_file(), f"make did not produce {path}"
    return built


# ``unshare -m sh -c RPM_ROOT_SCRIPT rpm-root SCRATCH RPM...``: installs the rpms into an
# overlay of / (so the scriptlets find /bin/sh and python3), runs nvct-cli in it, erases them,
# and prints what each step left, in ``=== name`` sections (see ``sections``).
RPM_ROOT_SCRIPT = r"""
set -eu
# Private mount namespace (unshare -m): every mount below disappears with this shell.
mount --make-rprivate /
scratch=$1; shift
mount -t tmpfs nvct-rpm-test "$scratch"
mkdir "$scratch/upper" "$scratch/work" "$scratch/root"
root=$scratch/root
mount -t overlay overlay -o "lowerdir=/,upperdir=$scratch/upper,workdir=$scratch/work" "$root"
mount --rbind /dev "$root/dev"
mount -t proc proc "$root/proc"
mount -t tmpfs tmpfs "$root/tmp"
rm -rf "$root/var/cache/nvct" "$root/etc/nvct"
rpm --root "$root" --initdb
echo "=== install"
rpm --root "$root" -i --nodeps "$@" 2>&1
echo "=== upper"
(cd "$scratch/upper" && find . ! -type d | sort)
echo "=== query"
rpm --root "$root" -q nvct nvct-oci-hook
rpm --root "$root" -V --nodeps nvct nvct-oci-hook && echo verified
echo "=== run"
chroot "$root" /usr/bin/nvct-cli --version
echo "=== plugin"
chroot "$root" /usr/bin/nvct-device-plugin --help | head -n 1
echo "=== configmanager"
# the packaged config-manager loads its API client (lightkube, httpx2, the grpc directory's
# msgspec) and says, as JSON lines, that no API server answers here
mkdir -p "$root/tmp/sa" "$root/tmp/configs"
echo t >"$root/tmp/sa/token" && echo nvct >"$root/tmp/sa/namespace"
cp /etc/ssl/certs/ca-certificates.crt "$root/tmp/sa/ca.crt"
touch "$root/tmp/configs/default"
KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=9 NVCT_SERVICE_ACCOUNT_DIR=/tmp/sa \
    timeout 10 chroot "$root" /usr/bin/nvct-config-manager --node-name n --oneshot \
    --config-file-srcdir /tmp/configs --config-file-dst /tmp/config.yaml 2>&1 |
    grep -o '"event": "api_retry"' | sort -u
echo "=== cdi"
# A YAML spec for the simulated driver ($SIM_ROOT, bound into the root) by the installed
# nvct-cli: the hook it names, and the devices cdi list reads back (PyYAML of the private tree).
if [ -n "${SIM_ROOT:-}" ]; then
    mkdir -p "$root$SIM_ROOT" "$root/tmp/cdi"
    mount --bind "$SIM_ROOT" "$root$SIM_ROOT"
    chroot "$root" /usr/bin/nvct-cli --driver-root "$SIM_ROOT" --dev-root "$SIM_ROOT" \
        --proc-root "$SIM_ROOT/proc" cdi generate --output /tmp/cdi/nvidia.yaml >/dev/null
    grep -o '"path": "[^"]*nvct-cdi-hook"' "$root/tmp/cdi/nvidia.yaml" | sort -u
    [ -x "$root/usr/bin/nvct-cdi-hook" ] && echo "hook installed"
    chroot "$root" /usr/bin/nvct-cli cdi list --spec-dir /tmp/cdi
    umount "$root$SIM_ROOT"
fi
mkdir -p "$root/var/cache/nvct" && touch "$root/var/cache/nvct/inventory-x.json"
echo "=== erase"
rpm --root "$root" -e nvct-oci-hook nvct 2>&1
echo "=== left"
for f in usr/bin/nvct-cli usr/share/nvct etc/nvct var/cache/nvct \
         usr/lib/systemd/system/nvct-runtime-daemon.service usr/lib/nvct \
         usr/bin/nvct-device-plugin usr/lib/systemd/system/nvct-device-plugin.service \
         etc/systemd/system/multi-user.target.wants/nvct-runtime-daemon.service \
         usr/share/containers/oci/hooks.d/oci-nvct-hook.json; do
    if [ -e "$root/$f" ]; then echo "$f"; fi
done
echo "=== end"
"""


def sections(text: str) -> dict[str, list[str]]:
    """RPM_ROOT_SCRIPT's output: the lines under each ``=== name`` header, by name."""
    found: dict[str, list[str]] = {}
    current = "preamble"
    for line in text.splitlines():
        if line.startswith("=== "):
            current = line[4:]
            found[current] = []
        else:
            found.setdefault(current, []).append(line)
    return found


def dpkg_installed(name: str) -> bool:
    done = sh("dpkg-query", "-W", "-f", "${Status}", name, check=False)
    return done.returncode == 0 and "installed" in done.stdout.split()


@dataclass
class Installed:
    """What ``install_debs`` installed, and what of it was on this machine before (the purge
    must remove the rest)."""

    packages: Packages | Debs
    paths: set[str]
    existed_before: set[str]
    log_created: bool
    run_dir_existed: bool


def purge() -> subprocess.CompletedProcess[str]:
    return sh("dpkg", "-P", "nvct-oci-hook", "nvct", check=False)


def need_no_installed_nvct() -> str | None:
    """Installing would replace and then purge an nvct (or NVIDIA toolkit) already here."""
    for name in ("nvct", "nvct-oci-hook", "nvidia-container-toolkit"):
        if dpkg_installed(name):
            return f"{name} is installed on this machine; the test would replace and purge it"
    return None


@contextmanager
def deb_install_lock(timeout: float = 900.0) -> Iterator[None]:
    """Hold ``INSTALL_LOCK`` (waiting up to ``timeout`` s for another install to end).

    Raises:
        TimeoutError: another holder kept it longer, named in the message.
    """
    INSTALL_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with INSTALL_LOCK.open("a+") as lock:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    lock.seek(0)
                    raise TimeoutError(
                        f"{INSTALL_LOCK} held for over {timeout:.0f} s by {lock.read().strip()!r}"
                        " (another nvct .deb install: the packaging tests or the bench); wait "
                        "for it to end"
                    ) from None
                time.sleep(1)
        lock.truncate(0)
        lock.write(f"pid {os.getpid()}\n")
        lock.flush()
        try:
            yield
        finally:
            lock.truncate(0)


@contextmanager
def install_debs(packages: Packages | Debs) -> Iterator[Installed]:
    """The .deb packages installed with dpkg -i; purged afterwards whatever happened. The
    caller holds ``deb_install_lock`` from its check that no nvct is installed."""
    paths = deb_paths(packages.deb) | deb_paths(packages.deb_hook)
    existed = {p for p in paths if os.path.lexists("/" + p)}
    run_dir_existed = DAEMON_SOCKET.parent.exists()
    log = Path("/var/log/nvct.log")
    log_created = False
    # A log left by the developer's own nvct: purge removes it, so it is put back afterwards.
    saved_log = log.read_bytes() if log.is_file() else None
    try:
        done = sh("dpkg", "-i", packages.deb, packages.deb_hook, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "nvct-cli configure --runtime docker" in done.stdout
        if not log.exists():
            # Stands for the log nvct-runtime writes at run time: purge must remove it.
            log.write_text('{"event": "test"}\n')
            log_created = True
        yield Installed(packages, paths, existed, log_created, run_dir_existed)
    finally:
        purge()
        if log_created and log.exists():
            log.unlink()
        if saved_log is not None and not log.exists():
            log.write_bytes(saved_log)
