"""The work order: a plan reduced to plain JSON data, all that carrying it out needs.

The shim caches it per kind of container (so a repeated start needs no config, inventory or
planning code) and applies it before the runtime starts; the hook (``docker --gpus``, podman)
applies the one it plans itself. Format::

    {"v": 3, "devices": [[path, major, minor, mode], ...],
     "mounts": [[host_path, container_path, [options]], ...],
     "symlinks": [[path, target], ...], "ldconfig": "/sbin/ldconfig",
     "ldconfig_dirs": [...], "ld_cache": [[soname, path, flags], ...],
     "libdirs": [[host_dir, container_dir, [[host_path, name], ...], [[name, target], ...]]],
     "log": [file, level], "gpus": [...], "capabilities": [...]}

``libdirs`` (v4): the host directories a ``mounts`` entry binds as the driver's libraries
(``nvct.store.libdir``), with what they hold, so a cached order can remake one that is gone.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

    from nvct.config import Config
    from nvct.plan.build import Plan


VERSION = 4


def from_plan(plan: Plan, config: Config) -> dict[str, Any]:
    """The work order of a plan."""
    return {
        "v": VERSION,
        "devices": [[d.node.path, d.node.major, d.node.minor, d.node.mode] for d in plan.devices],
        "mounts": [[m.source, m.target, list(m.options)] for m in plan.mounts],
        "symlinks": [[s.path, s.target] for s in plan.symlinks],
        "ldconfig": str(config.ldconfig),
        "ldconfig_dirs": list(plan.ldconfig_dirs),
        "ld_cache": [list(e) for e in plan.ld_cache_entries],
        "libdirs": [
            [d.host_dir, d.target, [list(f) for f in d.files], [list(k) for k in d.links]]
            for d in plan.library_dirs
        ],
        "log": [config.log_file, config.log_level],
        "gpus": [s.gpu.uuid if s.mig is None else s.mig.uuid for s in plan.selected],
        "capabilities": sorted(plan.request.capabilities),
    }
