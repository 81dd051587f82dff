"""Edits the shim makes to a container's OCI spec (``config.json``) for a plan.

- one prestart hook running nvct's hook with an explicit environment, replacing NVIDIA's
  (``nvidia-container-runtime-hook`` / ``nvidia-container-toolkit``, which dockerd adds for
  ``--gpus``) and any earlier nvct hook, so it never runs twice;
- the plan's device nodes in ``linux.devices`` and matching allow rules in
  ``linux.resources.devices``: runc (and systemd with the systemd cgroup driver) then own
  device access on cgroup v1 and v2, and a ``systemctl daemon-reload`` cannot revoke it.
"""

from __future__ import annotations

import posixpath

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


REPLACED_HOOKS = frozenset(
    {"nvidia-container-runtime-hook", "nvidia-container-toolkit", "nvct-hook"}
)
HOOK_MARK = "nvct.hook"


def hook_entry(python: str, hook_path: str, env: list[str]) -> dict[str, Any]:
    """The prestart hook nvct adds: ``hook_path prestart``, or nvct's hook run by ``python``.

    The default form works wherever this nvct came from (a venv, an editable checkout, the
    packages' private tree): the interpreter runs isolated (``-I``: no PYTHON* variables, no
    working directory on sys.path — runc runs hooks in the bundle, which the image's author
    may control) and is told explicitly where nvct lives.
    """
    if hook_path:
        return {"path": hook_path, "args": [posixpath.basename(hook_path), "prestart"], "env": env}
    import nvct  # the package this shim runs from

    home = posixpath.dirname(posixpath.dirname(posixpath.abspath(nvct.__file__)))
    flags = "-IS"  # no site: the hook's path with a work order is stdlib-only (see nvct._site)
    code = (
        f"import sys; sys.path.insert(0, {home!r}); "
        f"from {HOOK_MARK}.__main__ import main; sys.exit(main())"
    )
    return {"path": python, "args": [python, flags, "-c", code, "prestart"], "env": env}


def _is_gpu_hook(hook: Any) -> bool:
    if not isinstance(hook, dict):
        return False
    path = str(hook.get("path", ""))
    args = hook.get("args") or []
    return posixpath.basename(path) in REPLACED_HOOKS or any(HOOK_MARK in str(a) for a in args)


def edit_spec(spec: dict[str, Any], nodes: list[list[Any]], hook: dict[str, Any]) -> None:
    """Apply the shim's edits to ``spec`` in place (idempotent).

    ``nodes`` are the work order's ``[path, major, minor, mode]`` entries.
    """
    hooks = spec.setdefault("hooks", {})
    prestart = [h for h in hooks.get("prestart") or () if not _is_gpu_hook(h)]
    prestart.append(hook)
    hooks["prestart"] = prestart

    linux = spec.setdefault("linux", {})
    devices = linux.setdefault("devices", [])
    present = {d.get("path") for d in devices if isinstance(d, dict)}
    resources = linux.setdefault("resources", {})
    rules = resources.setdefault("devices", [])
    allowed = {
        (r.get("type"), r.get("major"), r.get("minor"))
        for r in rules
        if isinstance(r, dict) and r.get("allow") and r.get("access") == "rwm"
    }
    for path, major, minor, mode in nodes:
        if path not in present:
            devices.append(
                {
                    "path": path,
                    "type": "c",
                    "major": major,
                    "minor": minor,
                    "fileMode": 0o666 if mode & 0o666 == 0o666 else mode,
                    "uid": 0,
                    "gid": 0,
                }
            )
            present.add(path)
        if ("c", major, minor) not in allowed:
            rules.append(
                {"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"}
            )
            allowed.add(("c", major, minor))


def remove_gpu_hooks(spec: dict[str, Any]) -> bool:
    """Drop NVIDIA/nvct prestart hooks from a spec that asks for no GPU; True if changed."""
    hooks = spec.get("hooks")
    if not isinstance(hooks, dict) or not hooks.get("prestart"):
        return False
    kept = [h for h in hooks["prestart"] if not _is_gpu_hook(h)]
    if len(kept) == len(hooks["prestart"]):
        return False
    hooks["prestart"] = kept
    return True
