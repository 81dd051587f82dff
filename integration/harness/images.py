"""Root filesystems for test containers, built from the host (no registry needed).

``busybox_rootfs``: static busybox and its applets, enough for ``/bin/sh``.
``glibc_rootfs``: that plus the host's glibc and a Debian-like linker setup (multiarch lib dirs,
``/etc/ld.so.conf.d``, an ``ld.so.cache`` made by the host's ``ldconfig -r``), so dynamically
linked programs run and the toolkit treats it as a Debian image.
``docker_import``: tar a rootfs (owner 0) into a private dockerd as an image.
"""

from __future__ import annotations

import io
import shutil
import struct
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from integration.harness import HarnessError, run_command

if TYPE_CHECKING:
    from integration.harness.dockerd import Dockerd

__all__ = [
    "BUSYBOX",
    "GLIBC_LIBRARIES",
    "GLIBC_TAG",
    "MULTIARCH",
    "ImageImporter",
    "busybox_rootfs",
    "copy_host_binary",
    "docker_import",
    "glibc_rootfs",
    "is_static_busybox",
    "rootfs_tar",
]

BUSYBOX = Path("/bin/busybox")
MULTIARCH = "x86_64-linux-gnu"
LOADER = "ld-linux-x86-64.so.2"
# The loader and libc are required; the others are stubs since glibc 2.34 but old binaries
# (and the NVIDIA libraries) still name them.
GLIBC_LIBRARIES = (
    LOADER,
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
)
_REQUIRED_LIBRARIES = (LOADER, "libc.so.6")
_HOST_LIBRARY_DIRS = (Path("/lib") / MULTIARCH, Path("/usr/lib") / MULTIARCH, Path("/lib64"))

_PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
_GROUP = "root:x:0:\nvideo:x:44:\nnogroup:x:65534:\n"
_LD_SO_CONF = "include /etc/ld.so.conf.d/*.conf\n"
_MULTIARCH_CONF = (
    f"# Multiarch support\n/usr/local/lib/{MULTIARCH}\n/lib/{MULTIARCH}\n/usr/lib/{MULTIARCH}\n"
)
_PT_INTERP = 3
GLIBC_TAG = "nvct-glibc:test"


class ImageImporter(Protocol):
    """The ``import_glibc_image`` fixture: make sure ``dockerd`` has the session's glibc rootfs
    as image ``tag`` (imported once per daemon; it survives restarts); return ``tag``."""

    def __call__(self, dockerd: Dockerd, tag: str = GLIBC_TAG) -> str: ...


def is_static_busybox(path: Path = BUSYBOX) -> bool:
    """Whether ``path`` is a 64-bit ELF without a program interpreter (statically linked)."""
    try:
        with path.open("rb") as f:
            header = f.read(64)
            if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
                return False
            (phoff,) = struct.unpack_from("<Q", header, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    return all(
        struct.unpack_from("<I", table, i * phentsize)[0] != _PT_INTERP for i in range(phnum)
    )


def busybox_rootfs(dest: Path, *, busybox: Path = BUSYBOX) -> Path:
    """Fill ``dest`` with static busybox, a link per applet in /bin, and a minimal /etc."""
    if not is_static_busybox(busybox):
        raise HarnessError(f"{busybox} is not a static busybox: apt-get install busybox-static")
    for sub in (
        "bin",
        "sbin",
        "usr/bin",
        "usr/sbin",
        "usr/local/bin",
        "etc",
        "root",
        "var",
        "run",
        "proc",
        "sys",
        "dev",
    ):
        (dest / sub).mkdir(parents=True, exist_ok=True)
    (dest / "tmp").mkdir(exist_ok=True)
    (dest / "tmp").chmod(0o1777)
    target = dest / "bin" / "busybox"
    shutil.copyfile(busybox, target)
    target.chmod(0o755)
    applets = run_command([str(busybox), "--list"]).stdout.split()
    for applet in applets:
        link = dest / "bin" / applet
        if applet == "busybox" or link.is_symlink() or link.exists():
            continue
        link.symlink_to("busybox")  # relative: right inside the container and from the host
    (dest / "etc" / "passwd").write_text(_PASSWD)
    (dest / "etc" / "group").write_text(_GROUP)
    return dest


def _host_library(name: str) -> Path | None:
    for directory in _HOST_LIBRARY_DIRS:
        candidate = directory / name
        if candidate.exists():
            return candidate.resolve()
    return None


def glibc_rootfs(dest: Path, *, busybox: Path = BUSYBOX) -> Path:
    """``busybox_rootfs`` plus the host's glibc, Debian-style, with a fresh ``ld.so.cache``.

    Needs root: ``ldconfig -r`` chroots into ``dest``.
    """
    busybox_rootfs(dest, busybox=busybox)
    libdir = dest / "lib" / MULTIARCH
    libdir.mkdir(parents=True, exist_ok=True)
    for name in GLIBC_LIBRARIES:
        source = _host_library(name)
        if source is None:
            if name in _REQUIRED_LIBRARIES:
                searched = ", ".join(map(str, _HOST_LIBRARY_DIRS))
                raise HarnessError(f"host has no {name} in {searched}")
            continue
        shutil.copyfile(source, libdir / name)  # the real file, not the host's symlink
        (libdir / name).chmod(0o755)
    (dest / "lib64").mkdir(exist_ok=True)
    loader_link = dest / "lib64" / LOADER
    if not loader_link.is_symlink():
        loader_link.symlink_to(f"/lib/{MULTIARCH}/{LOADER}")
    (dest / "usr" / "lib" / MULTIARCH).mkdir(parents=True, exist_ok=True)
    (dest / "usr" / "local" / "lib" / MULTIARCH).mkdir(parents=True, exist_ok=True)
    (dest / "etc" / "debian_version").write_text("12.0\n")
    (dest / "etc" / "ld.so.conf").write_text(_LD_SO_CONF)
    (dest / "etc" / "ld.so.conf.d").mkdir(exist_ok=True)
    (dest / "etc" / "ld.so.conf.d" / f"{MULTIARCH}.conf").write_text(_MULTIARCH_CONF)
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    run_command([ldconfig, "-r", str(dest)])
    if not (dest / "etc" / "ld.so.cache").is_file():
        raise HarnessError(f"{ldconfig} -r {dest} wrote no /etc/ld.so.cache")
    return dest


def copy_host_binary(rootfs: Path, source: Path, dest: str | None = None) -> str:
    """Copy a host program into ``rootfs`` (default ``/usr/local/bin/<name>``); return its path
    inside the container. Its libraries must already be there (``glibc_rootfs`` has libc)."""
    inside = dest or f"/usr/local/bin/{source.name}"
    target = rootfs / inside.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source.resolve(), target)
    target.chmod(0o755)
    return inside


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def rootfs_tar(rootfs: Path) -> bytes:
    """``rootfs`` as an uncompressed tar stream, every entry owned by 0:0."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(rootfs, arcname=".", filter=_as_root)
    return buffer.getvalue()


def docker_import(dockerd: Dockerd, rootfs: Path, tag: str, *, changes: Sequence[str] = ()) -> str:
    """Import ``rootfs`` into ``dockerd`` as image ``tag`` (``docker import -``); return its id.

    ``changes`` are Dockerfile instructions passed as ``--change`` (e.g. ``ENV FOO=1``).
    """
    if not rootfs.is_dir():
        raise HarnessError(f"no rootfs at {rootfs}")
    options = [arg for change in changes for arg in ("--change", change)]
    done = dockerd.docker("import", *options, "-", tag, input=rootfs_tar(rootfs), timeout=300)
    image_id = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if not image_id.startswith("sha256:"):
        raise HarnessError(f"docker import {tag}: unexpected output {done.stdout!r}")
    return image_id
