"""XID events as the exporter reads them, in a thread of their own (``XidWatch``), so a
blocking event wait never reaches the HTTP handler (the counters: ``nvct.exporter.probes``).
Each GPU is registered for what it supports (``nvct.node.health.nvml_events``, as the device
plugin does): one GPU without XID events leaves the others' XIDs counted, and a
MIG device's XID counts for its GPU.

NVML is loaded by absolute path from the driver root (as discovery and the device plugin do),
never through the caller's LD_LIBRARY_PATH. ctypes releases the GIL during each call, so a slow
driver stalls only the thread that asked.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from nvct.exporter.fields import XID_WINDOW_S
from nvct.exporter.sample import XidSeen
from nvct.node.health.nvml_events import matching, register, routes

EVENT_WAIT_MS = 1000


class XidWatch:
    """XID events of the given GPUs, counted per GPU, from an NVML event set waited on in a
    daemon thread. ``seen()`` is safe from any thread."""

    def __init__(self, nvml: Any, handles: dict[str, Any], window_s: float = XID_WINDOW_S) -> None:
        self.nvml = nvml
        self.window_s = window_s
        self.handles = handles
        self._lock = threading.Lock()
        self._seen: dict[str, XidSeen] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xid-events", daemon=True)
        self._routes, gpus = routes(nvml, handles.items())
        try:
            self._events = nvml.nvmlEventSetCreate()
        except (nvml.NVMLError, AttributeError):
            self._events = None  # no events here: no XID metrics, values only
            return
        masks = register(nvml, self._events, gpus.values(), nvml.nvmlEventTypeXidCriticalError)
        if not any(masks.values()):
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlEventSetFree(self._events)
            self._events = None

    @property
    def supported(self) -> bool:
        """Whether NVML delivers XID events here."""
        return self._events is not None

    def start(self) -> None:
        """Start waiting for events (no-op where unsupported)."""
        if self._events is not None:
            self._thread.start()

    def seen(self) -> dict[str, XidSeen]:
        """GPU UUID → its XIDs so far."""
        with self._lock:
            return dict(self._seen)

    def _run(self) -> None:
        nvml = self.nvml
        while not self._stop.is_set():
            try:
                event = nvml.nvmlEventSetWait_v2(self._events, EVENT_WAIT_MS)
            except nvml.NVMLError:
                continue  # the wait timed out
            if event.eventType & nvml.nvmlEventTypeXidCriticalError:
                self._record(event, int(event.eventData), time.monotonic())

    def _record(self, event: Any, code: int, at: float) -> None:
        for uuid in matching(event, self._routes):
            with self._lock:
                old = self._seen.get(uuid, XidSeen())
                counts = dict(old.counts)
                counts[code] = counts.get(code, 0) + 1
                # keep only what the window can still count: memory stays bounded
                recent = tuple(e for e in old.recent if at - e[0] <= self.window_s)
                self._seen[uuid] = XidSeen(
                    code, counts, {**old.seen_at, code: at}, (*recent, (at, code))
                )

    def stop(self) -> None:
        """Stop waiting (within one wait) and free the event set."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=EVENT_WAIT_MS / 1000 * 2)
        if self._events is not None and not self._thread.is_alive():
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlEventSetFree(self._events)
