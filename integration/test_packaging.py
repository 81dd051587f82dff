"""The .deb and the .rpm: built by ``make -C packaging deb rpm``, linted, installed, used, removed.

- Both packages build (once per session, under packaging/build/), lintian reports no error
  and rpmlint no error or warning (packaging/rpm/nvct.rpmlintrc filters say why), and they
  carry the same payload. nvct is architecture-specific: ``/usr/bin/nvct-runtime`` is the
  native launcher (an ELF executable), and the code id compiled into it is the one the
  packaged private tree computes, so the packaged shim daemon (``nvct-runtime-daemon.service``,
  shipped and wired to the package scripts) accepts it.
- The .deb installs on this machine (``dpkg -i``; CI is a throwaway root VM): the installed
  ``nvct-cli info`` sees the simulated driver's GPUs even with a hostile PYTHONPATH, and a real
  docker container runs through the installed ``/usr/bin/nvct-runtime`` and ``nvct-hook``, and
  the installed daemon prepares a GPU container's create for the installed launcher.
  An admin's edit of the conffile survives a reinstall, and ``dpkg -r`` keeps it (policy);
  ``dpkg -P`` then leaves nothing of nvct's behind (conffile, cache and log included), and
  the developer's own nvct (this interpreter's) still works. The purge runs in a finalizer,
  so a failing test never leaves the package installed.
- The .rpm installs with ``rpm --root DIR -i --nodeps`` where DIR is an overlay of this
  machine's root (so its scriptlets run with a real /bin/sh and python3), in a private mount
  namespace: %post byte-compiles, ``nvct-cli`` runs in the chroot, ``rpm -e`` removes it all.

Tests that install skip, saying why, when nvct (or NVIDIA's toolkit, which it replaces) is
already installed here: they would remove or clash with it.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from integration.conftest import NVCT_BIN, write_nvct_config
from integration.harness.dockerd import DockerdFactory
from integration.harness.images import ImageImporter
from integration.harness.shimd import ShimDaemon
from integration.harness.skips import need_binary, need_docker, need_root, require

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
BUILD = PACKAGING / "build"
VERSION = next(
    line.split('"')[1]
    for line in (ROOT / "nvct" / "_version.py").read_text().splitlines()
    if line.startswith("__version__")
)
BINARIES = ("nvct-cli", "nvct-hook", "nvct-runtime", "nvidia-container-runtime-hook")
PRIVATE = "usr/share/nvct/lib"
# Everything both formats must install (paths without the leading /).
EXPECTED = {
    "etc/nvct/config.toml",
    *(f"usr/bin/{name}" for name in BINARIES),
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
}
HOOK_JSONS = {f"usr/share/containers/oci/hooks.d/{p.name}" for p in (ROOT / "hooks").glob("*.json")}
# Python launchers: run isolated (-I: no PYTHON* variables, user site or cwd; -S: no site).
PYTHON_LAUNCHERS = (
    "usr/bin/nvct-cli",
    "usr/bin/nvct-hook",
    "usr/libexec/nvct/nvct-runtime",
    "usr/libexec/nvct/nvct-runtime-daemon",
)
UNIT = "nvct-runtime-daemon.service"
UNIT_SOURCE = PACKAGING / UNIT
# Debian 12's debhelper installs units from /lib/systemd/system; rpm uses %{_unitdir}.
DEB_UNIT = f"lib/systemd/system/{UNIT}"
RPM_UNIT = f"usr/lib/systemd/system/{UNIT}"
DAEMON_SOCKET = Path("/run/nvct/shim.sock")
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


@pytest.fixture(scope="session")
def packages() -> Packages:
    """``make -C packaging deb rpm`` (downloads packaging/vendor.txt from PyPI once)."""
    missing = [
        f"{tool} (apt-get install {pkg})"
        for tool, pkg in BUILD_TOOLS.items()
        if shutil.which(tool) is None
    ]
    if missing:
        pytest.skip("packaging needs " + ", ".join(missing))
    probe = sh("/usr/bin/python3", "-c", "import flit_core, pip", check=False)
    if probe.returncode != 0:
        pytest.skip(
            "packaging needs flit_core and pip for /usr/bin/python3: "
            "apt-get install flit python3-pip"
        )
    done = sh("make", "-C", PACKAGING, "deb", "rpm", check=False)
    assert done.returncode == 0, (
        f"make -C packaging deb rpm failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    # nvct carries the native launcher, so it is built for this machine's architecture;
    # nvct-oci-hook (one JSON file) for all.
    deb_arch = sh("dpkg", "--print-architecture").stdout.strip()
    rpm_arch = sh("rpm", "--eval", "%{_arch}").stdout.strip()
    built = Packages(
        deb=BUILD / f"nvct_{VERSION}_{deb_arch}.deb",
        deb_hook=BUILD / f"nvct-oci-hook_{VERSION}_all.deb",
        rpm=BUILD / f"nvct-{VERSION}-1.{rpm_arch}.rpm",
        rpm_hook=BUILD / f"nvct-oci-hook-{VERSION}-1.noarch.rpm",
        rpm_arch=rpm_arch,
        build_log=done.stdout + done.stderr,
    )
    for path in (built.deb, built.deb_hook, built.rpm, built.rpm_hook):
        assert path.is_file(), f"make did not produce {path}"
    return built


# --- the .deb -------------------------------------------------------------------------------


def test_deb_lintian_has_no_errors(packages: Packages) -> None:
    done = sh(
        "lintian", "--fail-on", "error", "--info", packages.deb, packages.deb_hook, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [line for line in done.stdout.splitlines() if line.startswith("E:")]


def test_deb_payload(packages: Packages) -> None:
    paths = deb_paths(packages.deb)
    assert paths >= EXPECTED, sorted(EXPECTED - paths)
    assert payload(deb_paths(packages.deb_hook)) == HOOK_JSONS
    assert HOOK_JSONS, "hooks/ holds no OCI hook JSON"
    # No byte code from the build host: postinst compiles for the installed Python.
    assert not [p for p in paths if p.endswith(".pyc") or "__pycache__" in p]
    assert not [p for p in paths if p.startswith(f"{PRIVATE}/bin/")]
    # The conffile is the project's config/config.toml, byte for byte.
    assert (
        deb_member(packages.deb, "etc/nvct/config.toml")
        == (ROOT / "config/config.toml").read_bytes()
    )
    for hook in HOOK_JSONS:
        name = Path(hook).name
        assert deb_member(packages.deb_hook, hook) == (ROOT / "hooks" / name).read_bytes()
    conffiles = sh("dpkg-deb", "-I", packages.deb, "conffiles").stdout
    assert conffiles.split() == ["/etc/nvct/config.toml"], conffiles
    for launcher in PYTHON_LAUNCHERS:
        first = deb_member(packages.deb, launcher).split(b"\n", 1)[0]
        assert first == b"#!/usr/bin/python3 -IS", (launcher, first)
    # nvct-runtime is the native launcher, built to start the packaged shim and to ask the
    # daemon on its default socket.
    runtime = deb_member(packages.deb, "usr/bin/nvct-runtime")
    assert is_elf_executable(runtime), runtime[:64]
    assert b"/usr/libexec/nvct/nvct-runtime\0" in runtime
    assert bytes(DAEMON_SOCKET) + b"\0" in runtime
    assert DEB_UNIT in paths
    # Man pages exist and come from the CLI's help.
    cli_page = gzip.decompress(deb_member(packages.deb, "usr/share/man/man1/nvct-cli.1.gz"))
    assert b".SH OPTIONS" in cli_page and b"\\-\\-driver\\-root" in cli_page
    assert b"nvct\\-cli info" in cli_page


def test_deb_control_fields(packages: Packages) -> None:
    fields = sh(
        "dpkg-deb", "-f", packages.deb, "Architecture", "Depends", "Conflicts", "Replaces"
    ).stdout
    deb_arch = sh("dpkg", "--print-architecture").stdout.strip()
    assert f"Architecture: {deb_arch}" in fields
    assert "python3 (>= 3.10)" in fields
    assert "libc6" in fields  # ${shlibs:Depends}, for the native launcher
    assert "python3-" not in fields.replace("python3:any", "")  # nothing from the vendored tree
    for name in ("nvidia-container-toolkit", "nvidia-container-runtime-hook"):
        assert fields.count(name) == 2, fields  # Conflicts and Replaces
    hook = sh("dpkg-deb", "-f", packages.deb_hook, "Architecture", "Depends").stdout
    assert "Architecture: all" in hook and f"nvct (>= {VERSION})" in hook, hook
    scripts = sh("dpkg-deb", "-I", packages.deb, "postinst").stdout
    assert "nvct-cli configure" in scripts and "py3compile" in scripts
    assert "daemon.json" not in scripts
    # The daemon is enabled and started on installation and restarted on upgrade (so that it
    # runs the new code); prerm stops it on removal. No other unit is touched.
    assert f"deb-systemd-helper enable '{UNIT}'" in scripts
    assert "_dh_action=restart" in scripts and f"deb-systemd-invoke $_dh_action '{UNIT}'" in scripts
    prerm = sh("dpkg-deb", "-I", packages.deb, "prerm").stdout
    assert f"deb-systemd-invoke stop '{UNIT}'" in prerm
    postrm = sh("dpkg-deb", "-I", packages.deb, "postrm").stdout
    assert "/var/cache/nvct" in postrm and "/var/log/nvct.log" in postrm
    assert f"deb-systemd-helper purge '{UNIT}'" in postrm
    for script in (scripts, prerm, postrm):
        units = re.findall(r"deb-systemd-(?:helper|invoke) [^'\n]*'([^'\n]+)'", script)
        assert set(units) <= {UNIT}, units


def test_daemon_unit(packages: Packages) -> None:
    """Both formats ship packaging/nvct-runtime-daemon.service, which runs the packaged daemon
    in the host's mount namespace and lets in-flight creates finish when it stops."""
    text = deb_member(packages.deb, DEB_UNIT)
    assert text == UNIT_SOURCE.read_bytes()
    unit = unit_settings(text.decode())
    assert unit["Service.ExecStart"] == ["/usr/libexec/nvct/nvct-runtime-daemon"]
    assert unit["Service.Type"] == ["simple"]
    assert unit["Service.KillMode"] == ["mixed"]
    assert unit["Service.Restart"] == ["on-failure"]
    assert unit["Install.WantedBy"] == ["multi-user.target"]
    assert unit["Unit.Documentation"] == ["man:nvct-runtime(1)"]
    assert set(unit["Unit.Before"][0].split()) == {
        "containerd.service",
        "docker.service",
        "crio.service",
    }
    # The daemon declines callers in another mount namespace, and /run/nvct is not the unit's.
    sandboxing = {"PrivateTmp", "PrivateMounts", "ProtectSystem", "ProtectHome", "RootDirectory"}
    assert not [k for k in unit if k.split(".", 1)[1] in sandboxing | {"RuntimeDirectory"}]
    # The page it names documents the daemon.
    page = gzip.decompress(deb_member(packages.deb, "usr/share/man/man1/nvct-runtime.1.gz"))
    assert rb"nvct\-runtime\-daemon.service" in page


@pytest.mark.parametrize("fmt", ["deb", "rpm"])
def test_launcher_carries_the_packaged_trees_code_id(
    packages: Packages, fmt: str, tmp_path: Path
) -> None:
    """The code id compiled into /usr/bin/nvct-runtime is the one the packaged private tree
    computes, which is what the packaged daemon checks: it accepts the packaged launcher."""
    if fmt == "deb":
        root = extract_deb(packages.deb, tmp_path / "root")
    else:
        root = extract_rpm(packages.rpm, tmp_path / "root")
    launcher = (root / "usr/bin/nvct-runtime").read_bytes()
    assert is_elf_executable(launcher)
    assert compiled_code_ids(launcher) == [tree_code_id(root / PRIVATE)]
    unit = root / (DEB_UNIT if fmt == "deb" else RPM_UNIT)
    assert unit.read_bytes() == UNIT_SOURCE.read_bytes()


# --- the .rpm -------------------------------------------------------------------------------


def test_rpmlint_is_clean(packages: Packages) -> None:
    require(need_binary("rpmlint"))
    done = sh(
        "rpmlint",
        "-c",
        PACKAGING / "rpm/rpmlint.toml",
        "-r",
        PACKAGING / "rpm/nvct.rpmlintrc",
        packages.rpm,
        packages.rpm_hook,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 errors, 0 warnings" in done.stdout, done.stdout


def test_rpm_payload_matches_deb(packages: Packages) -> None:
    rpm_files = rpm_paths(packages.rpm)
    deb_files = deb_paths(packages.deb)

    assert payload(rpm_files) == payload(deb_files)
    assert RPM_UNIT in rpm_files
    assert rpm_paths(packages.rpm_hook) == HOOK_JSONS
    arch = "%{ARCH}\n"
    assert sh("rpm", "-qp", "--qf", arch, packages.rpm).stdout.strip() == packages.rpm_arch
    assert sh("rpm", "-qp", "--qf", arch, packages.rpm_hook).stdout.strip() == "noarch"
    requires = sh("rpm", "-qp", "--requires", packages.rpm).stdout.split("\n")
    assert "/usr/bin/python3" in requires
    assert [r for r in requires if r.startswith("libc.so.6")]  # the native launcher's
    # systemd's scriptlets: preset on installation, disable and stop on erase, restart after
    # an upgrade (so that the daemon runs the new code).
    scripts = sh("rpm", "-qp", "--scripts", packages.rpm).stdout
    assert UNIT in scripts and "daemon.json" not in scripts
    assert re.search(r"(preset|install-system-units) [^\n]*" + re.escape(UNIT), scripts)
    assert re.search(r"(try-restart|mark-restart-system-units) [^\n]*" + re.escape(UNIT), scripts)
    assert sh("rpm", "-qp", "--conflicts", packages.rpm).stdout.split() == [
        "nvidia-container-runtime-hook",
        "nvidia-container-toolkit",
    ]
    config = sh("rpm", "-qp", "--configfiles", packages.rpm).stdout.split()
    assert config == ["/etc/nvct/config.toml"]
    provides = sh("rpm", "-qp", "--provides", packages.rpm).stdout
    assert "bundled(python3dist(click))" in provides


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
mkdir -p "$root/var/cache/nvct" && touch "$root/var/cache/nvct/inventory-x.json"
echo "=== erase"
rpm --root "$root" -e nvct-oci-hook nvct 2>&1
echo "=== left"
for f in usr/bin/nvct-cli usr/share/nvct etc/nvct var/cache/nvct \
         usr/lib/systemd/system/nvct-runtime-daemon.service \
         etc/systemd/system/multi-user.target.wants/nvct-runtime-daemon.service \
         usr/share/containers/oci/hooks.d/oci-nvct-hook.json; do
    if [ -e "$root/$f" ]; then echo "$f"; fi
done
echo "=== end"
"""


def sections(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    current = "preamble"
    for line in text.splitlines():
        if line.startswith("=== "):
            current = line[4:]
            found[current] = []
        else:
            found.setdefault(current, []).append(line)
    return found


def test_rpm_installs_into_a_root_and_its_scripts_run(packages: Packages, tmp_path: Path) -> None:
    require(need_root(), need_binary("unshare"), need_binary("chroot"))
    if "overlay" not in Path("/proc/filesystems").read_text():
        pytest.skip("needs overlayfs (modprobe overlay) to give rpm --root a root with /bin/sh")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    done = sh(
        "unshare",
        "-m",
        "sh",
        "-c",
        RPM_ROOT_SCRIPT,
        "rpm-root",
        scratch,
        packages.rpm,
        packages.rpm_hook,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = sections(done.stdout)
    assert out.get("end") == [], done.stdout + done.stderr
    # %post ran: a first installation points at the explicit configure step...
    assert any("nvct-cli configure --runtime docker" in line for line in out["install"])
    installed = {line.removeprefix("./") for line in out["upper"]}
    wanted = EXPECTED | HOOK_JSONS | {RPM_UNIT}
    assert installed >= wanted, sorted(wanted - installed)
    # ...and byte-compiled the private tree for the installed python3.
    assert any(p.startswith(f"{PRIVATE}/nvct/__pycache__/") for p in installed)
    assert f"nvct-{VERSION}-1.{packages.rpm_arch}" in out["query"]
    assert f"nvct-oci-hook-{VERSION}-1.noarch" in out["query"] and "verified" in out["query"]
    assert out["run"] == [f"nvct-cli, version {VERSION}"]
    # rpm -e removed every file, %preun the byte code, %postun the cache.
    assert out["left"] == []


# --- installing the .deb on this machine ----------------------------------------------------


def dpkg_installed(name: str) -> bool:
    done = sh("dpkg-query", "-W", "-f", "${Status}", name, check=False)
    return done.returncode == 0 and "installed" in done.stdout.split()


@dataclass
class Installed:
    packages: Packages
    paths: set[str]
    existed_before: set[str]
    log_created: bool
    run_dir_existed: bool


def purge() -> subprocess.CompletedProcess[str]:
    return sh("dpkg", "-P", "nvct-oci-hook", "nvct", check=False)


@pytest.fixture(scope="module")
def installed_deb(packages: Packages) -> Iterator[Installed]:
    """The .deb packages installed with dpkg -i; purged afterwards whatever happened."""
    require(need_root(), need_binary("dpkg"))
    for name in ("nvct", "nvct-oci-hook", "nvidia-container-toolkit"):
        if dpkg_installed(name):
            pytest.skip(f"{name} is installed on this machine; the test would replace and purge it")
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


def test_installed_deb_is_complete(installed_deb: Installed) -> None:
    listed = set(sh("dpkg", "-L", "nvct").stdout.split())
    assert {"/" + p for p in EXPECTED} <= listed
    # postinst byte-compiled the private tree for this machine's python3.
    assert list(Path("/usr/share/nvct/lib/nvct/__pycache__").glob("*.pyc"))
    status = sh("dpkg", "--verify", "nvct", "nvct-oci-hook", check=False)
    assert status.returncode == 0, status.stdout + status.stderr
    # The installed unit is valid as systemd reads it, ExecStart included (its man page is in
    # EXPECTED; --man=no: man-db may be missing).
    if shutil.which("systemd-analyze") is not None:
        verify = sh("systemd-analyze", "verify", "--man=no", f"/{DEB_UNIT}", check=False)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert UNIT not in verify.stderr, verify.stderr


def test_installed_cli_info_on_the_simulated_driver(
    installed_deb: Installed, sim_driver: Any, tmp_path: Path
) -> None:
    # A hostile PYTHONPATH and working directory: -I -S must keep both out of the launcher.
    evil = tmp_path / "evil"
    evil.mkdir()
    for module in ("click.py", "nvct.py", "structlog.py", "sitecustomize.py"):
        (evil / module).write_text("raise SystemExit('imported from PYTHONPATH or cwd')\n")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(evil), "PYTHONHOME": ""}
    env["PYTHONSTARTUP"] = str(evil / "click.py")
    done = sh(
        "/usr/bin/nvct-cli",
        "--driver-root",
        sim_driver.driver_root,
        "--dev-root",
        sim_driver.dev_root,
        "--proc-root",
        sim_driver.proc_root,
        "info",
        cwd=evil,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    uuids = [gpu.uuid for gpu in sim_driver.spec.gpus]
    assert [line.split()[-1] for line in done.stdout.splitlines() if "UUID:" in line] == uuids


def test_installed_runtime_runs_a_docker_container(
    installed_deb: Installed,
    sim_driver: Any,
    dockerd_factory: DockerdFactory,
    import_glibc_image: ImageImporter,
    tmp_path: Path,
) -> None:
    require(need_docker())
    # Default hook command: the installed shim's own Python, isolated, told where the
    # private tree is (no hook-path needed).
    config = write_nvct_config(tmp_path / "nvct" / "config.toml", sim_driver)
    dockerd = dockerd_factory(
        {
            "runtimes": {
                "nvidia": {
                    "path": "/usr/bin/nvct-runtime",
                    "runtimeArgs": ["--nvct-config", str(config)],
                }
            }
        }
    )
    try:
        image = import_glibc_image(dockerd)
        result = dockerd.docker(
            "run", "--rm", "--network", "none", "--runtime", "nvidia",
            "-e", "NVIDIA_VISIBLE_DEVICES=1", image, "nvidia-smi", "-L",
            check=False, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        gpus = sim_driver.spec.gpus
        assert gpus[1].uuid in result.stdout
        assert not [g.uuid for g in gpus if g.uuid in result.stdout and g is not gpus[1]]
        events = [
            json.loads(line) for line in (config.parent / "nvct.log").read_text().splitlines()
        ]
        assert "container_prepared" in {e.get("event") for e in events}
    finally:
        dockerd.stop()


def daemon_answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def test_installed_daemon_prepares_a_create_for_the_installed_launcher(
    installed_deb: Installed, sim_driver: Any, tmp_path: Path
) -> None:
    """The installed daemon accepts the installed launcher (the same code id): it prepares a
    GPU container's bundle, and the launcher execs the configured runtime. The packaged Python
    shim is not executable meanwhile, so a declined request (the launcher's fallback) fails."""
    unit_active = (
        shutil.which("systemctl") is not None
        and sh("systemctl", "is-active", "--quiet", UNIT, check=False).returncode == 0
    )
    running = daemon_answers(DAEMON_SOCKET)
    if running and not unit_active:
        pytest.skip(f"another shim daemon listens on {DAEMON_SOCKET}; stop it to run this test")
    # The packaged daemon started by systemd (postinst) serves as well as one started here.
    shimd = None
    if not running:
        daemon = ShimDaemon(
            ["/usr/libexec/nvct/nvct-runtime-daemon"], DAEMON_SOCKET, tmp_path / "shimd.log"
        )
        shimd = daemon.start()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    runc = bindir / "runc"
    runc.write_text('#!/bin/sh\necho "RUNC $*"\n')
    runc.chmod(0o755)
    config = write_nvct_config(
        tmp_path / "nvct" / "config.toml", sim_driver, **{"runtime.low-level": f'["{runc}"]'}
    )
    bundle = tmp_path / "bundle"
    (bundle / "rootfs/etc").mkdir(parents=True)
    spec = {
        "ociVersion": "1.0.2",
        "process": {"env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=1"], "args": ["sh"]},
        "root": {"path": "rootfs"},
        "mounts": [],
        "linux": {},
    }
    (bundle / "config.json").write_text(json.dumps(spec))
    shim = Path("/usr/libexec/nvct/nvct-runtime")
    shim.chmod(0o644)
    try:
        done = sh(
            "/usr/bin/nvct-runtime", "--nvct-config", config, "--root", "/r",
            "create", "--bundle", bundle, "ctr",
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, cwd=tmp_path, check=False,
        )  # fmt: skip
    finally:
        shim.chmod(0o755)
        if shimd is not None:
            shimd.stop()
    assert done.returncode == 0, "the daemon declined (the fallback shim cannot run): " + (
        done.stdout + done.stderr
    )
    assert done.stdout.strip() == f"RUNC --root /r create --bundle {bundle} ctr"
    prepared = json.loads((bundle / "config.json").read_text())
    devices = [d["path"] for d in prepared["linux"].get("devices", [])]
    assert "/dev/nvidia1" in devices and "/dev/nvidia0" not in devices, devices
    events = [json.loads(line) for line in (config.parent / "nvct.log").read_text().splitlines()]
    assert "container_prepared" in {e.get("event") for e in events}


def test_conffile_edit_survives_reinstall(installed_deb: Installed) -> None:
    config = Path("/etc/nvct/config.toml")
    config.write_text(config.read_text() + "# edited by the admin\n")
    done = sh("dpkg", "-i", installed_deb.packages.deb, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert config.read_text().endswith("# edited by the admin\n")


def test_purge_leaves_nothing_behind(installed_deb: Installed) -> None:
    # Removing keeps the conffile (policy); the program and its byte code go.
    done = sh("dpkg", "-r", "nvct-oci-hook", "nvct", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert Path("/etc/nvct/config.toml").exists()
    assert not os.path.lexists("/usr/bin/nvct-cli")
    assert not os.path.lexists("/usr/share/nvct/lib/nvct/__pycache__")
    done = purge()
    assert done.returncode == 0, done.stdout + done.stderr
    assert not dpkg_installed("nvct") and not dpkg_installed("nvct-oci-hook")
    left = sorted(
        p for p in installed_deb.paths - installed_deb.existed_before if os.path.lexists("/" + p)
    )
    assert left == []
    for path in ("/etc/nvct", "/var/cache/nvct", "/usr/share/nvct", "/usr/libexec/nvct"):
        assert not os.path.lexists(path), f"{path} survived the purge"
    # deb-systemd-helper's enable symlink and state, and the daemon's empty /run/nvct, go too.
    assert not os.path.lexists(f"/etc/systemd/system/multi-user.target.wants/{UNIT}")
    assert not os.path.lexists(f"/var/lib/systemd/deb-systemd-helper-enabled/{UNIT}.dsh-also")
    if not installed_deb.run_dir_existed:
        assert not os.path.lexists(DAEMON_SOCKET.parent)
    if installed_deb.log_created:
        assert not os.path.lexists("/var/log/nvct.log")
    # The developer's nvct (this interpreter's, editable or not) is untouched.
    version = sh(sys.executable, "-m", "nvct.cli.main", "--version").stdout
    assert VERSION in version
    dev_cli = NVCT_BIN / "nvct-cli"
    if dev_cli.exists() and dev_cli != Path("/usr/bin/nvct-cli"):
        assert VERSION in sh(dev_cli, "--version").stdout
