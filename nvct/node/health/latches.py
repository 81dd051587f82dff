"""The node's latched GPUs: a file beside the device plugin's sockets, so a GPU that needs a
reset stays Unhealthy across plugin restarts (crash, upgrade, config change).

Each entry is keyed by the UUID of the device the event named (a GPU, or a MIG device) and
carries the boot id (``/proc/sys/kernel/random/boot_id`` under the proc root) it happened in:
an entry held until a reset is dropped in a new boot (a reboot resets every GPU), one held for
service (a row-remapping failure) is not. ``nvct-cli device-plugin-health clear`` removes
entries; clearing a service hold also records that the operator accepted that failure, so the
same NVML flag does not latch the GPU again. Read-modify-write under an exclusive lock, written
atomically: the plugin and the CLI never lose each other's change.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nvct.base.atomic import write_atomic
from nvct.base.errors import NvctError
from nvct.node.health.policy import RESET, SERVICE

LATCH_DIR = "nvct-health"  # a directory: older kubelets sweep every plain file of plugin-dir
LATCH_FILE = "latched.json"
VERSION = 1


def boot_id(proc_root: Path) -> str:
    """This boot's id ("" where the proc root has none: then only an operator clears)."""
    try:
        return (proc_root / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True, slots=True)
class Latch:
    """One latched device: why, how it is held (``policy.RESET``/``SERVICE``), in which boot,
    since when (seconds since the epoch)."""

    uuid: str
    reason: str
    hold: str
    boot_id: str
    since: float


class LatchFile:
    """``<plugin-dir>/nvct-health/latched.json``."""

    def __init__(self, plugin_dir: Path, boot: str) -> None:
        self.directory = plugin_dir / LATCH_DIR
        self.path = self.directory / LATCH_FILE
        self.boot = boot

    def load(self, *, every: bool = False) -> dict[str, Latch]:
        """The entries that still hold in this boot (``every``: also an earlier boot's).

        Raises:
            NvctError: the file exists but is not a latch file.
        """
        entries = self._read()[0]
        return {u: e for u, e in entries.items() if every or self._current(e)}

    def accepted(self) -> frozenset[str]:
        """UUIDs whose row-remapping failure an operator accepted."""
        return frozenset(self._read()[1])

    def stamp(self) -> tuple[int, int] | None:
        """Changes whenever the file does (a cheap stat, for a watcher)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_ino

    def add(self, uuid: str, reason: str, hold: str) -> None:
        """Latch ``uuid``; one latched already keeps its first reason, unless this hold is
        for service and that one was not."""
        with self._locked() as (entries, _accepted):
            old = entries.get(uuid)
            if old is None or not self._current(old) or (hold == SERVICE != old.hold):
                entries[uuid] = Latch(uuid, reason, hold, self.boot, time.time())

    def remove(self, uuid: str) -> Latch | None:
        """Drop ``uuid``'s latch (an operator's clear); the entry that was there."""
        with self._locked() as (entries, accepted):
            entry = entries.pop(uuid, None)
            if entry is not None and entry.hold == SERVICE:
                accepted.add(uuid)
            return entry

    def release(self, uuid: str) -> None:
        """``uuid`` was reset (NVML says so): drop its reset hold, keep a service hold."""
        with self._locked() as (entries, _):
            if uuid in entries and entries[uuid].hold != SERVICE:
                del entries[uuid]

    def _current(self, entry: Latch) -> bool:
        return entry.hold == SERVICE or entry.boot_id == self.boot

    def _read(self) -> tuple[dict[str, Latch], set[str]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}, set()
        except (OSError, ValueError) as err:
            raise NvctError(
                f"cannot read {self.path}: {err}",
                hint="remove it to forget every latched GPU (they may need a reset)",
            ) from err
        try:
            entries = {u: _latch(u, e) for u, e in data["latched"].items()}
            accepted = data.get("accepted", [])
            if not all(isinstance(u, str) for u in accepted):
                raise TypeError("accepted: not a list of UUIDs")
            return entries, set(accepted)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise NvctError(
                f"{self.path} is not nvct's latch file ({err})",
                hint="remove it to forget every latched GPU (they may need a reset)",
            ) from err

    @contextmanager
    def _locked(self) -> Iterator[tuple[dict[str, Latch], set[str]]]:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            entries, accepted = self._read()
            before = (dict(entries), set(accepted))
            yield entries, accepted
            if (entries, accepted) != before:
                write_atomic(str(self.path), _dump(entries, accepted), 0o644)
        finally:
            os.close(fd)


def _latch(uuid: str, entry: dict[str, Any]) -> Latch:
    latch = Latch(uuid=uuid, **entry)
    if not (
        isinstance(latch.reason, str)
        and latch.hold in (RESET, SERVICE)
        and isinstance(latch.boot_id, str)
        and isinstance(latch.since, int | float)
    ):
        raise ValueError(f"{uuid}: {entry}")
    return latch


def _dump(entries: dict[str, Latch], accepted: set[str]) -> bytes:
    document: dict[str, Any] = {
        "version": VERSION,
        "latched": {
            u: {k: v for k, v in asdict(e).items() if k != "uuid"} for u, e in entries.items()
        },
        "accepted": sorted(accepted),
    }
    return (json.dumps(document, indent=2) + "\n").encode()
