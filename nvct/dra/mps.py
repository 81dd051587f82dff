"""MPS per claim: one control daemon for a claim's GPUs, started at prepare, stopped at unprepare.

A claim whose config asks for ``MPS`` gets what NVIDIA's DRA driver gives one: the host
driver's ``nvidia-cuda-mps-control -d`` with ``CUDA_VISIBLE_DEVICES`` the claim's GPUs, its
pipe, log and shm directories under ``<mps root>/<claim uid>/`` (``--mps-root``, default
``/run/nvct/dra-mps``: a tmpfs, as NVIDIA's driver mounts one for the shm, so what clients
share never reaches a disk and a reboot leaves nothing behind), its default
active thread percentage and each GPU's pinned-memory limit (by UUID) set through the pipe and
read back before the claim is answered. The daemon is the device plugin's ``MpsDaemon`` (its
own mount namespace whose ``/dev/shm`` is the claim's shm directory) under the same
supervision (``MpsWatch``: a dead daemon is started again with its limits), so every pod of
the claim shares one daemon, and no other claim's clients.

The claim's containers get the pipe directory at ``/tmp/nvidia-mps`` (MPS's default: a client
finds it even where the environment is replaced) with ``CUDA_MPS_PIPE_DIRECTORY`` naming it,
the shm directory as ``/dev/shm``, and the limits as the client-side variables
(``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` by the client's
device ordinal: the daemon's order), which can only lower what the daemon enforces.

The daemons outlive the plugin's process (a restarted plugin takes its claims' daemons over,
adopting one that answers with the claim's limits); unprepare stops the claim's daemon by its
pid and removes its directories.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from nvct.dra.checkpoint import MpsRecord
from nvct.dra.claim import ClaimError
from nvct.dra.config import MpsConfig
from nvct.node.health.state import Health
from nvct.node.mps import CONTAINER_SHM, MpsDaemon, MpsError, MpsPaths, alive, is_control
from nvct.node.mps_watch import MpsWatch, Supervised
from nvct.node.sharing import MPS_CONTROL

CONTAINER_PIPE = "/tmp/nvidia-mps"  # noqa: S108 - MPS's default pipe directory, in the container
MPS_THREADS = 100  # the daemon's own default: what a claim that sets none gets
STEP_S = 0.1
RETRY_S = 1.0

log = structlog.get_logger("nvct-dra-plugin")


class ClaimDaemons:
    """The MPS daemons of this node's prepared claims, supervised on one thread."""

    def __init__(self, root: Path, program: tuple[Path, str] | str) -> None:
        """``root``: the claims' directories (a tmpfs); ``program``: the host driver's
        ``nvidia-cuda-mps-control`` and the LD_LIBRARY_PATH its daemons need, or the one line
        saying why there is none (then MPS claims are refused with it)."""
        self.root = root
        self.program = program
        self.daemons: dict[str, MpsDaemon] = {}
        self.watch = MpsWatch([], Health([], quiet=0, ignored_xids=()))

    def start(self, uid: str, record: MpsRecord, where: str) -> MpsRecord:
        """Start (or adopt) the daemon of claim ``uid`` as ``record`` (``plan``'s) has it, and
        read its limits back; the record with its pid.

        Raises:
            ClaimError: a daemon that does not start or does not answer with its limits.
        """
        daemon = self._daemon(uid, record)
        try:
            daemon.start()
        except MpsError as err:
            daemon.stop()
            _remove_dirs(daemon.paths)
            line = err.message
            hint = err.hint
            if "unshare" in line or "mount" in line:  # no CAP_SYS_ADMIN for the namespace
                hint = "give nvct-dra-plugin CAP_SYS_ADMIN (the chart's dra.sharing=true)"
            raise ClaimError(f"{where}: {line}", hint=hint) from err
        self.daemons[uid] = daemon
        self.watch.add(Supervised(daemon, (), ready=True))
        log.info(
            "mps_daemon_started", claim=uid, pid=daemon.pid, adopted=daemon.adopted,
            gpus=list(record.uuids), threads=record.threads, limits=dict(record.limits),
        )  # fmt: skip
        return MpsRecord(record.root, record.uuids, record.threads, record.limits, daemon.pid)

    def resume(self, uid: str, record: MpsRecord) -> None:
        """Supervise a daemon the last plugin started: the next step adopts it where it
        answers with the claim's limits, else starts it again."""
        if isinstance(self.program, str):
            log.error("mps_daemon_not_resumed", claim=uid, error=self.program)
            return
        daemon = self._daemon(uid, record)
        self.daemons[uid] = daemon
        self.watch.add(Supervised(daemon, ()))

    def stop(self, uid: str, record: MpsRecord) -> None:
        """Stop claim ``uid``'s daemon (``quit`` through its pipe, then SIGKILL by pid) and
        remove its directories.

        Raises:
            OSError: the directories cannot be removed.
        """
        daemon = self.daemons.pop(uid, None)
        if daemon is not None:
            self.watch.remove(daemon)
        else:
            daemon = self._daemon(uid, record)
        if daemon.pid is None:  # not started by this process: the one its pid file names
            pid = daemon.visible_pid()
            daemon.pid = pid if pid is not None else _control(record.pid)
        if daemon.pid is None:
            daemon.adopted = True  # another PID namespace's: quit through the pipe alone
        daemon.stop()
        log.info("mps_daemon_stopped", claim=uid)
        _remove_dirs(daemon.paths)

    def edits(self, uid: str, record: MpsRecord) -> dict[str, Any]:
        """What claim ``uid``'s containers need to be its daemon's clients (CDI container
        edits)."""
        paths = MpsPaths(record.root, uid)
        env = [f"CUDA_MPS_PIPE_DIRECTORY={CONTAINER_PIPE}"]
        env.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={record.threads}")
        limits = dict(record.limits)
        ordinals = [f"{n}={limits[u]}M" for n, u in enumerate(record.uuids) if u in limits]
        if ordinals:
            env.append(f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={','.join(ordinals)}")
        options = ["rw", "nosuid", "nodev", "bind"]
        mounts = [
            {"hostPath": paths.pipe, "containerPath": CONTAINER_PIPE, "options": options},
            {"hostPath": paths.shm, "containerPath": CONTAINER_SHM, "options": options},
        ]
        return {"env": env, "mounts": mounts}

    def run(self, stop: threading.Event) -> None:
        """Supervise the daemons until ``stop``: a dead one is started again with its limits.
        A step that raises is logged and the loop goes on (ending it would leave every claim's
        daemon unwatched)."""
        while not stop.wait(STEP_S):
            try:
                self.watch.step()
            except Exception:  # a driver surprise must not end the supervision
                log.exception("mps_supervision_failed")
                stop.wait(RETRY_S)

    def plan(
        self, gpus: Sequence[tuple[str, str, int]], config: MpsConfig, where: str
    ) -> MpsRecord:
        """The daemon a claim of ``gpus`` ((device name, UUID, MiB) in the claim's order) with
        ``config`` gets (``start`` starts it): checked before anything is set on the GPUs.

        Raises:
            ClaimError: no MPS control program, or limits the GPUs cannot take.
        """
        if isinstance(self.program, str):
            raise ClaimError(
                f"{where}: sharing strategy MPS: {self.program}",
                hint="install the driver's MPS control program on the node, or use TimeSlicing",
            )
        limits = {uuid: config.pinned_mib for _, uuid, _ in gpus if config.pinned_mib}
        by_key = {name: uuid for name, uuid, _ in gpus} | {uuid: uuid for _, uuid, _ in gpus}
        for key, mib in config.per_device:
            if key not in by_key:
                raise ClaimError(
                    f"{where}: defaultPerDevicePinnedMemoryLimit names {key!r}, not a device of "
                    f"this claim ({', '.join(name for name, _, _ in gpus)})",
                    hint="name the claim's devices by name (gpu-1) or UUID",
                )
            limits[by_key[key]] = mib
        memory = {uuid: (name, mib) for name, uuid, mib in gpus}
        for uuid, mib in limits.items():
            name, total = memory[uuid]
            if mib > total:
                raise ClaimError(
                    f"{where}: pinned-memory limit {mib}Mi exceeds {name}'s {total}Mi",
                    hint=f"ask for at most {total}Mi, or leave the limit out",
                )
        threads = config.threads if config.threads is not None else MPS_THREADS
        ordered = tuple((u, limits[u]) for _, u, _ in gpus if u in limits)
        return MpsRecord(str(self.root), tuple(u for _, u, _ in gpus), threads, ordered, None)

    def _daemon(self, uid: str, record: MpsRecord) -> MpsDaemon:
        # Without the driver's program (gone since the claim was prepared) the client is
        # looked up on PATH to say quit; the pid ends the daemon otherwise.
        program, library_path = (
            self.program if isinstance(self.program, tuple) else (Path(MPS_CONTROL), "")
        )
        return MpsDaemon(
            program, MpsPaths(record.root, uid), threads=record.threads,
            library_path=library_path, devices=record.uuids, limits=dict(record.limits),
        )  # fmt: skip


def _remove_dirs(paths: MpsPaths) -> None:
    """The claim's pipe, log and shm directories (``<root>/<claim uid>``)."""
    if Path(paths.base).exists():
        shutil.rmtree(paths.base)


def _control(pid: int | None) -> int | None:
    """``pid`` where it still runs the MPS control program (a pid can be reused)."""
    return pid if pid is not None and alive(pid) and is_control(pid) else None
