"""Prepare and unprepare, as the kubelet asks them: per claim, idempotent, serialised.

Prepare: a claim already in the checkpoint is answered as before (its spec rewritten if it was
removed meanwhile); otherwise the ResourceClaim is read from the API server, its devices of
this driver and pool are checked against what this node offers and their configuration, its
CDI spec is written, and the claim is recorded, then answered. A claim configured for MPS
gets its GPUs in EXCLUSIVE_PROCESS compute mode and a time-sliced one in DEFAULT
(``nvct.dra.computemode``), then an MPS claim its control daemon (``nvct.dra.mps``), and its
spec the daemon's pipe, shm and limits; one time-sliced at another interval than Default gets
it set on its GPUs (``nvct.dra.timeslice``). Unprepare stops the claim's daemon, sets its GPUs
back to Default and to the compute mode they had, removes the spec and forgets the claim; a
claim never prepared (or already unprepared) is done at once, as the kubelet's retries need.
A claim's failure is its own one-line error; the others go on.
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
from nvct.dra.computemode import DEFAULT, EXCLUSIVE_PROCESS, ComputeModes, Record
from nvct.dra.config import MpsConfig
from nvct.dra.devices import DraDevice
from nvct.dra.mps import ClaimDaemons
from nvct.dra.smi import SmiError
from nvct.dra.timeslice import TimeSlices

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
        modes: ComputeModes | None = None,
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
        self.modes = modes  # None: compute modes are left alone (a node nvct does not manage)
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
            except SmiError as err:
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
                if known.compute_mode and self.modes is not None:  # a reboot reset the modes
                    try:
                        self.modes.again(known.compute_mode, what=f"claim {_ref(claim)}")
                    except SmiError as err:
                        raise ClaimError(err.message, hint=err.hint) from err
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
        planned = self._plan_mps(claim, names, found)
        modes = self._compute_modes(claim, found)
        try:
            timeslice = self._timeslices(claim, found)
        except BaseException:
            self._restore_modes(claim, modes)
            raise
        mps = None
        try:
            if planned is not None and self.mps is not None:
                mps = self.mps.start(claim.uid, planned, f"claim {_ref(claim)}")
            path = self._write_spec(claim.uid, names, mps)
            devices = tuple(
                PreparedDevice(tuple(requests[n]), self.pool, n, (cdi_id(claim.uid, n),))
                for n in names
            )
            prepared = Prepared(
                claim.namespace, claim.name, devices, str(path), mps, timeslice, modes
            )
            self.checkpoint.record(claim.uid, prepared)
        except BaseException:
            if mps is not None and self.mps is not None:  # never a daemon no claim records
                self.mps.stop(claim.uid, mps)
            self._restore_timeslices(claim, timeslice)
            self._restore_modes(claim, modes)
            raise
        return devices

    def _compute_modes(self, claim: ClaimRef, found: Sequence[Allocated]) -> tuple[Record, ...]:
        """Put the claim's GPUs in the compute mode its sharing needs: EXCLUSIVE_PROCESS for
        MPS (a MIG device's GPU), DEFAULT for time-slicing (whole GPUs: a MIG device's GPU is
        other claims' too); the records for the checkpoint."""
        wanted: dict[str, str] = {}
        for result in found:
            device = self.devices[result.device]
            if result.config.sharing == "MPS":
                wanted[_gpu_uuid(device)] = EXCLUSIVE_PROCESS
            elif result.config.sharing == "TimeSlicing" and device.kind == "gpu":
                wanted[device.uuid] = DEFAULT
        if not wanted or self.modes is None:
            return ()
        if isinstance(self.modes.program, str) and EXCLUSIVE_PROCESS not in wanted.values():
            # no nvidia-smi, so no one set a mode with it: DEFAULT is what the GPUs have
            log.warning("compute_mode_unchecked", claim=_ref(claim), error=self.modes.program)
            return ()
        try:
            return self.modes.claim(
                wanted, self._held(claim.uid), what=f"claim {_ref(claim)}: compute mode"
            )
        except SmiError as err:
            raise ClaimError(err.message, hint=err.hint) from err

    def _restore_modes(self, claim: ClaimRef, records: Sequence[Record]) -> None:
        """The modes ``records`` changed set back (errors logged: a failed prepare keeps its
        own error)."""
        if records and self.modes is not None:
            self.modes.give_back(records, self._held(claim.uid), what=_ref(claim), quiet=True)

    def _held(self, uid: str) -> dict[str, Record]:
        """The records of the GPUs whose compute mode another prepared claim than ``uid``
        holds, by UUID."""
        return {
            record[0]: record
            for other, prepared in self.checkpoint.claims.items()
            if other != uid
            for record in prepared.compute_mode
        }

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
        except SmiError as err:
            raise ClaimError(f"claim {_ref(claim)}: {err.message}", hint=err.hint) from err

    def _restore_timeslices(self, claim: ClaimRef, timeslice: Sequence[tuple[str, str]]) -> None:
        """Default again on the GPUs ``timeslice`` names (errors are logged: a failed prepare
        keeps its own error)."""
        if timeslice and self.timeslices is not None:
            try:
                self.timeslices.set([u for u, _ in timeslice], "Default")
            except SmiError as err:
                log.warning("timeslice_not_restored", claim=_ref(claim), error=err.one_line())

    def _plan_mps(
        self, claim: ClaimRef, names: Sequence[str], found: Sequence[Allocated]
    ) -> MpsRecord | None:
        """The claim's MPS daemon to start, where its config asks for one (for all its
        devices), checked before anything is set on its GPUs."""
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
        return self.mps.plan(gpus, wanted.pop(), where)

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
            if known.compute_mode and self.modes is not None:  # after the daemon's stop
                self.modes.give_back(
                    known.compute_mode, self._held(claim.uid), what=f"claim {_ref(claim)}"
                )
        for path in paths:
            path.unlink(missing_ok=True)
        self.checkpoint.forget(claim.uid)


def _gpu_uuid(device: DraDevice) -> str:
    """The UUID of the GPU ``device`` is (a MIG device's parent)."""
    parent = device.attributes.get("parentUUID")
    return str(parent["string"]) if parent is not None else device.uuid


def _ref(claim: ClaimRef) -> str:
    return f"{claim.namespace}/{claim.name} ({claim.uid})"
