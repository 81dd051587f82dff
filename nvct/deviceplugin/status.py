"""The status file's writer: one thread at a time, and the newest state always last.

Both watcher threads (NVML health, MPS daemons) report changes; each write builds the file
from the current state inside the lock, so a slower thread can never put an older picture
over a newer one, and ``write_atomic``'s per-call temp names keep readers from ever seeing a
half-written file.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from nvct.base.atomic import write_atomic
from nvct.node.status import Devices, status_bytes

STALE_TEMP_S = 10.0  # a write takes milliseconds: an older temp file is a killed writer's

log = structlog.get_logger("nvct-device-plugin")


STATUS_MODE = 0o600


class StatusWriter:
    """Rewrites ``path`` from ``build()`` (resource -> its devices) and ``settings``."""

    def __init__(self, path: Path, settings: dict[str, Any]) -> None:
        self.path = path
        self.settings = settings
        self._lock = threading.Lock()

    def write(self, build: Callable[[], Devices]) -> None:
        """Replace the file with the state ``build`` reads now (a failure is logged: the
        plugin serves on without it)."""
        with self._lock:
            data = status_bytes(build(), self.settings)
            try:
                # its readers (the exporter, nvct-cli, doctor) run as root, as the kubelet
                # whose directory it is in
                write_atomic(str(self.path), data, STATUS_MODE)
            except OSError as err:
                log.warning("status_not_written", file=str(self.path), error=err.strerror)

    def sweep(self) -> list[str]:
        """Remove the temp files of writers killed mid-write (each write has its own name,
        so nothing else ever replaces them); the names removed."""
        prefix, removed = f".{self.path.name}.", []
        try:
            entries = list(os.scandir(self.path.parent))
        except OSError:
            return []
        for entry in entries:
            if not (entry.name.startswith(prefix) and entry.name.endswith(".tmp")):
                continue
            with contextlib.suppress(OSError):
                if time.time() - entry.stat(follow_symlinks=False).st_mtime > STALE_TEMP_S:
                    os.unlink(entry.path)
                    removed.append(entry.name)
        return removed
