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
import time
from pathlib import Path

from integration.harness import HarnessError, tail


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
