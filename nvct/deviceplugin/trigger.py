"""When to read a config again: a SIGHUP came (a config-manager's signal), or a file it was
read from was replaced or rewritten (a config-manager's atomic rename or symlink, a ConfigMap
volume's symlink swap). The device plugin's reload and ``nvct-cli mps-control`` share it."""

from __future__ import annotations

import os
import signal
import threading

import structlog

log = structlog.get_logger("nvct-device-plugin")


def _identity(path: str) -> tuple[int, int, int] | None:
    """What changes when a file is rewritten or replaced (a symlink followed)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class Trigger:
    """Whether to reload: a SIGHUP came, or a watched file changed since last asked."""

    def __init__(self, files: list[str]) -> None:
        self.files = files
        self.seen = {f: _identity(f) for f in files}
        self.hup = threading.Event()
        signal.signal(signal.SIGHUP, lambda *_: self.hup.set())

    def __call__(self) -> bool:
        now = {f: _identity(f) for f in self.files}
        # A file missing for a moment is not a change: NVIDIA's config-manager removes the
        # link, then makes the new one; the change is seen when it is back.
        now = {f: self.seen[f] if i is None else i for f, i in now.items()}
        changed = [f for f in self.files if now[f] != self.seen[f]]
        self.seen = now
        hup = self.hup.is_set()
        self.hup.clear()
        if hup or changed:
            log.info("reload_asked", signal="SIGHUP" if hup else None, files=changed)
        return hup or bool(changed)
