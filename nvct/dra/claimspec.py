"""A claim's own CDI spec: the devices allocated to it, under names no other claim has.

Built from the spec the device plugin's writer renders (``nvct.plan.cdi_spec.build_spec``),
once at start: its common edits (control nodes, driver files, the nvct-cdi-hook run) and each
device's nodes by UUID. A claim's spec takes the common edits and, per device, that device's
edits renamed ``<claim uid>-<device name>``, of kind ``k8s.gpu.nvct.io/claim`` (one file per
claim, ``nvct-dra-claim-<uid>.json``): removing the file is all an unprepare has to undo.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvct.base.atomic import write_atomic
from nvct.cdi.names import DRA_KIND, DRA_SPEC_PREFIX

# A claim's UID as the API server makes them (a UUID); anything else never names a file.
_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What every claim's spec is cut from: the common edits and each device's by UUID."""

    version: str
    common: Mapping[str, Any]
    by_uuid: Mapping[str, Mapping[str, Any]]

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> NodeSpec:
        """From a spec ``build_spec`` rendered with UUID names."""
        devices = {d["name"]: d["containerEdits"] for d in spec["devices"] if d["name"] != "all"}
        return cls(spec["cdiVersion"], spec.get("containerEdits") or {}, devices)


def valid_uid(uid: str) -> bool:
    """Whether ``uid`` can name a spec file and a CDI device."""
    return _UID.match(uid) is not None


def spec_path(directory: Path, uid: str) -> Path:
    return directory / f"{DRA_SPEC_PREFIX}{uid}.json"


def cdi_id(uid: str, device: str) -> str:
    return f"{DRA_KIND}={uid}-{device}"


def write_claim_spec(
    directory: Path,
    node: NodeSpec,
    uid: str,
    devices: Sequence[tuple[str, str]],
    extra: Mapping[str, Sequence[Any]] | None = None,
) -> Path:
    """Write the spec of claim ``uid`` for ``devices`` ((device name, UUID) pairs); ``extra``:
    container edits of the claim's own (its MPS daemon's), appended to the common ones."""
    common = dict(node.common)
    for key, values in (extra or {}).items():
        common[key] = [*(common.get(key) or ()), *values]
    spec = {
        "cdiVersion": node.version,
        "kind": DRA_KIND,
        "devices": [
            {"name": f"{uid}-{name}", "containerEdits": node.by_uuid[uuid]}
            for name, uuid in devices
        ],
        "containerEdits": common,
    }
    path = spec_path(directory, uid)
    directory.mkdir(parents=True, exist_ok=True)
    # No fsync: /var/run is a tmpfs, and a spec that a crash could lose a reboot loses anyway.
    write_atomic(str(path), json.dumps(spec, indent=2).encode(), 0o644, durable=False)
    return path
