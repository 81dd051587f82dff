"""The CDI specs on the host: every vendor's devices by fully-qualified name.

Read from the spec directories (default ``/etc/cdi`` then ``/var/run/cdi``) by the CDI rules:
``*.json`` and ``*.yaml`` files, each a spec of one kind (``vendor/class``); a device of the
same name in a later directory replaces an earlier one (dynamic specs override static ones);
two of the same name in one directory are a conflict and that name is not used at all (from
no directory: the CDI library's rule, which containerd and CRI-O follow). A file that cannot be
read or is not a spec is a problem named on one line, and the other files stay usable.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvct.base.errors import RequestError
from nvct.cdi.names import KIND, PLUGIN_KIND, split_qualified
from nvct.cdi.names import PLUGIN_SPEC_NAME as PLUGIN_SPEC
from nvct.host.fingerprint import CDI_SUFFIXES

SUFFIXES = CDI_SUFFIXES
# The common env entry nvct's specs record their driver version in (nvct.plan.cdi_spec).
DRIVER_VERSION_ENV = "NVCT_CDI_DRIVER_VERSION"
MAX_SPEC_BYTES = 16 << 20
_SHOWN_NAMES = 24


@dataclass(frozen=True, slots=True)
class CdiDevice:
    """A device of a CDI spec: its edits, and the spec-wide edits that come with it."""

    name: str  # fully qualified: nvidia.com/gpu=0
    path: str  # the spec file
    edits: Mapping[str, Any]  # the device's containerEdits
    spec_edits: Mapping[str, Any]  # the spec's own containerEdits


@dataclass(frozen=True, slots=True)
class Conflict:
    """A device name two spec files of one directory define: neither is used."""

    name: str
    first: str
    second: str

    def line(self) -> str:
        """The problem in one line."""
        return f"{self.name} is defined by both {self.first} and {self.second}: neither is used"

    def fix(self) -> str:
        """Which file to remove or regenerate."""
        kind, _ = split_qualified(self.name)
        stale = [p for p in (self.first, self.second) if Path(p).name == PLUGIN_SPEC]
        if stale:  # nvct-device-plugin before it had a kind of its own
            return (
                f"restart nvct-device-plugin: it rewrites {stale[0]} as {PLUGIN_KIND}, "
                f"apart from the node's {kind} spec"
            )
        return (
            f"keep one {kind} spec per directory: remove {self.second} (or {self.first}), or "
            "regenerate one with a vendor of its own (nvct-cli cdi generate --vendor <domain> "
            "--output <file>)"
        )


@dataclass(frozen=True, slots=True)
class CdiSpecs:
    """The devices found, a line per file that could not be used, and the names in conflict."""

    devices: Mapping[str, CdiDevice]
    problems: tuple[str, ...]
    conflicts: tuple[Conflict, ...] = ()

    def resolve(self, names: Sequence[str]) -> list[CdiDevice]:
        """The devices named, in order.

        Raises:
            RequestError: a name no spec defines (the message lists the names that exist).
        """
        unknown = [n for n in names if n not in self.devices]
        if not unknown:
            return [self.devices[n] for n in names]
        conflict = next((c for c in self.conflicts if c.name in unknown), None)
        if conflict is not None:
            raise RequestError(f"CDI device {conflict.line()}", hint=conflict.fix())
        known = sorted(self.devices)
        shown = ", ".join(known[:_SHOWN_NAMES]) + (" ..." if len(known) > _SHOWN_NAMES else "")
        problems = f"; unreadable: {'; '.join(self.problems)}" if self.problems else ""
        raise RequestError(
            f"unknown CDI device {unknown[0]!r} (known: {shown or 'none'}){problems}",
            hint="generate the spec (nvct-cli cdi generate --output /etc/cdi/nvidia.yaml) "
            "or name a listed device",
        )


def load_spec_file(path: Path) -> dict[str, Any]:
    """Parse one spec file (PyYAML, a dependency of every install, is imported only for YAML
    files: nvct-runtime's hot path reads none).

    Raises:
        ValueError: unreadable, not JSON/YAML, or not a mapping; the message names the file.
    """
    try:
        raw = path.read_bytes()[: MAX_SPEC_BYTES + 1]
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from err
    if len(raw) > MAX_SPEC_BYTES:
        raise ValueError(f"{path} is larger than {MAX_SPEC_BYTES} bytes")
    if path.suffix == ".json":
        try:
            data = json.loads(raw)
        except ValueError as err:
            raise ValueError(f"{path} is not valid JSON ({err})") from err
        except RecursionError:  # json recurses per nested array or object
            raise ValueError(f"{path} is not valid JSON (nested too deeply)") from None
    else:
        try:
            import yaml
        except ImportError as err:
            raise ValueError(
                f"{path} is YAML and PyYAML, a dependency of nvct, cannot be imported ({err}): "
                "reinstall nvct (its package, or pip install nvct)"
            ) from err
        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise ValueError(f"{path} is not valid YAML ({' '.join(str(err).split())})") from err
        except RecursionError:  # PyYAML's composer recurses per nested node
            raise ValueError(f"{path} is not valid YAML (nested too deeply)") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a CDI spec (not a mapping)")
    return data


def spec_files(directory: Path) -> list[Path]:
    """The spec files of a directory, by name (a missing directory has none).

    Raises:
        OSError: the directory exists but cannot be listed.
    """
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    return [directory / n for n in names if n.endswith(SUFFIXES) and (directory / n).is_file()]


def load_cdi_specs(dirs: Sequence[str | Path]) -> CdiSpecs:
    """Every device of the specs in ``dirs``, by the CDI rules (see the module doc)."""
    devices: dict[str, CdiDevice] = {}
    problems: list[str] = []
    conflicts: list[Conflict] = []
    in_conflict: set[str] = set()
    for directory in map(Path, dirs):
        try:
            files = spec_files(directory)
        except OSError as err:
            problems.append(f"cannot list {directory}: {err.strerror}")
            continue
        here: dict[str, CdiDevice] = {}
        for path in files:
            try:
                found = _devices_of(path, load_spec_file(path))
            except ValueError as err:
                problems.append(str(err))
                continue
            for device in found:
                if device.name in here:
                    clash = Conflict(device.name, here[device.name].path, str(path))
                    in_conflict.add(device.name)
                    conflicts.append(clash)
                    problems.append(clash.line())
                here[device.name] = device
        devices.update(here)
    # As the CDI library does: a name in conflict is used from no directory at all, so
    # nvct-runtime resolves exactly what containerd and CRI-O resolve.
    for name in in_conflict:
        devices.pop(name, None)
    return CdiSpecs(devices, tuple(problems), tuple(conflicts))


def _devices_of(path: Path, spec: dict[str, Any]) -> list[CdiDevice]:
    kind = spec.get("kind")
    if not isinstance(kind, str) or not KIND.match(kind):
        raise ValueError(f"{path}: 'kind' must be vendor/class (e.g. nvidia.com/gpu)")
    spec_edits = spec.get("containerEdits") or {}
    entries = spec.get("devices")
    if not isinstance(spec_edits, dict) or not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: a CDI spec needs a 'devices' list (and mapping edits)")
    out = []
    for entry in entries:
        name = entry.get("name") if isinstance(entry, dict) else None
        edits = entry.get("containerEdits") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or not isinstance(edits, dict):
            raise ValueError(f"{path}: every device needs a 'name' and 'containerEdits'")
        out.append(CdiDevice(f"{kind}={name}", str(path), edits, spec_edits))
    return out


def node_numbers(node: Mapping[str, Any]) -> tuple[str, int, int, int]:
    """``(type, major, minor, mode)`` of a CDI device node: as the spec gives them, else read
    from the node on the host (``hostPath``, else ``path``), as CDI-enabled engines do.

    Raises:
        RequestError: the node is not a device, or it does not exist and the spec gives no
            numbers.
    """
    path = str(node.get("path", ""))
    host = str(node.get("hostPath") or path)
    kind, major, minor = node.get("type"), node.get("major"), node.get("minor")
    mode = node.get("fileMode")
    if not (isinstance(major, int) and isinstance(minor, int) and kind in ("c", "b", "u")):
        try:
            st = os.stat(host)
        except OSError as err:
            raise RequestError(
                f"CDI device node {host} cannot be read: {err.strerror}",
                hint="regenerate the CDI spec (the driver's device nodes changed)",
            ) from err
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
            raise RequestError(f"CDI device node {host} is not a device", hint="fix the CDI spec")
        kind = "b" if stat.S_ISBLK(st.st_mode) else "c"
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
        mode = mode if isinstance(mode, int) else stat.S_IMODE(st.st_mode)
    return str(kind), major, minor, mode if isinstance(mode, int) else 0o666


def spec_env(spec: Mapping[str, Any], name: str) -> str | None:
    """The value of ``name`` in a spec's common env edits (None: not set there, or a spec
    file whose edits are not a mapping)."""
    edits = spec.get("containerEdits")
    for item in (edits.get("env") if isinstance(edits, dict) else None) or ():
        key, _, value = str(item).partition("=")
        if key == name:
            return value
    return None


def driver_version(spec: dict[str, Any]) -> str | None:
    """The driver version a spec was generated for."""
    return spec_env(spec, DRIVER_VERSION_ENV)


def device_names(spec: dict[str, Any]) -> list[str]:
    """Fully qualified device names (``nvidia.com/gpu=0``) of a spec."""
    kind = spec.get("kind")
    if not isinstance(kind, str):
        return []
    return [
        f"{kind}={d['name']}"
        for d in spec.get("devices") or ()
        if isinstance(d, dict) and isinstance(d.get("name"), str)
    ]
