"""OCI bundle and state documents: read ``config.json`` and the hook's stdin state."""

from __future__ import annotations

import os

from nvct.base import fastjson
from nvct.base.atomic import write_atomic

# GPU hooks a container spec may carry that nvct replaces: NVIDIA's, and nvct's own.
REPLACED_HOOKS = frozenset(
    {"nvidia-container-runtime-hook", "nvidia-container-toolkit", "nvct-hook"}
)
# In the arguments of the hook entries nvct writes (``nvct.engines.hooksd``): python -c "...".
HOOK_MARK = "nvct.hook"
# In the environment of a CDI spec's nvct-cdi-hook: the ld.so.cache entries ldconfig would add
# for the spec's libraries, ``[[soname, path, flags], ...]`` (JSON), for the hook to merge
# into the image's cache instead of running ldconfig. In the environment, not the arguments:
# a hook older than the spec ignores it (and runs ldconfig), where it refuses an option.
CDI_LD_CACHE_ENV = "NVCT_LD_CACHE_ENTRIES"

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

    from nvct.base.errors import SpecError

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
        raise _error(f"OCI state on stdin is larger than {MAX_STATE_BYTES} bytes")
    try:
        data = fastjson.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise _error(
            f"OCI state on stdin is not JSON ({err})",
            hint="nvct-hook must be run by an OCI runtime as a prestart hook",
        ) from err
    if not isinstance(data, dict):
        raise _error("OCI state on stdin is not a JSON object")
    pid = data.get("pid")
    bundle = data.get("bundle") or data.get("bundlePath")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise _error(f"OCI state has no valid pid (got {str(pid)[:32]!r})")
    if not isinstance(bundle, str) or not bundle.startswith("/"):
        raise _error(f"OCI state has no absolute bundle path (got {str(bundle)[:64]!r})")
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
        raise _error(
            f"cannot read {path}: {err.strerror}",
            hint="pass the bundle directory with --bundle, or run from it",
        ) from err
    if len(raw) > MAX_SPEC_BYTES:
        raise _error(f"{path} is larger than {MAX_SPEC_BYTES} bytes")
    try:
        spec = fastjson.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise _error(f"{path} is not valid JSON ({err})") from err
    if not isinstance(spec, dict):
        raise _error(f"{path} is not a JSON object")
    check_spec_shape(spec, str(path))
    return spec


def check_spec_shape(spec: dict[str, Any], source: str) -> None:
    """Check the types of the fields nvct reads, so a malformed spec is refused in one line
    (the image's author shapes ``process.env`` and friends).

    Raises:
        SpecError: a field nvct reads has the wrong JSON type.
    """

    def fail(field: str, kind: str) -> SpecError:
        return _error(f"{source}: {field} is not {kind}", hint="see the OCI runtime spec")

    process = spec.get("process")
    if process is not None:
        if not isinstance(process, dict):
            raise fail("process", "an object")
        env = process.get("env")
        if env is not None and (
            not isinstance(env, list) or not all(isinstance(e, str) for e in env)
        ):
            raise fail("process.env", "a list of strings")
        caps = process.get("capabilities")
        if caps is not None:
            if not isinstance(caps, dict):
                raise fail("process.capabilities", "an object")
            bounding = caps.get("bounding")
            if bounding is not None and not isinstance(bounding, list):
                raise fail("process.capabilities.bounding", "a list")
    mounts = spec.get("mounts")
    if mounts is not None and (
        not isinstance(mounts, list) or not all(isinstance(m, dict) for m in mounts)
    ):
        raise fail("mounts", "a list of objects")
    for key in ("root", "linux", "hooks"):
        if spec.get(key) is not None and not isinstance(spec[key], dict):
            raise fail(key, "an object")
    linux = spec.get("linux") or {}
    if linux.get("devices") is not None and not isinstance(linux["devices"], list):
        raise fail("linux.devices", "a list")
    resources = linux.get("resources")
    if resources is not None and not isinstance(resources, dict):
        raise fail("linux.resources", "an object")
    rules = (resources or {}).get("devices")
    if rules is not None and not isinstance(rules, list):
        raise fail("linux.resources.devices", "a list")
    for stage, hooks in (spec.get("hooks") or {}).items():
        if hooks is not None and not isinstance(hooks, list):
            raise fail(f"hooks.{stage}", "a list")


def write_spec(bundle: str | os.PathLike[str], spec: dict[str, Any]) -> None:
    """Replace ``<bundle>/config.json`` atomically, keeping its permissions."""
    path = os.path.join(bundle, "config.json")
    try:
        # No fsync: a bundle does not survive a reboot, and the runtime reads it right away
        # (an fsync costs a journal commit per GPU container start).
        mode = os.stat(path).st_mode & 0o777
        write_atomic(path, fastjson.dumps(spec).encode(), mode, durable=False)
    except OSError as err:
        raise _error(f"cannot write {path}: {err.strerror}") from err


def rootfs_path(spec: dict[str, Any], bundle: str | os.PathLike[str]) -> str:
    """The container's root filesystem (``root.path``, relative to the bundle)."""
    root = spec.get("root")
    path = root.get("path") if isinstance(root, dict) else None
    if not isinstance(path, str) or not path:
        raise _error(f"{os.fspath(bundle)}/config.json has no root.path")
    return path if path.startswith("/") else os.path.join(bundle, path)


def _error(message: str, hint: str | None = None) -> SpecError:
    """A ``SpecError``: ``nvct.base.errors`` is loaded by the first one, so a create whose
    spec is fine never loads it (~0.2 ms)."""
    from nvct.base.errors import SpecError

    return SpecError(message, hint=hint)
