"""The driver's GSP firmware bound as its directory, where that shows exactly the same files.

NVIDIA's toolkit binds each firmware file (``/lib/firmware/nvidia/<version>/gsp_*.bin``).
Each file bind is one more mount for the runtime to make and one more file it creates in the
container's writable layer as the mount point (removed again by ``docker run --rm``). Where
the host's version directory holds exactly the planned files, regular files all, binding the
directory shows the container the same names and contents with one mount and no file in its
layer: the version directory was created there anyway to hold the files.
"""

from __future__ import annotations

import os
import posixpath
import stat
from dataclasses import replace

from nvct.plan.model import Mount, Plan


def with_firmware_dir(plan: Plan) -> Plan:
    """``plan`` with its firmware file mounts replaced by one mount of their host directory,
    when they all come from one directory holding them and nothing else and all go to one
    directory under their own names; else ``plan`` as it is."""
    firmware = [m for m in plan.mounts if m.kind == "firmware"]
    if len(firmware) < 2:
        return plan
    sources = {posixpath.dirname(m.source) for m in firmware}
    targets = {posixpath.dirname(m.target) for m in firmware}
    names = {posixpath.basename(m.source) for m in firmware}
    if len(sources) != 1 or len(targets) != 1 or len(names) != len(firmware):
        return plan
    if any(posixpath.basename(m.target) != posixpath.basename(m.source) for m in firmware):
        return plan
    source, target = sources.pop(), targets.pop()
    if not _holds_exactly(source, names):
        return plan
    first = firmware[0]
    reason = f"{first.reason}: {len(firmware)} files, their directory"
    folded = Mount(source, target, "firmware", first.options, reason)
    mounts = [
        folded if m is first else m for m in plan.mounts if m.kind != "firmware" or m is first
    ]
    return replace(plan, mounts=tuple(mounts))


def _holds_exactly(directory: str, names: set[str]) -> bool:
    """``directory`` is a directory (not a link to one) whose entries are ``names``, each a
    regular file."""
    try:
        if not stat.S_ISDIR(os.lstat(directory).st_mode) or set(os.listdir(directory)) != names:
            return False
        return all(stat.S_ISREG(os.lstat(os.path.join(directory, n)).st_mode) for n in names)
    except OSError:
        return False
