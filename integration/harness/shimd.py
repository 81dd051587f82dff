"""A private nvct shim daemon (``nvct.runtime.launch.daemon``) for a test or the bench.

Started on its own socket, ready once that socket answers, stopped by its pid (SIGTERM, then
SIGKILL); the daemon removes its socket as it stops.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from integration.harness import HarnessError, tail

# How a --gpus / hooks.d prestart hook does its work: the Python hook in the hook's process,
# or the native hook handing it to a shim daemon's worker (conftest's ``hook_path`` fixture
# gives the executable for each).
HOOK_PATHS = ("python", "daemon")


class ShimDaemon:
    """``command`` (argv, or a shell-quoted string) runs the daemon's main; ``--socket`` is
    added."""

    def __init__(self, command: list[str] | str, socket_path: Path, log: Path) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        self.socket_path = socket_path
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> ShimDaemon:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [*self.argv, "--socket", str(self.socket_path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HarnessError(f"shim daemon exited {self.proc.returncode}: {self._log_tail()}")
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
                probe.connect(str(self.socket_path))
                return self
            time.sleep(0.05)
        self.stop()
        raise HarnessError(f"shim daemon not listening after {timeout:.0f} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return tail(self.log.read_text(errors="replace"))
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def served_hook(
    work: Path, python: str = sys.executable, *, native: bool = False
) -> tuple[ShimDaemon, Path]:
    """A shim daemon on a socket in ``work`` and the native prestart hook built to ask it
    (its Python fallback: nvct's hook on ``python``; ``native``: it does a kind of container
    done before itself, as installed); the caller stops the daemon."""
    from nvct.runtime.launch.build import build_native, hook_command

    shimd = ShimDaemon(
        [python, "-m", "nvct.runtime.launch.daemon"], work / "shim.sock", work / "shimd.log"
    ).start()
    hook = work / "nvidia-container-runtime-hook"
    try:
        build_native(hook, hook_command(), socket=str(shimd.socket_path), hook=True, native=native)
    except BaseException:
        shimd.stop()
        raise
    return shimd, hook


def hook_via(log: Path, container_id: str) -> list[str]:
    """How each prestart hook that configured ``container_id``, or failed to, did its work,
    from nvct's log: ``hook`` (the Python hook) or ``daemon`` (a shim daemon's worker for the
    native hook)."""
    import json

    ends = ("container_configured", "hook_failed", "hook_crashed")
    events = (json.loads(line) for line in log.read_text().splitlines() if line.strip())
    return [
        e["via"] for e in events if e.get("event") in ends and e.get("container_id") == container_id
    ]


def expected_via(how: str) -> list[str]:
    """``hook_via``'s answer for one start on the hook path ``how`` (of HOOK_PATHS)."""
    return [{"python": "hook", "daemon": "daemon"}[how]]
