"""The identity of a container root that is a fresh overlay mount, for reusing what was
computed over the same image (the shim's ``ld.so.cache``).

An engine (docker's overlay2, containerd's and CRI-O's overlay snapshotters, podman) mounts a
container's rootfs as overlayfs: read-only image layers (``lowerdir``), never changed once
written, under an upper layer of the container's own. Before the container first runs, that
upper layer is empty, so the rootfs holds exactly its layers' content. An image layer is
named by its path, device, inode and mtime; the topmost one, when small (docker's
per-container ``-init`` layer: empty ``/etc/hosts``, ``/.dockerenv``, ...), by its content,
so that every container of an image gets the same identity. A rootfs that is not an
overlay, or whose upper layer is not empty (a restarted container, or one the engine wrote
into), has no identity here: everything is computed for it afresh.
"""

from __future__ import annotations

import os

from nvct.base.digest import sha256


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
    parts = []
    try:
        if upper is not None and os.listdir(upper):
            return None
        for i, layer in enumerate(lower.split(":")):
            small = _small_layer_content(layer) if i == 0 else None  # docker's -init is on top
            parts.append(small or _layer_identity(layer))
    except OSError:
        return None
    return sha256("\0".join(parts).encode()).hexdigest()[:40]


def _layer_identity(layer: str) -> str:
    st = os.stat(layer)
    return f"{layer}:{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}"


SMALL_LAYER_ENTRIES = 64
SMALL_LAYER_BYTES = 64 << 10


def _small_layer_content(layer: str) -> str | None:
    """Every entry of a layer (path, type and mode, content hash or link target), when it
    holds at most ``SMALL_LAYER_ENTRIES`` entries and ``SMALL_LAYER_BYTES``; else None."""
    entries: list[str] = []
    size = 0
    pending = [""]
    while pending:
        rel = pending.pop()
        with os.scandir(os.path.join(layer, rel) if rel else layer) as it:
            for entry in it:
                path = f"{rel}/{entry.name}" if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                if len(entries) >= SMALL_LAYER_ENTRIES:
                    return None
                if entry.is_symlink():
                    what = "-> " + os.readlink(entry.path)
                elif entry.is_dir(follow_symlinks=False):
                    pending.append(path)
                    what = "dir"
                elif entry.is_file(follow_symlinks=False):
                    size += st.st_size
                    if size > SMALL_LAYER_BYTES:
                        return None
                    with open(entry.path, "rb") as f:
                        what = sha256(f.read()).hexdigest()
                else:
                    what = f"rdev {st.st_rdev}"  # device nodes, whiteouts (0:0), fifos
                entries.append(f"{path} {st.st_mode:o} {st.st_uid}:{st.st_gid} {what}")
    return "small:" + "\n".join(sorted(entries))


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
