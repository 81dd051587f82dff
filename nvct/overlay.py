"""The identity of a container root that is a fresh overlay mount, for reusing what was
computed over the same image (the shim's ``ld.so.cache``).

An engine (docker's overlay2, containerd's and CRI-O's overlay snapshotters, podman) mounts a
container's rootfs as overlayfs: read-only image layers (``lowerdir``), never changed once
written, under an upper layer of the container's own. Before the container first runs, that
upper layer is empty, so the rootfs holds exactly the image layers' content, named by the
``lowerdir`` list (each layer's path, device, inode and mtime are part of the identity too).
A rootfs that is not an overlay, or whose upper layer is not empty (a restarted container, or
one the engine wrote into), has no identity here: everything is computed for it afresh.
"""

from __future__ import annotations

import os

from nvct.digest import sha256


def fresh_overlay_identity(root: str, mountinfo: bytes | None = None) -> str | None:
    """A hash of the image layers under ``root`` (a mount point, as this process names it),
    or None. ``mountinfo`` defaults to ``/proc/self/mountinfo``."""
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo", "rb") as f:
                mountinfo = f.read()
        except OSError:
            return None
    options = _overlay_options(mountinfo, root)
    if options is None:
        return None
    lower, upper = options.get("lowerdir"), options.get("upperdir")
    if not lower:
        return None
    parts = [lower]
    try:
        if upper is not None and os.listdir(upper):
            return None
        for layer in lower.split(":"):
            st = os.stat(layer)
            parts.append(f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}")
    except OSError:
        return None
    return sha256("\0".join(parts).encode()).hexdigest()[:40]


def _overlay_options(mountinfo: bytes, root: str) -> dict[str, str] | None:
    """The super options of the overlay mounted last at ``root``; None if there is none, or if
    a path in them needs unescaping (then no identity is claimed)."""
    point = f" {root} ".encode()
    found = None
    for line in mountinfo.splitlines():
        if point not in line:
            continue
        fields = line.split(b" ")
        if len(fields) > 4 and fields[4] == point.strip():
            found = fields  # a later line is a mount on top of the earlier one
    if found is None or b"-" not in found[6:]:
        return None
    sep = found.index(b"-", 6)
    if found[sep + 1 : sep + 2] != [b"overlay"] or len(found) < sep + 4:
        return None
    text = found[sep + 3].decode(errors="replace")
    if "\\" in text:
        return None
    out: dict[str, str] = {}
    for option in text.split(","):
        key, _, value = option.partition("=")
        out[key] = value
    return out
