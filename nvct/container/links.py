"""Symlinks in a container's rootfs: the driver libraries' SONAME and compatibility links,
and the driver's binaries as links into their library directory.

Each directory is resolved (and made) inside the rootfs once for all the links it holds; a
link is made with symlinkat under that descriptor, replacing an existing symlink of that
name but never an image file. A binary's link replaces nothing: where the image has any
entry of that name but the very link, the binary is bound there instead (``link_binaries``).
"""

from __future__ import annotations

import os
import posixpath
import stat

from nvct.container.rootfs import apply_error, in_container

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nvct.base.order import BinlinkRow, LinkRow, MountRow
    from nvct.container.rootfs import Rootfs


def create_symlink(rootfs: Rootfs, path: str, target: str) -> bool:
    """Create symlink ``path`` -> ``target``; an existing symlink is replaced, other files kept.

    Returns False when an image file of that name was kept.
    """
    return create_symlinks(rootfs, [(path, target)]) == (1, 0)


def create_symlinks(rootfs: Rootfs, links: Sequence[LinkRow]) -> tuple[int, int]:
    """Create a work order's ``[path, target]`` symlinks; returns (created, kept from image).

    Each directory is resolved (and made) once for all the links it holds.
    """
    by_dir: dict[str, list[tuple[str, str, str]]] = {}
    for path, target in links:
        by_dir.setdefault(posixpath.dirname(path), []).append(
            (path, posixpath.basename(path), target)
        )
    made = 0
    for directory, entries in by_dir.items():
        parent = in_container(directory, rootfs.makedirs, directory)
        try:
            for path, name, target in entries:
                made += _symlink_at(parent, name, target, path)
        finally:
            os.close(parent)
    return made, len(links) - made


def link_binaries(rootfs: Rootfs, rows: Sequence[BinlinkRow]) -> list[MountRow]:
    """Make a work order's ``binlinks``; return the bind mounts that stand in for those whose
    path the image holds already (a file of its own, or a link elsewhere): the host's binary
    must win there as a bind mount would, and the image's entry is left as it is."""
    by_dir: dict[str, list[BinlinkRow]] = {}
    for row in rows:
        by_dir.setdefault(posixpath.dirname(row[0]), []).append(row)
    binds: list[MountRow] = []
    for directory, entries in by_dir.items():
        parent = in_container(directory, rootfs.makedirs, directory)
        try:
            for path, target, source, options in entries:
                if not _link_only(parent, posixpath.basename(path), target, path):
                    binds.append((source, path, list(options)))
        finally:
            os.close(parent)
    return binds


def _link_only(parent: int, name: str, target: str, path: str) -> bool:
    """Create ``name`` -> ``target`` under ``parent`` where nothing has that name; True when
    the link is there (made now, or by an earlier start of this container's image)."""
    try:
        os.symlink(target, name, dir_fd=parent)
    except FileExistsError:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            return stat.S_ISLNK(st.st_mode) and os.readlink(name, dir_fd=parent) == target
        except OSError as err:
            raise apply_error(f"cannot read {path}: {err.strerror}") from err
    except OSError as err:
        raise apply_error(f"cannot create symlink {path}: {err.strerror}") from err
    return True


def _symlink_at(parent: int, name: str, target: str, path: str) -> bool:
    try:
        try:
            os.symlink(target, name, dir_fd=parent)
        except FileExistsError:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode):
                return False
            if os.readlink(name, dir_fd=parent) != target:
                os.unlink(name, dir_fd=parent)
                os.symlink(target, name, dir_fd=parent)
    except OSError as err:
        raise apply_error(f"cannot create symlink {path}: {err.strerror}") from err
    return True
