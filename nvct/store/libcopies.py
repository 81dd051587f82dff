"""Library directories of COPIES of the driver's files, where hard links cannot be made.

``inject.library-mounts = "directory-copies"``: when the driver's libraries are on another
filesystem than the cache dir (a read-only driver mount, the GPU operator's driver container,
GKE's /home/kubernetes/bin/nvidia), ``nvct.store.libdir`` cannot hard-link them, and each GPU
start would mount every library on its own. Here the libraries are copied once per driver into
``<cache-dir>/libcopies/objects/`` (one file per source identity: path, device, inode, size,
mtime, so another capability set reuses the copy), and each directory
``<cache-dir>/libcopies/dirs/<key>`` holds hard links of those copies (same filesystem: the
cache's) and the SONAME links among them, bound into a container as one directory as before.

The key hashes the sources' identities too, so a changed driver file gets a new directory. Each
directory has a manifest beside it (``<key>.sources``): the identities it was copied from. The
hard-link rule of the sweep (a file that is the last link of its inode: its driver is gone)
cannot tell here, since the copies are the only links of their inodes by design; instead a
directory is an orphan when a source in its manifest is gone or changed, and an object when no
directory links it any more. Both go once an hour old, swept when a new directory is built.

Everything is made under a temporary name and renamed into place; a failure leaves nothing
half-made and the plan keeps one mount per library. Only the build imports this module: a
start whose directory exists pays one listdir (``nvct.store.libdir.complete``).
"""

from __future__ import annotations

import os
import stat
import time

from nvct.base import fastjson
from nvct.base.atomic import write_atomic
from nvct.base.digest import sha256
from nvct.store.libdir import (
    ORPHAN_AGE_S,
    complete,
    copy_label,
    file_name,
    fresh_tmp,
    publish,
    read_manifest,
    ready,
    remove_tree,
)

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    Identity = list[Any]  # [path, st_dev, st_ino, st_size, st_mtime_ns]

SUBDIR = "libcopies"
OBJECTS = "objects"
DIRS = "dirs"
MANIFEST = ".sources"
CHUNK = 1 << 24


def identity(source: str) -> Identity:
    """What a copy of ``source`` was made from: a file of another identity is another copy."""
    st = os.stat(source)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"not a regular file: {source}")
    return [source, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def copies_dir(
    cache_dir: str, fingerprint: str, files: Sequence[Sequence[str]], links: Sequence[Sequence[str]]
) -> str:
    """Where the directory of copies of these ``(host path, name)`` files and ``(name,
    target)`` links is (or will be) under ``cache_dir``.

    Raises:
        OSError: a file cannot be stat'ed (the plan keeps one mount per library).
    """
    ids = [[*identity(source), name] for source, name in files]
    recipe = fastjson.dumps(["copies", fingerprint, ids, [list(k) for k in links]])
    return os.path.join(cache_dir, SUBDIR, DIRS, sha256(recipe.encode()).hexdigest()[:32])


def copies_size(cache_dir: str) -> tuple[int, int]:
    """(files, bytes) of the copies under ``cache_dir`` (doctor says what they cost)."""
    objects = os.path.join(cache_dir, SUBDIR, OBJECTS)
    count = size = 0
    try:
        names = os.listdir(objects)
    except OSError:
        return 0, 0
    for name in names:
        try:
            st = os.lstat(os.path.join(objects, name))
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and not name.startswith("."):
            count, size = count + 1, size + st.st_size
    return count, size


def ensure_copies(
    path: str, files: Sequence[Sequence[str]], links: Sequence[Sequence[str]]
) -> None:
    """Make the directory ``path`` (from ``copies_dir``) hold copies of ``files`` and the
    ``links``, unless it already does (``complete``); an incomplete one is replaced.

    Raises:
        OSError: a file cannot be copied (unreadable, changed while copied, the cache full),
            or the cache holds a symlink where nvct's directories go; nothing is left behind.
    """
    if complete(path, files, links):
        return
    dirs, key = os.path.split(path)
    objects = os.path.join(os.path.dirname(dirs), OBJECTS)
    for directory in (os.path.dirname(dirs), dirs, objects):
        os.makedirs(directory, mode=0o755, exist_ok=True)
        if not ready(directory):  # a symlink there would choose where the copies go
            raise OSError(f"not a directory (a symlink?): {directory}")
    ids = [identity(source) for source, _ in files]
    tmp = fresh_tmp(path)
    made: list[str] = []
    try:
        for (_, name), ident in zip(files, ids, strict=True):
            _link_copy(objects, ident, os.path.join(tmp, file_name(name)), made)
        for name, target in links:
            os.symlink(target, os.path.join(tmp, file_name(name)))
        if files:
            copy_label(os.path.dirname(files[0][0]), tmp, [name for name, _ in links])
        manifest = fastjson.dumps(ids).encode()
        write_atomic(path + MANIFEST, manifest)
        publish(tmp, path)
    except BaseException:
        remove_tree(tmp)
        _unlink_unused(made)  # the copies this failed build made, that nothing links
        if not ready(path) and os.path.lexists(path + MANIFEST):
            os.unlink(path + MANIFEST)
        raise
    finally:
        remove_tree(tmp)
    sweep_copies(os.path.dirname(dirs), keep=key)


def _link_copy(objects: str, ident: Identity, dest: str, made: list[str]) -> None:
    """Hard-link the copy of ``ident`` (made first when missing, and added to ``made``) at
    ``dest``."""
    obj = os.path.join(objects, sha256(fastjson.dumps(ident).encode()).hexdigest()[:32])
    for _ in range(2):
        try:
            st = os.lstat(obj)
            if not stat.S_ISREG(st.st_mode) or st.st_size != ident[3]:
                os.unlink(obj)  # not a copy nvct made (or cut short): made again
                raise FileNotFoundError(obj)
        except FileNotFoundError:
            _copy(ident, obj)
            made.append(obj)
        try:
            os.link(obj, dest, follow_symlinks=False)
            return
        except FileNotFoundError:  # swept between the check and the link: copied again
            continue
    raise OSError(f"cannot keep a copy of {ident[0]} in {objects}")


def _unlink_unused(objects: list[str]) -> None:
    for obj in objects:
        try:
            if os.lstat(obj).st_nlink == 1:
                os.unlink(obj)
        except OSError:
            continue


def _copy(ident: Identity, obj: str) -> None:
    """Copy the file ``ident`` names to ``obj``: its bytes, its mode (no write or set-id
    bits), its SELinux label; under a temporary name, its size verified, then renamed."""
    source = ident[0]
    src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(src)
        if [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns] != ident[1:]:
            raise OSError(f"{source} changed since it was planned")

        def fill(dst: int, tmp: str) -> None:
            done = 0
            while done < st.st_size:
                sent = os.sendfile(dst, src, done, min(CHUNK, st.st_size - done))
                if sent == 0:
                    break
                done += sent
            after = os.fstat(src)
            if os.fstat(dst).st_size != st.st_size or after.st_mtime_ns != st.st_mtime_ns:
                raise OSError(f"{source} changed while it was copied")
            copy_label(source, tmp, [])  # a hard link would share its source's label

        _write_atomic(obj, stat.S_IMODE(st.st_mode) & 0o755, fill)
    finally:
        os.close(src)


def _write_atomic(path: str, mode: int, fill: Callable[[int, str], None]) -> None:
    """Write ``path`` with ``mode`` by ``fill(fd, temporary path)``: under a temporary name
    beside it (never through a symlink), synced, then renamed; removed on any failure."""
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.{os.getpid()}.tmp"
    if os.path.lexists(tmp):  # a leftover of a killed process with the same pid
        os.unlink(tmp)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask must not narrow it
            fill(fd, tmp)
            os.fsync(fd)  # a crash must not leave a renamed file without its bytes
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def sweep_copies(root: str, keep: str) -> None:
    """Under ``root`` (``<cache-dir>/libcopies``), remove the directories whose manifest
    names a source that is gone or changed, then the copies no directory links, each once an
    hour old: a start that planned with one has long mounted it. A directory without its
    manifest is kept (its sources are unknown: it may be current)."""
    dirs, objects = os.path.join(root, DIRS), os.path.join(root, OBJECTS)
    cutoff = time.time() - ORPHAN_AGE_S
    for name in _names(dirs):
        path = os.path.join(dirs, name)
        if name.startswith(".") or name in (keep, keep + MANIFEST):
            continue
        try:
            if name.endswith(MANIFEST):  # its directory is gone (a cache cleaner took it)
                if not os.path.lexists(path[: -len(MANIFEST)]) and _older(path, cutoff):
                    os.unlink(path)
                continue
            if not ready(path) or not _older(path, cutoff) or _current(path + MANIFEST):
                continue
            remove_tree(path)
            os.unlink(path + MANIFEST)
        except OSError:
            continue
    for name in _names(objects):
        path = os.path.join(objects, name)
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_mtime < cutoff:
                os.unlink(path)
        except OSError:
            continue


def _names(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _older(path: str, cutoff: float) -> bool:
    return os.lstat(path).st_mtime < cutoff


def _current(manifest: str) -> bool:
    """Whether every source the manifest names is still the file that was copied (True
    when the manifest cannot be read: never remove what may be current)."""
    ids = read_manifest(manifest)
    if ids is None:
        return True
    for ident in ids:
        try:
            if identity(ident[0]) != ident:
                return False
        except OSError:
            return False
    return True
