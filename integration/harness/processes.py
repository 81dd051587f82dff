"""Stopping a daemon a test started, by its own Popen or its pid (never by name); waiting
for what it writes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable


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
