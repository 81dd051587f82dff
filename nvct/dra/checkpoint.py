"""The claims this node's plugin prepared, kept on the node across plugin restarts.

One JSON file in the plugin's directory (``checkpoint.json``), replaced atomically on every
change: a prepare is recorded before it is answered and an unprepare forgotten after its CDI
spec is removed, so a plugin killed at any point finds every claim it may still have to undo,
and a retried prepare answers what the first one did (the kubelet retries a call it did not
see answered).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nvct.base.atomic import write_atomic
from nvct.base.errors import NvctError

FILE = "checkpoint.json"
VERSION = 1


class CheckpointError(NvctError):
    """The checkpoint cannot be read."""


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device as the kubelet was told it."""

    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MpsRecord:
    """A claim's MPS control daemon: where it lives (``<root>/<claim uid>/``), its GPUs, its
    limits and its pid when it was started (unprepare stops it by pid)."""

    root: str
    uuids: tuple[str, ...]
    threads: int
    limits: tuple[tuple[str, int], ...]  # (UUID, MiB) of the limited GPUs
    pid: int | None


@dataclass(frozen=True, slots=True)
class Prepared:
    """A prepared claim: whose, its devices, the CDI spec written for it and its MPS daemon."""

    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]
    spec: str
    mps: MpsRecord | None = None
    # (GPU UUID, interval) of the GPUs whose time-slice this claim set (Default at unprepare)
    timeslice: tuple[tuple[str, str], ...] = ()
    # (GPU UUID, compute mode set, the mode before) of the GPUs the claim's sharing puts in a
    # compute mode (the one before again at unprepare)
    compute_mode: tuple[tuple[str, str, str], ...] = ()


class Checkpoint:
    """The prepared claims by UID, and the file that keeps them."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE
        self.claims: dict[str, Prepared] = self._read()

    def _read(self) -> dict[str, Prepared]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            raise CheckpointError(
                f"cannot read the checkpoint {self.path}: {err}",
                hint="restore it, or remove it after removing the claims' CDI specs by hand",
            ) from err
        if not isinstance(data, Mapping) or data.get("version") != VERSION:
            raise CheckpointError(
                f"{self.path} is not a version {VERSION} checkpoint",
                hint="run the nvct-dra-plugin that wrote it, or remove it",
            )
        return {uid: _prepared(entry) for uid, entry in data.get("claims", {}).items()}

    def record(self, uid: str, prepared: Prepared) -> None:
        self.claims[uid] = prepared
        self._write()

    def forget(self, uid: str) -> None:
        if self.claims.pop(uid, None) is not None:
            self._write()

    def _write(self) -> None:
        data = {"version": VERSION, "claims": {u: asdict(p) for u, p in self.claims.items()}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(str(self.path), json.dumps(data, sort_keys=True).encode(), 0o600)


def _prepared(entry: Mapping[str, Any]) -> Prepared:
    devices = tuple(
        PreparedDevice(
            tuple(d["request_names"]), d["pool"], d["device"], tuple(d["cdi_device_ids"])
        )
        for d in entry["devices"]
    )
    mps = entry.get("mps")  # absent: a claim without MPS, or a checkpoint from before MPS
    record = None
    if mps is not None:
        record = MpsRecord(
            mps["root"], tuple(mps["uuids"]), mps["threads"],
            tuple((u, m) for u, m in mps["limits"]), mps["pid"],
        )  # fmt: skip
    timeslice = tuple((u, i) for u, i in entry.get("timeslice", ()))
    modes = tuple((u, m, b) for u, m, b in entry.get("compute_mode", ()))
    return Prepared(
        entry["namespace"], entry["name"], devices, entry["spec"], record, timeslice, modes
    )
