"""Prepare and unprepare, as the kubelet asks them: per claim, idempotent, serialised.

Prepare: a claim already in the checkpoint is answered as before (its spec rewritten if it was
removed meanwhile); otherwise the ResourceClaim is read from the API server, its devices of
this driver and pool are checked against what this node offers and their configuration, its
CDI spec is written, and the claim is recorded, then answered. A claim configured for MPS
gets its control daemon first (``nvct.dra.mps``), and its spec the daemon's pipe, shm and
limits; one time-sliced at another interval than Default gets it set on its GPUs
(``nvct.dra.timeslice``). Unprepare stops the claim's daemon, sets its GPUs back to Default,
removes the spec and forgets the claim; a claim never prepared (or already unprepared) is done
at once, as the kubelet's retries need. A claim's failure is its own one-line error; the
others go on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from nvct.base.errors import NvctError
from nvct.dra.checkpoint import Checkpoint, MpsRecord, Prepared, PreparedDevice
from nvct.dra.claim import Allocated, ClaimError, allocated
from nvct.dra.claimspec import NodeSpec, cdi_id, spec_path, valid_uid, write_claim_spec
from nvct.dra.config import MpsConfig
from nvct.dra.devices import DraDevice
from nvct.dra.mps import ClaimDaemons
from nvct.dra.timeslice import TimeSliceError, TimeSlices

log = structlog.get_logger("nvct-dra-plugin")

# GET a ResourceClaim (namespace, name) as the API server returns it; raises NvctError.
FetchClaim = Callable[[str, str], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    uid: str
    name: str


class Driver:
    """This node's prepared claims and how to prepare more."""

    def __init__(
        self,
        *,
        name: str,
        pool: str,
        devices: Sequence[DraDevice],
        node_spec: NodeSpec,
        cdi_dir: Path,
        checkpoint: Checkpoint,
        fetch: FetchClaim,
        mps: ClaimDaemons | None = None,
        timeslices: TimeSlices | None = None,
    ) -> None:
        self.name = name
        self.pool = pool
        self.devices = {d.name: d for d in devices}
        self.node_spec = node_spec
        self.cdi_dir = cdi_dir
        self.checkpoint = checkpoint
        self.fetch = fetch
        self.mps = mps
        self.timeslices = timeslices
        # One claim at a time: two retries of one claim must not interleave their writes.
        self.lock = threading.Lock()

    def prepare(self, claim: ClaimRef) -> tuple[tuple[PreparedDevice, ...], str]:
        """The claim's devices, or ``((), error)``."""
        with self.lock:
            try:
                devices = self._prepare(claim)
            except NvctError as err:
                log.warning("prepare_failed", claim=_ref(claim), error=err.one_line())
                return (), err.one_line()
        log.info("prepared", claim=_ref(claim), devices=[d.device for d in devices])
        return devices, ""

    def unprepare(self, claim: ClaimRef) -> str:
        """ "" when the claim is (now) unprepared, else the error."""
        with self.lock:
            try:
                self._unprepare(claim)
            except OSError as err:
                line = (
                    f"cannot remove the CDI spec or MPS directory of claim {_ref(claim)}: "
                    f"{err.strerror} ({err.filename})"
                )
                log.warning("unprepare_failed", claim=_ref(claim), error=line)
                return line
            except TimeSliceError as err:
                line = f"claim {_ref(claim)}: {err.one_line()}"
                log.warning("unprepare_failed", claim=_ref(claim), error=line)
                return line
        log.info("unprepared", claim=_ref(claim))
        return ""

    def _prepare(self, claim: ClaimRef) -> tuple[PreparedDevice, ...]:
        if not valid_uid(claim.uid):
            raise ClaimError(f"claim UID {claim.uid!r} is not a Kubernetes UID")
        known = self.checkpoint.claims.get(claim.uid)
        if known is not None:
            if not Path(known.spec).exists():  # removed by hand or a reboot's tmpfs
                for uuid, interval in known.timeslice:  # a reboot set the GPUs back too
                    self._set_timeslice(claim, [uuid], interval)
                self._write_spec(claim.uid, [d.device for d in known.devices], known.mps)
            return known.devices
        found = allocated(
            self.fetch(claim.namespace, claim.name), uid=claim.uid, driver=self.name,
            pool=self.pool,
        )  # fmt: skip
        names: list[str] = []
        requests: dict[str, list[str]] = {}
        for result in found:
            device = self.devices.get(result.device)
            if device is None:
                raise ClaimError(
                    f"claim {_ref(claim)}: device {result.device!r} is not offered by this node "
                    f"(offered: {', '.join(sorted(self.devices)[:8]) or 'none'})",
                    hint="the ResourceSlice is stale; the scheduler allocates again after it "
                    "is republished",
                )
            if result.config.kind and result.config.kind != device.kind:
                raise ClaimError(
                    f"claim {_ref(claim)}: request {result.request!r} got {device.kind} device "
                    f"{device.name} but its config is for {result.config.kind} devices",
                    hint="use GpuConfig for whole GPUs, MigDeviceConfig for MIG devices",
                )
            if device.name not in requests:
                names.append(device.name)
            requests.setdefault(device.name, []).append(result.request)
        timeslice = self._timeslices(claim, found)
        mps = None
        try:
            mps = self._start_mps(claim, names, found)
            path = self._write_spec(claim.uid, names, mps)
            devices = tuple(
                PreparedDevice(tuple(requests[n]), self.pool, n, (cdi_id(claim.uid, n),))
                for n in names
            )
            prepared = Prepared(claim.namespace, claim.name, devices, str(path), mps, timeslice)
            self.checkpoint.record(claim.uid, prepared)
        except BaseException:
            if mps is not None and self.mps is not None:  # never a daemon no claim records
                self.mps.stop(claim.uid, mps)
            self._restore_timeslices(claim, timeslice)
            raise
        return devices

    def _timeslices(
        self, claim: ClaimRef, found: Sequence[Allocated]
    ) -> tuple[tuple[str, str], ...]:
        """Set the intervals the claim's config asks for (not Default) on its GPUs; the
        (UUID, interval) pairs set. A failure sets the ones already done back."""
        wanted = {
            self.devices[r.device].uuid: r.config.interval
            for r in found
            if r.config.sharing == "TimeSlicing" and r.config.interval != "Default"
        }
        done: list[tuple[str, str]] = []
        try:
            for uuid, interval in wanted.items():
                self._set_timeslice(claim, [uuid], interval)
                done.append((uuid, interval))
        except ClaimError:
            self._restore_timeslices(claim, tuple(done))
            raise
        return tuple(done)

    def _set_timeslice(self, claim: ClaimRef, uuids: Sequence[str], interval: str) -> None:
        if self.timeslices is None:
            raise ClaimError(
                f"claim {_ref(claim)}: time-slice interval {interval} is not available on this node"
            )
        try:
            self.timeslices.set(uuids, interval)
        except TimeSliceError as err:
            raise ClaimError(f"claim {_ref(claim)}: {err.message}", hint=err.hint) from err

    def _restore_timeslices(self, claim: ClaimRef, timeslice: Sequence[tuple[str, str]]) -> None:
        """Default again on the GPUs ``timeslice`` names (errors are logged: a failed prepare
        keeps its own error)."""
        if timeslice and self.timeslices is not None:
            try:
                self.timeslices.set([u for u, _ in timeslice], "Default")
            except TimeSliceError as err:
                log.warning("timeslice_not_restored", claim=_ref(claim), error=err.one_line())

    def _start_mps(
        self, claim: ClaimRef, names: Sequence[str], found: Sequence[Allocated]
    ) -> MpsRecord | None:
        """The claim's MPS daemon, where its config asks for one (for all its devices)."""
        configs: dict[str, MpsConfig | None] = {}
        for result in found:
            configs[result.device] = result.config.mps if result.config.sharing == "MPS" else None
        wanted = {c for c in configs.values() if c is not None}
        if not wanted:
            return None
        where = f"claim {_ref(claim)}"
        if len(wanted) > 1 or None in configs.values():
            raise ClaimError(
                f"{where}: its devices are configured with {len(wanted)} MPS config(s) and "
                f"{sum(c is None for c in configs.values())} device(s) without MPS",
                hint="give all of a claim's devices one MPS config (a daemon per claim), or "
                "make two claims",
            )
        if self.mps is None:
            raise ClaimError(f"{where}: sharing strategy MPS is not available on this node")
        gpus = [(n, self.devices[n].uuid, self.devices[n].memory_mib) for n in names]
        return self.mps.start(claim.uid, gpus, wanted.pop(), where)

    def _write_spec(self, uid: str, names: Sequence[str], mps: MpsRecord | None) -> Path:
        gone = [n for n in names if n not in self.devices]
        if gone:  # a checkpointed claim whose GPU left the node: never a spec without it
            raise ClaimError(
                f"claim {uid}: device {gone[0]} it was prepared with is no longer on this node",
                hint="delete the pod; its claim is allocated again from the current devices",
            )
        pairs = [(n, self.devices[n].uuid) for n in names]
        extra = self.mps.edits(uid, mps) if mps is not None and self.mps is not None else {}
        return write_claim_spec(self.cdi_dir, self.node_spec, uid, pairs, extra)

    def _unprepare(self, claim: ClaimRef) -> None:
        known = self.checkpoint.claims.get(claim.uid)
        paths = {spec_path(self.cdi_dir, claim.uid)} if valid_uid(claim.uid) else set()
        if known is not None:
            paths.add(Path(known.spec))
            if known.mps is not None and self.mps is not None:
                self.mps.stop(claim.uid, known.mps)
            if known.timeslice and self.timeslices is not None:  # a failure: the kubelet retries
                self.timeslices.set([u for u, _ in known.timeslice], "Default")
        for path in paths:
            path.unlink(missing_ok=True)
        self.checkpoint.forget(claim.uid)


def _ref(claim: ClaimRef) -> str:
    return f"{claim.namespace}/{claim.name} ({claim.uid})"
