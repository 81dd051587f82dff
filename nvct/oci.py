"""OCI bundle and state documents: read ``config.json`` and the hook's stdin state."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvct.errors import SpecError

MAX_STATE_BYTES = 1 << 20
MAX_SPEC_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class State:
    """The OCI state a runtime passes to hooks on stdin."""

    container_id: str
    pid: int
    bundle: Path


def parse_state(raw: bytes) -> State:
    """Parse the hook's stdin.

    Raises:
        SpecError: not JSON, or no ``pid`` / ``bundle``.
    """
    if len(raw) > MAX_STATE_BYTES:
        raise SpecError(f"OCI state on stdin is larger than {MAX_STATE_BYTES} bytes")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise SpecError(
            f"OCI state on stdin is not JSON ({err})",
            hint="nvct-hook must be run by an OCI runtime as a prestart hook",
        ) from err
    if not isinstance(data, dict):
        raise SpecError("OCI state on stdin is not a JSON object")
    pid = data.get("pid")
    bundle = data.get("bundle") or data.get("bundlePath")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise SpecError(f"OCI state has no valid pid (got {str(pid)[:32]!r})")
    if not isinstance(bundle, str) or not bundle.startswith("/"):
        raise SpecError(f"OCI state has no absolute bundle path (got {str(bundle)[:64]!r})")
    return State(container_id=str(data.get("id", ""))[:128], pid=pid, bundle=Path(bundle))


def load_spec(bundle: Path) -> dict[str, Any]:
    """Read ``<bundle>/config.json``.

    Raises:
        SpecError: missing, unreadable, too large or not a JSON object.
    """
    path = bundle / "config.json"
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        raise SpecError(
            f"cannot read {path}: {err.strerror}",
            hint="pass the bundle directory with --bundle, or run from it",
        ) from err
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(f"{path} is larger than {MAX_SPEC_BYTES} bytes")
    try:
        spec = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise SpecError(f"{path} is not valid JSON ({err})") from err
    if not isinstance(spec, dict):
        raise SpecError(f"{path} is not a JSON object")
    return spec


def write_spec(bundle: Path, spec: dict[str, Any]) -> None:
    """Replace ``<bundle>/config.json`` atomically, keeping its permissions."""
    path = bundle / "config.json"
    tmp = bundle / f".config.json.nvct-{os.getpid()}"
    data = json.dumps(spec, separators=(",", ":")).encode()
    try:
        mode = path.stat().st_mode & 0o777
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise SpecError(f"cannot write {path}: {err.strerror}") from err


def rootfs_path(spec: dict[str, Any], bundle: Path) -> Path:
    """The container's root filesystem (``root.path``, relative to the bundle)."""
    root = spec.get("root")
    path = root.get("path") if isinstance(root, dict) else None
    if not isinstance(path, str) or not path:
        raise SpecError(f"{bundle}/config.json has no root.path")
    return bundle / path if not path.startswith("/") else Path(path)
