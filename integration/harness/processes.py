"""Stopping a daemon a test started, by its own Popen (never by name); waiting for what it
writes."""

from __future__ import annotations

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
