"""A CDI spec as typed values (the CDI project's ``specs-go``), and the JSON its files hold.

The writer (``nvct.plan.cdi_spec``) builds these; ``to_dict`` gives the JSON-ready mapping,
with the CDI field names, in the order the CDI schema lists them. An edit left ``None`` is not
written at all (an empty one is written empty, as NVIDIA's specs write a device's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A character device the container gets: its path there and the host's node."""

    path: str
    host_path: str
    major: int
    minor: int
    type: str = "c"

    def to_dict(self) -> dict[str, Any]:
        """The spec's ``deviceNodes`` entry."""
        return {
            "path": self.path,
            "hostPath": self.host_path,
            "type": self.type,
            "major": self.major,
            "minor": self.minor,
        }


@dataclass(frozen=True, slots=True)
class Mount:
    """A bind mount of a host path into the container."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The spec's ``mounts`` entry."""
        return {
            "hostPath": self.host_path,
            "containerPath": self.container_path,
            "options": list(self.options),
        }


@dataclass(frozen=True, slots=True)
class Hook:
    """An OCI hook the engine adds (``hook_name``: its stage, e.g. ``createContainer``)."""

    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The spec's ``hooks`` entry."""
        return {
            "hookName": self.hook_name,
            "path": self.path,
            "args": list(self.args),
            "env": list(self.env),
        }


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    """What a device (or the whole spec) adds to a container; ``None``: not written."""

    env: tuple[str, ...] | None = None
    device_nodes: tuple[DeviceNode, ...] | None = None
    mounts: tuple[Mount, ...] | None = None
    hooks: tuple[Hook, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The spec's ``containerEdits``."""
        out: dict[str, Any] = {}
        if self.env is not None:
            out["env"] = list(self.env)
        if self.device_nodes is not None:
            out["deviceNodes"] = [n.to_dict() for n in self.device_nodes]
        if self.mounts is not None:
            out["mounts"] = [m.to_dict() for m in self.mounts]
        if self.hooks is not None:
            out["hooks"] = [h.to_dict() for h in self.hooks]
        return out


@dataclass(frozen=True, slots=True)
class Device:
    """A named device of a spec (``kind=name`` qualified)."""

    name: str
    container_edits: ContainerEdits

    def to_dict(self) -> dict[str, Any]:
        """The spec's ``devices`` entry."""
        return {"name": self.name, "containerEdits": self.container_edits.to_dict()}


@dataclass(frozen=True, slots=True)
class Spec:
    """A whole spec file: its devices of one kind and the edits every one of them brings."""

    cdi_version: str
    kind: str
    devices: tuple[Device, ...]
    container_edits: ContainerEdits | None = None

    def to_dict(self) -> dict[str, Any]:
        """The spec as the JSON-ready mapping its file holds."""
        out: dict[str, Any] = {
            "cdiVersion": self.cdi_version,
            "kind": self.kind,
            "devices": [d.to_dict() for d in self.devices],
        }
        if self.container_edits is not None:
            out["containerEdits"] = self.container_edits.to_dict()
        return out
