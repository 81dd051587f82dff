"""OCI bundle and state documents: read ``config.json`` and the hook's stdin state."""

from __future__ import annotations

import json
import os

from nvct.errors import SpecError

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

MAX_STATE_BYTES = 1 << 20
MAX_SPEC_BYTES = 64 << 20


class State:
    """The OCI state a runtime passes to hooks on stdin.

    A plain slotted class rather than a dataclass: the hook's hot path imports no
    dataclasses machinery.
    """

    __slots__ = ("bundle", "container_id", "pid")

    def __init__(self, *, container_id: str, pid: int, bundle: str) -> None:
        self.container_id = container_id
        self.pid = pid
        self.bundle = bundle


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
    return State(container_id=str(data.get("id", ""))[:128], pid=pid, bundle=bundle)


def load_spec(bundle: str | os.PathLike[str]) -> dict[str, Any]:
    """Read ``<bundle>/config.json``.

    Raises:
        SpecError: missing, unreadable, too large or not a JSON object.
    """
    path = os.path.join(bundle, "config.json")
    try:
        with open(path, "rb") as f:
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


def write_spec(bundle: str | os.PathLike[str], spec: dict[str, Any]) -> None:
    """Replace ``<bundle>/config.json`` atomically, keeping its permissions."""
    path = os.path.join(bundle, "config.json")
    tmp = os.path.join(bundle, f".config.json.nvct-{os.getpid()}")
    data = json.dumps(spec, separators=(",", ":")).encode()
    try:
        mode = os.stat(path).st_mode & 0o777
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as err:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise SpecError(f"cannot write {path}: {err.strerror}") from err


def rootfs_path(spec: dict[str, Any], bundle: str | os.PathLike[str]) -> str:
    """The container's root filesystem (``root.path``, relative to the bundle)."""
    root = spec.get("root")
    path = root.get("path") if isinstance(root, dict) else None
    if not isinstance(path, str) or not path:
        raise SpecError(f"{os.fspath(bundle)}/config.json has no root.path")
    return path if path.startswith("/") else os.path.join(bundle, path)
