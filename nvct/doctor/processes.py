"""Daemon processes from procfs: pid, owner, executable, arguments and start time."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

# A start time is boot time (whole seconds in /proc/stat) plus clock ticks: up to a second
# early. Config changes closer than this to a daemon's start are not called "after" it.
START_TIME_SLACK = 1.5


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """What doctor needs to know about a running daemon."""

    pid: int
    name: str
    uid: int
    exe: str
    argv: tuple[str, ...]
    start_time: float  # seconds since the epoch

    def option(self, *names: str) -> str | None:
        """The value of ``--name=value`` or ``--name value`` in the daemon's arguments."""
        args = self.argv[1:]
        for i, arg in enumerate(args):
            for name in names:
                if arg.startswith(name + "="):
                    return arg[len(name) + 1 :]
                if arg == name and i + 1 < len(args):
                    return args[i + 1]
        return None


def boot_time(proc: Path) -> float | None:
    """``btime`` of ``<proc>/stat``: the boot time in seconds since the epoch."""
    try:
        for line in (proc / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_info(proc: Path, pid: int) -> ProcessInfo | None:
    """Facts about one process, or None when it is gone or unreadable."""
    base = proc / str(pid)
    try:
        stat = (base / "stat").read_text()
        status = (base / "status").read_text()
        argv = tuple(
            a for a in (base / "cmdline").read_bytes().decode(errors="replace").split("\0")
        )
    except OSError:
        return None
    name = stat[stat.find("(") + 1 : stat.rfind(")")]
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        ticks = int(fields[19])  # field 22 (starttime), counted from the state field (3)
    except (IndexError, ValueError):
        return None
    uid = 0
    for line in status.splitlines():
        if line.startswith("Uid:"):
            uid = int(line.split()[1])
    try:
        exe = os.readlink(base / "exe")
    except OSError:
        exe = argv[0] if argv else ""
    btime = boot_time(proc) or 0.0
    start = btime + ticks / os.sysconf("SC_CLK_TCK")
    return ProcessInfo(pid, name, uid, exe, tuple(a for a in argv if a), start)


def find_processes(proc: Path, name: str) -> list[ProcessInfo]:
    """Live processes whose command name (``comm``) is ``name``, by pid."""
    pids = []
    for comm in proc.glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            if comm.read_text().strip() == name:
                pids.append(int(comm.parent.name))
    found = (process_info(proc, pid) for pid in sorted(pids))
    return [p for p in found if p is not None]


def pid_from_file(path: Path) -> int | None:
    """The pid written in a pidfile, or None."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
