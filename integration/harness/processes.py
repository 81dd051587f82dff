"""Stopping a daemon a test started, by its own Popen or its pid (never by name), with the
processes it started and the directory it ran in; waiting for what it writes."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

_MNT_DETACH = 2


def terminate(proc: subprocess.Popen[bytes], timeout: float = 15) -> int:
    """SIGTERM (unless it already exited), then SIGKILL after ``timeout``; its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Whether ``predicate`` held within ``timeout`` seconds, asked every 10 ms: for what
    nothing notifies of, such as a log's content."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def end_owned(pid: int, owns: Callable[[int], bool], term_timeout: float) -> bool:
    """SIGTERM ``pid``, then SIGKILL after ``term_timeout``, each only while ``owns(pid)``
    (a daemon's helper, checked by its command line: a pid can be reused); False when it
    survived SIGKILL."""
    for sig, wait in ((signal.SIGTERM, term_timeout), (signal.SIGKILL, 5.0)):
        if not owns(pid):
            return True
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and owns(pid):
            time.sleep(0.05)
    return not owns(pid)


def process_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an exited, unreaped process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rpartition(")")[2].split()[0]
    return state not in ("Z", "X")


def cmdline(pid: int) -> str:
    """``pid``'s command line, its arguments joined by spaces ("" once it is gone)."""
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def pids_naming(needle: str) -> list[int]:
    """Live processes (not this one) whose command line contains ``needle``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        if needle in cmdline(pid) and process_alive(pid):
            found.append(pid)
    return sorted(found)


def stop_daemon(
    proc: subprocess.Popen[bytes] | None,
    root: Path,
    timeout: float,
    error: Callable[[str], Exception],
    helper_timeout: float | None = None,
) -> None:
    """Stop a daemon a test started in its directory ``root`` (dockerd, containerd) and what
    it started: ``proc`` by SIGTERM (SIGKILL after ``timeout``), then, by pid, every process
    whose command line names ``root`` (a managed containerd, the runc shims: their paths are
    under it), each SIGTERM then SIGKILL after ``helper_timeout`` (default ``timeout``).

    Raises:
        the exception ``error`` makes of its message: a process survived SIGKILL.
    """
    if proc is not None:
        terminate(proc, timeout)
    needle = str(root)

    def owns(pid: int) -> bool:
        return process_alive(pid) and needle in cmdline(pid)  # a pid can be reused

    for pid in pids_naming(needle):
        if not end_owned(pid, owns, timeout if helper_timeout is None else helper_timeout):
            raise error(f"process {pid} ({cmdline(pid)}) survived SIGKILL")


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first."""
    prefix = str(root)
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")  # \040 etc. in mountinfo
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(points, key=lambda p: p.count("/"), reverse=True)


def remove_daemon_dir(root: Path, error: Callable[[str], Exception]) -> None:
    """Detach the mounts a stopped daemon left under ``root`` (deepest first), then remove it.

    Raises:
        the exception ``error`` makes of its message: a mount cannot be detached.
    """
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    for point in _mounts_under(root):
        if libc.umount2(point.encode(), _MNT_DETACH) != 0:
            raise error(f"cannot unmount {point}: {os.strerror(ctypes.get_errno())}")
    shutil.rmtree(root)
