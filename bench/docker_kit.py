"""docker's own programs, packed on a machine that has them, for one that has none.

The GPU machine a session is sometimes lent has runc but no docker, and reaches no package
archive; it takes up to 64 MiB of files along. ``python -m bench.docker_kit OUT`` packs this
host's dockerd, docker CLI, containerd and its runc shim into one xz tarball (~42 MB for
docker 20.10 and containerd 1.6), and ``python -m bench.gpus_goal --docker-kit OUT`` unpacks
it into its work directory and puts it first on PATH, so the goal bench's private dockerd
(and the containerd it starts) run from there. Nothing is installed on the host.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
from pathlib import Path

# What a private dockerd needs besides runc: itself, the CLI the bench drives it with, the
# containerd it starts (``--containerd`` unset) and containerd's runc shim.
PROGRAMS = ("dockerd", "docker", "containerd", "containerd-shim-runc-v2")


def pack(out: Path, programs: tuple[str, ...] = PROGRAMS) -> list[str]:
    """Write the programs found on PATH into the xz tarball ``out``; their paths."""
    found = []
    for name in programs:
        path = shutil.which(name)
        if path is None:
            raise SystemExit(f"bench.docker_kit: {name} is not on PATH (fix: install docker.io)")
        found.append(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:xz") as tar:
        for path in found:
            tar.add(Path(path).resolve(), arcname=f"bin/{Path(path).name}")
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
