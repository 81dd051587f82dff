"""Structured logs: one JSON object per line, appended to the configured file.

The shim and the hook run on every container start, so their logger is this small
writer (stdlib only, JSON by ``nvct.base.fastjson``): events are buffered and written with a
single ``write(2)`` on an O_APPEND descriptor, so concurrent hooks never interleave inside a
line. The CLI uses structlog (``configure_structlog``) with the same event shape: ``ts``,
``level``, ``event``, ``component`` and key-value context.
"""

from __future__ import annotations

import os
import sys
import time

from nvct.base import fastjson

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


class EventLog:
    """Buffered JSON-lines logger for one short-lived process."""

    def __init__(self, component: str, path: str, level: str = "info") -> None:
        self.component = component
        self.path = path
        self.threshold = LEVELS.get(level, 20)
        self.context: dict[str, Any] = {}
        self.lines: list[str] = []

    def configure(self, path: str, level: str) -> None:
        """Point the log at the configured file and level (known only after config loads)."""
        self.path = path
        self.threshold = LEVELS.get(level, 20)

    def bind(self, **context: Any) -> None:
        """Add context to every later event (container id, bundle, ...)."""
        self.context.update(context)

    def log(self, level: str, event: str, **fields: Any) -> None:
        """Record an event; errors are also printed to stderr as one line."""
        if LEVELS[level] < self.threshold:
            return
        record = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
            + f".{time.time_ns() % 10**9 // 10**6:03d}Z",
            "level": level,
            "component": self.component,
            "event": event,
            **self.context,
            **fields,
        }
        self.lines.append(fastjson.dumps(record, default=str))

    def info(self, event: str, **fields: Any) -> None:
        """Log at info level."""
        self.log("info", event, **fields)

    def debug(self, event: str, **fields: Any) -> None:
        """Log at debug level."""
        self.log("debug", event, **fields)

    def fail(self, event: str, message: str, **fields: Any) -> None:
        """Log at error level and print ``message`` to stderr."""
        self.log("error", event, error=message, **fields)
        sys.stderr.write(f"{self.component}: error: {message}\n")
        sys.stderr.flush()

    def flush(self) -> None:
        """Append buffered lines with one write; a log that cannot be written is skipped."""
        if not self.lines or not self.path or self.path == "/dev/null":
            self.lines.clear()
            return
        data = ("\n".join(self.lines) + "\n").encode()
        self.lines.clear()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        except FileNotFoundError:
            try:
                os.makedirs(os.path.dirname(self.path), mode=0o755, exist_ok=True)
                fd = os.open(
                    self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640
                )
            except OSError:
                return
        except OSError:
            return
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def configure_stdout_structlog() -> None:
    """structlog writing the same JSON lines to stdout: the log of a daemon in a pod (the
    device plugin, the exporter)."""
    import structlog

    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.WriteLoggerFactory(file=sys.stdout),
    )


def configure_structlog(path: str, level: str = "info") -> Any:
    """A structlog logger writing the same JSON lines, for CLI processes."""
    import structlog

    try:
        handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    except OSError:
        handle = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS.get(level, 20)),
        logger_factory=structlog.WriteLoggerFactory(file=handle),
        cache_logger_on_first_use=True,
    )
    return structlog.get_logger().bind(component="nvct-cli", pid=os.getpid())
