"""Edits the shim makes to a container's OCI spec (``config.json``) for a plan.

- NVIDIA's prestart hooks (``nvidia-container-runtime-hook`` / ``nvidia-container-toolkit``,
  which dockerd adds for ``--gpus``) and nvct's own are removed: the shim has done their work,
  and it must not be done twice;
- the plan's bind mounts in ``mounts``, for the runtime to make (it resolves each destination
  inside the rootfs, as for any volume);
- the plan's device nodes in ``linux.devices`` and matching allow rules in
  ``linux.resources.devices``: runc (and systemd with the systemd cgroup driver) then own
  device access on cgroup v1 and v2, and a ``systemctl daemon-reload`` cannot revoke it.
"""

from __future__ import annotations

import posixpath

from nvct.base.oci import HOOK_MARK, REPLACED_HOOKS

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from nvct.base.order import DeviceRow, MountRow, WorkOrder


def _is_gpu_hook(hook: Any) -> bool:
    if not isinstance(hook, dict):
        return False
    path = str(hook.get("path", ""))
    args = hook.get("args") or []
    return posixpath.basename(path) in REPLACED_HOOKS or any(HOOK_MARK in str(a) for a in args)


def edit_spec(
    spec: dict[str, Any],
    nodes: Sequence[DeviceRow],
    mounts: Sequence[MountRow],
    create_hooks: Sequence[dict[str, Any]] = (),
) -> None:
    """Apply the shim's edits to ``spec`` in place (idempotent).

    ``nodes`` are the work order's ``[path, major, minor, mode]`` entries and ``mounts`` its
    ``[host path, container path, options]`` bind mounts; ``create_hooks`` are
    ``createContainer`` hooks for what only the container's mount namespace can hold
    (``/proc/driver/nvidia``: runtimes refuse spec mounts inside ``/proc``).
    """
    remove_gpu_hooks(spec)
    if create_hooks:
        hooks = spec.setdefault("hooks", {})
        present = hooks.setdefault("createContainer", [])
        present += [h for h in create_hooks if h not in present]

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
            devices.append(device_entry(path, major, minor, mode))
            present.add(path)
        if ("c", major, minor) not in allowed:
            rules.append(allow_rule(major, minor))
            allowed.add(("c", major, minor))

    spec_mounts = spec.setdefault("mounts", [])
    have = {(m.get("source"), m.get("destination")) for m in spec_mounts}
    for source, target, options in mounts:
        if (source, target) not in have:
            spec_mounts.append(bind_mount(source, target, options))
            have.add((source, target))


def device_entry(path: str, major: int, minor: int, mode: int) -> dict[str, Any]:
    """A work order's device node as ``linux.devices`` lists it."""
    file_mode = 0o666 if mode & 0o666 == 0o666 else mode
    return {
        "path": path,
        "type": "c",
        "major": major,
        "minor": minor,
        "fileMode": file_mode,
        "uid": 0,
        "gid": 0,
    }


def allow_rule(major: int, minor: int) -> dict[str, Any]:
    """The ``linux.resources.devices`` rule that lets the container use that node."""
    return {"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"}


def bind_mount(source: str, target: str, options: Sequence[str]) -> dict[str, Any]:
    """A work order's bind mount as ``mounts`` lists it."""
    return {"destination": target, "type": "bind", "source": source, "options": list(options)}


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


def add_cdi_edits(spec: dict[str, Any], order: WorkOrder) -> None:
    """The variables, OCI hooks and groups of a work order made from CDI devices (in place).

    Idempotent, as ``edit_spec`` is: an engine with CDI on (CRI-O, containerd with
    ``enable_cdi``) may already have applied the same devices, since it resolves the
    ``cdi.k8s.io/*`` annotations nvct-runtime also sees; a hook already there is not added
    again (it would run twice).
    """
    if order.get("env"):
        process = spec.setdefault("process", {})
        names = {e.partition("=")[0] for e in order["env"]}
        kept = [e for e in process.get("env") or () if e.partition("=")[0] not in names]
        process["env"] = [*kept, *order["env"]]  # CDI's variables replace the image's
    for stage, hook in order.get("hooks") or ():
        present = spec.setdefault("hooks", {}).setdefault(stage, [])
        if not any(same_hook(hook, h) for h in present):
            present.append(hook)
    if order.get("additional_gids"):
        user = spec.setdefault("process", {}).setdefault("user", {})
        gids = user.setdefault("additionalGids", [])
        gids += [g for g in order["additional_gids"] if g not in gids]


def same_hook(ours: dict[str, Any], theirs: Any) -> bool:
    """Whether two OCI hooks are one (an engine omits empty fields, as the OCI types do)."""
    if not isinstance(theirs, dict):
        return False
    keys = ("path", "args", "env", "timeout")
    return all((ours.get(k) or None) == (theirs.get(k) or None) for k in keys)
