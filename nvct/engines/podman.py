"""podman (and CRI-O's hooks mode): an OCI hooks.d JSON running ``nvct-hook prestart``.

The file is the one kept in the source tree as ``hooks/oci-nvct-hook.json`` (a test keeps
the two equal), with the hook's path resolved for this installation. The hook runs for every
container (``when.always``: the hooks format cannot match on environment variables) and does
nothing for containers that ask for no GPU. The hook entry has an explicit ``env``, so the
container's environment never reaches the interpreter. CDI is the alternative that needs no
hook at all: ``nvct-cli cdi generate``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from nvct.base.errors import EngineConfigError
from nvct.engines import HOOK_BINARY, Edit, EngineOptions
from nvct.engines.files import FileChange

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

HOOKS_DIRS = (Path("/usr/share/containers/oci/hooks.d"), Path("/etc/containers/oci/hooks.d"))
HOOK_FILE = "oci-nvct-hook.json"
DEFAULT_CONFIG = HOOKS_DIRS[0] / HOOK_FILE
CONTAINERS_CONF = Path("/etc/containers/containers.conf")
CDI_HINT = (
    "or use CDI instead of a hook: nvct-cli cdi generate --output /etc/cdi/nvct.json, "
    "then podman run --device nvidia.com/gpu=0 ..."
)


def hook_document(hook: dict[str, Any]) -> dict[str, Any]:
    """The hooks.d document (schema 1.0.0) for a hook entry (path, args, env)."""
    return {"version": "1.0.0", "hook": hook, "when": {"always": True}, "stages": ["prestart"]}


def render(hook: dict[str, Any]) -> str:
    """The hooks.d file text."""
    return json.dumps(hook_document(hook), indent=2) + "\n"


def _is_ours(data: Any) -> bool:
    hook = data.get("hook") if isinstance(data, dict) else None
    if not isinstance(hook, dict):
        return False
    words = [str(hook.get("path", "")), *map(str, hook.get("args") or ())]
    return any(w.endswith(HOOK_BINARY) or w == "nvct.hook" for w in words)


def edit(text: str | None, opts: EngineOptions) -> Edit:
    """The hook file's new text (``None`` for ``--undo``).

    Raises:
        EngineConfigError: a file of that name exists and is not nvct's hook.
    """
    data: Any = None
    if text is not None:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as err:
            raise EngineConfigError(
                f"{opts.config_path} exists and is not valid JSON ({err})",
                hint="move it away; nvct will not overwrite a file it cannot read",
            ) from err
        if not _is_ours(data):
            raise EngineConfigError(
                f"{opts.config_path} exists and is not nvct's hook", hint="move it away"
            )
    if opts.undo:
        return Edit(None)
    wanted = hook_document(opts.hook)
    if data == wanted:
        return Edit(text, (CDI_HINT,))
    return Edit(render(opts.hook), (CDI_HINT,))


def validate(change: FileChange, opts: EngineOptions) -> None:
    """``edit`` renders the document itself: nothing more to check."""


def next_step(opts: EngineOptions) -> str:
    """Podman reads hooks.d for each container: nothing to restart."""
    return "nothing to restart: podman reads the hooks directory for every container"


def hooks_dirs() -> list[Path]:
    """The directories podman reads hooks from (containers.conf ``engine.hooks_dir``)."""
    try:
        conf = tomllib.loads(CONTAINERS_CONF.read_text())
    except (OSError, ValueError, RecursionError):
        return list(HOOKS_DIRS)
    dirs = (conf.get("engine") or {}).get("hooks_dir")
    if isinstance(dirs, list) and dirs:
        return [Path(d) for d in dirs if isinstance(d, str)]
    return list(HOOKS_DIRS)


def checks(opts: EngineOptions) -> list[str]:
    """A warning when podman does not read the directory the hook went to."""
    directory = opts.config_path.parent
    if opts.undo or any(directory == d for d in hooks_dirs()):
        return []
    return [
        f"podman does not read hooks from {directory} by default: "
        f"run podman with --hooks-dir {directory}, or set hooks_dir in {CONTAINERS_CONF}"
    ]
