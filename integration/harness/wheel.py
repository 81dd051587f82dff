"""nvct from its wheel in a fresh venv (the pip install path), for tests and the bench."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIP = [sys.executable, "-m", "pip"]


def build_wheel(out: Path) -> Path:
    """``pip wheel .`` of this checkout into ``out``; the wheel."""
    subprocess.run([*PIP, "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)], check=True)
    (wheel,) = out.glob("nvct-*.whl")
    return wheel


def install_wheel(wheel: Path, venv: Path) -> Path:
    """A fresh venv on the system's python3 holding ``wheel`` (``--no-deps``: its libraries
    come from this venv through a ``.pth``, as pip would have fetched them); its bin dir."""
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin/python3"
    subprocess.run(
        [*PIP, "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
    )
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = [p for p in site.getsitepackages() if "site-packages" in p]
    Path(purelib, "nvct-deps.pth").write_text("\n".join(deps) + "\n")
    return venv / "bin"


def requirements(name: str = "nvct") -> list[str]:
    """The distributions ``name`` needs at run time, itself excluded, with the extras its
    requirements ask for (lightkube's ``httpx2[http2,ws]``), from this venv's metadata: what
    pip would fetch with it."""
    from packaging.requirements import Requirement

    found: list[str] = []
    todo: list[tuple[str, frozenset[str]]] = [(name, frozenset())]
    asked: set[tuple[str, frozenset[str]]] = set()
    while todo:
        wanted, extras = todo.pop()
        dist = metadata.distribution(wanted)
        key = dist.metadata["Name"].lower()
        if (key, extras) in asked:
            continue
        asked.add((key, extras))
        if key not in found:
            found.append(key)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in {"", *extras}):
                todo.append((req.name, frozenset(req.extras)))
    return [n for n in found if n != name.lower()]


def copy_distributions(names: list[str], purelib: Path) -> None:
    """Each distribution's files (its RECORD) from this venv into ``purelib``."""
    for name in names:
        for file in metadata.distribution(name).files or []:
            source = Path(str(file.locate()))
            if source.is_file() and not str(file).startswith(".."):  # not its scripts in bin/
                target = purelib / str(file)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)


def install_as_user(wheel: Path, home: Path, uid: int) -> Path:
    """nvct installed from ``wheel`` by an ordinary user ``uid`` (no passwd entry needed) into a
    fresh venv in ``home`` (made theirs): the venv and ``pip install`` run as that user; its
    dependencies are copies of this venv's (what pip would fetch, readable wherever this
    checkout sits). Returns the venv's bin directory."""
    home.mkdir(parents=True, exist_ok=True)
    own = home / wheel.name
    shutil.copy2(wheel, own)
    for path in (home, own):
        os.chown(path, uid, uid)

    def as_user(*argv: str | Path) -> None:
        subprocess.run(
            argv, user=uid, group=uid, extra_groups=[], cwd=home, check=True, timeout=300,
            env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip

    venv = home / "venv"
    base = os.path.realpath(sys.executable)  # this venv's interpreter: the copies' ABI
    as_user(base, "-m", "venv", "--without-pip", venv)
    as_user(
        base, "-m", "pip", "--python", venv / "bin/python3", "install", "-q", "--no-deps",
        "--no-index", "--no-cache-dir", own,
    )  # fmt: skip
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    purelib = venv / "lib" / version / "site-packages"
    copy_distributions(requirements(), purelib)
    for path in purelib.rglob("*"):
        os.lchown(path, uid, uid)
    return venv / "bin"


def unused_uid(first: int = 64000) -> int:
    """A uid no account on this machine has: a new, ordinary user."""
    import pwd

    taken = {entry.pw_uid for entry in pwd.getpwall()}
    return next(uid for uid in range(first, first + 1000) if uid not in taken)
