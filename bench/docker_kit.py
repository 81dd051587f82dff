"""docker's own programs, packed on a machine that has them, for one that has none.

The GPU machine a session is sometimes lent has runc but no docker, and reaches no package
archive; it takes up to 64 MiB of files along. ``python -m bench.docker_kit OUT`` packs this
host's dockerd, docker CLI, containerd, its runc shim and runc into one xz tarball (~36 MB for
docker 20.10 and containerd 1.6 at xz's strongest preset), and ``python -m bench.gpus_goal
--docker-kit OUT`` unpacks it into its work directory and puts it first on PATH, so the goal
bench's private dockerd (and the containerd it starts) run from there. Nothing is installed on
the host. The shared libraries the programs link, besides glibc's own, ride along under
``lib/`` for a host that lacks one (dockerd's libdevmapper, runc's libseccomp): ``unpack``
leaves them out, and where the host lacks one, the caller puts it on the loader's path.
"""

from __future__ import annotations

import argparse
import lzma
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

# What a private dockerd needs besides runc: itself, the CLI the bench drives it with, the
# containerd it starts (``--containerd`` unset), containerd's runc shim, and runc.
PROGRAMS = ("dockerd", "docker", "containerd", "containerd-shim-runc-v2", "runc")
# glibc's own: any host that runs the programs has these.
GLIBC = ("linux-vdso", "libc.so", "libm.so", "ld-linux", "libpthread", "libdl.so", "librt.so")


def libraries(program: str) -> list[Path]:
    """The shared libraries ``program`` links, glibc's own left out (``ldd``'s resolved paths;
    none for a static program)."""
    ldd = shutil.which("ldd") or "/usr/bin/ldd"
    if not Path(ldd).exists():
        return []  # no loader's lister: the kit goes without them
    done = subprocess.run([ldd, program], capture_output=True, text=True, check=False)
    found = []
    for line in done.stdout.splitlines():
        name, _, where = line.strip().partition(" => ")
        path = where.split(" (")[0].strip()
        if path.startswith("/") and not name.startswith(GLIBC):
            found.append(Path(path))
    return found


def pack(out: Path, programs: tuple[str, ...] = PROGRAMS) -> list[str]:
    """Write the programs found on PATH into the xz tarball ``out``; their paths."""
    found = []
    for name in programs:
        path = shutil.which(name)
        if path is None:
            raise SystemExit(f"bench.docker_kit: {name} is not on PATH (fix: install docker.io)")
        found.append(path)
    libs = {lib.name: lib for path in found for lib in libraries(path)}
    out.parent.mkdir(parents=True, exist_ok=True)
    # the strongest preset: the kit shares a lent machine's 64 MiB with the tree and wheels
    with (
        lzma.LZMAFile(out, "w", preset=9 | lzma.PRESET_EXTREME) as xz,
        tarfile.open(fileobj=xz, mode="w|") as tar,
    ):
        for path in found:
            tar.add(Path(path).resolve(), arcname=f"bin/{Path(path).name}")
        for name, lib in sorted(libs.items()):
            tar.add(lib.resolve(), arcname=f"lib/{name}")
    return found


def unpack(kit: Path, dest: Path) -> Path:
    """Extract the kit into ``dest``; the directory to put first on PATH. Only regular files
    named by ``PROGRAMS`` are taken, whatever else the tarball holds."""
    bindir = dest / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(kit, "r:xz") as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if not member.isfile() or member.name != f"bin/{name}" or name not in PROGRAMS:
                continue
            source = tar.extractfile(member)
            if source is None:
                continue
            target = bindir / name
            with source, target.open("wb") as f:
                shutil.copyfileobj(source, f)
            target.chmod(0o755)
    missing = [name for name in PROGRAMS if not (bindir / name).is_file()]
    if missing:
        raise SystemExit(f"bench.docker_kit: {kit} lacks {', '.join(missing)}")
    return bindir


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.docker_kit")
    parser.add_argument("out", type=Path, help="the tarball to write (.tar.xz)")
    args = parser.parse_args()
    for path in pack(args.out):
        print(f"packed {path}")
    print(f"written: {args.out} ({args.out.stat().st_size >> 20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
