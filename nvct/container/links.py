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
    from collections.abc import Callable, Sequence
    from typing import Any, TypeVar

    from nvct.base.order import BinlinkRow, LinkRow, MountRow
    from nvct.container.rootfs import Rootfs

    Row = TypeVar("Row", bound=Sequence[Any])  # a work order row, its container path first


def create_symlink(rootfs: Rootfs, path: str, target: str) -> bool:
    """Create symlink ``path`` -> ``target``; an existing symlink is replaced, other files kept.

    Returns False when an image file of that name was kept.
    """
    return create_symlinks(rootfs, [(path, target)]) == (1, 0)


def create_symlinks(rootfs: Rootfs, links: Sequence[LinkRow]) -> tuple[int, int]:
    """Create a work order's ``[path, target]`` symlinks; returns (created, kept from image).

    Each directory is resolved (and made) once for all the links it holds.
    """
    made = 0

    def make(parent: int, row: LinkRow) -> None:
        nonlocal made
        path, target = row
        made += _symlink_at(parent, posixpath.basename(path), target, path)

    _each_in_its_directory(rootfs, links, make)
    return made, len(links) - made


def link_binaries(rootfs: Rootfs, rows: Sequence[BinlinkRow]) -> list[MountRow]:
    """Make a work order's ``binlinks``; return the bind mounts that stand in for those whose
    path the image holds already (a file of its own, or a link elsewhere): the host's binary
    must win there as a bind mount would, and the image's entry is left as it is."""
    binds: list[MountRow] = []

    def make(parent: int, row: BinlinkRow) -> None:
        path, target, source, options = row
        if not _link_only(parent, posixpath.basename(path), target, path):
            binds.append((source, path, list(options)))

    _each_in_its_directory(rootfs, rows, make)
    return binds


def _each_in_its_directory(
    rootfs: Rootfs, rows: Sequence[Row], make: Callable[[int, Row], None]
) -> None:
    """``make(parent, row)`` for each row, ``parent`` a descriptor of the row's directory,
    resolved (and made) inside the rootfs once for all the rows it holds."""
    by_dir: dict[str, list[Row]] = {}
    for row in rows:
        by_dir.setdefault(posixpath.dirname(row[0]), []).append(row)
    for directory, entries in by_dir.items():
        parent = in_container(directory, rootfs.makedirs, directory)
        try:
            for row in entries:
                make(parent, row)
        finally:
            os.close(parent)


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
