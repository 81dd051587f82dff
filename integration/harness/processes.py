"""Stopping a daemon a test started, by its own Popen (never by name)."""

from __future__ import annotations

import signal
import subprocess


def terminate(proc: subprocess.Popen[bytes], timeout: float = 15) -> int:
    """SIGTERM (unless it already exited), then SIGKILL after ``timeout``; its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
