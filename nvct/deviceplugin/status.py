"""The status file's writer: one thread at a time, and the newest state always last.

Both watcher threads (NVML health, MPS daemons) report changes; each write builds the file
from the current state inside the lock, so a slower thread can never put an older picture
over a newer one, and ``write_atomic``'s per-call temp names keep readers from ever seeing a
half-written file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from nvct.base.atomic import write_atomic
from nvct.base.plugin_status import Devices, status_bytes

log = structlog.get_logger("nvct-device-plugin")


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
                write_atomic(str(self.path), data, 0o644)
            except OSError as err:
                log.warning("status_not_written", file=str(self.path), error=err.strerror)
