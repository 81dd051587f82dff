"""Prepare and unprepare, as the kubelet asks them: per claim, idempotent, serialised.

Prepare: a claim already in the checkpoint is answered as before (its spec rewritten if it was
removed meanwhile); otherwise the ResourceClaim is read from the API server, its devices of
this driver and pool are checked against what this node offers and their configuration, its
CDI spec is written, and the claim is recorded, then answered. Unprepare removes the spec and
forgets the claim; a claim never prepared (or already unprepared) is done at once, as the
kubelet's retries need. A claim's failure is its own one-line error; the others go on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from nvct.base.errors import NvctError
from nvct.dra.checkpoint import Checkpoint, Prepared, PreparedDevice
from nvct.dra.claim import ClaimError, allocated
from nvct.dra.claimspec import NodeSpec, cdi_id, spec_path, valid_uid, write_claim_spec
from nvct.dra.devices import DraDevice

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
    ) -> None:
        self.name = name
        self.pool = pool
        self.devices = {d.name: d for d in devices}
        self.node_spec = node_spec
        self.cdi_dir = cdi_dir
        self.checkpoint = checkpoint
        self.fetch = fetch
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
                line = f"cannot remove the CDI spec of claim {_ref(claim)}: {err.strerror}"
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
                self._write_spec(claim.uid, [d.device for d in known.devices])
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
        path = self._write_spec(claim.uid, names)
        devices = tuple(
            PreparedDevice(tuple(requests[n]), self.pool, n, (cdi_id(claim.uid, n),)) for n in names
        )
        self.checkpoint.record(claim.uid, Prepared(claim.namespace, claim.name, devices, str(path)))
        return devices

    def _write_spec(self, uid: str, names: Sequence[str]) -> Path:
        gone = [n for n in names if n not in self.devices]
        if gone:  # a checkpointed claim whose GPU left the node: never a spec without it
            raise ClaimError(
                f"claim {uid}: device {gone[0]} it was prepared with is no longer on this node",
                hint="delete the pod; its claim is allocated again from the current devices",
            )
        pairs = [(n, self.devices[n].uuid) for n in names]
        return write_claim_spec(self.cdi_dir, self.node_spec, uid, pairs)

    def _unprepare(self, claim: ClaimRef) -> None:
        known = self.checkpoint.claims.get(claim.uid)
        paths = {spec_path(self.cdi_dir, claim.uid)} if valid_uid(claim.uid) else set()
        if known is not None:
            paths.add(Path(known.spec))
        for path in paths:
            path.unlink(missing_ok=True)
        self.checkpoint.forget(claim.uid)


def _ref(claim: ClaimRef) -> str:
    return f"{claim.namespace}/{claim.name} ({claim.uid})"
