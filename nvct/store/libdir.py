"""Host directories holding the driver's libraries, bound into a container as one directory.

Each path a container start adds to the container's writable layer (a mount point, a SONAME
link) costs its creation and, with ``docker run --rm``, its removal: ~0.25 ms each on
overlay2 on the bench's VM, and each bind mount costs runc ~0.3 ms more. One bind of a
directory that already holds the libraries and their links replaces ~11 mounts and ~17
paths of a 1-GPU start (``docker diff``).

The directory is ``<cache-dir>/libdirs/<key>``: hard links of the driver's files (the same
inodes, so no copy and no space) and the links among them. The key hashes each file's path,
device and inode and the links, so a new or reinstalled driver (new inodes), or another
selection, gets a new directory, and a reboot none. It is built under a
temporary name and renamed into place, so concurrent starts never see half of one. Hard
links need the cache dir on the driver's filesystem; where they cannot be made, the plan
keeps one mount per library (``nvct.plan.libdirs``), or, with ``inject.library-mounts =
"directory-copies"``, binds a directory of copies (``nvct.store.libcopies``).

A directory whose driver was upgraded or removed only pins disk space: it is removed, once an
hour old, when a new one is built. It is known by a file that is the last link to its inode,
or by its manifest (``<key>.sources`` beside it: each file's source path and inode) naming a
source that is gone or another inode now; the manifest tells where two directories link the
same inodes (a CDI spec's and a start's, two capability sets), which keeps every count above one.
"""

from __future__ import annotations

import os
import stat
import time

from nvct.base import fastjson
from nvct.base.atomic import write_atomic
from nvct.base.digest import sha256

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


SUBDIR = "libdirs"
MANIFEST = ".sources"
XATTR_SELINUX = "security.selinux"
ORPHAN_AGE_S = 3600


def host_dir(cache_dir: str, files: Sequence[Sequence[str]], links: Sequence[Sequence[str]]) -> str:
    """Where the directory for these ``(host path, name)`` files and ``(name, target)`` links
    is (or will be) under ``cache_dir``: keyed by what the files are (path, device, inode),
    not by the driver's fingerprint, which a reboot or a daemon's restart changes (the
    persistenced socket is made anew) while the libraries stay: one directory per driver
    install, not one per boot, each holding a link to every file.

    Raises:
        OSError: a file cannot be stat'ed (the plan keeps one mount per library).
    """
    ids = []
    for source, name in files:
        st = os.stat(source)
        ids.append([source, name, st.st_dev, st.st_ino])
    recipe = fastjson.dumps(["libdir-2", ids, [list(k) for k in links]])
    return os.path.join(cache_dir, SUBDIR, sha256(recipe.encode()).hexdigest()[:32])


def ready(path: str) -> bool:
    """Whether ``path`` is a directory (never through a symlink)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def complete(path: str, files: Sequence[Sequence[str]], links: Sequence[Sequence[str]]) -> bool:
    """Whether ``path`` is a directory (never through a symlink) holding every name of
    ``files`` and ``links``: a cache cleaner may have taken some (one listdir)."""
    if not ready(path):
        return False
    try:
        present = set(os.listdir(path))
    except OSError:
        return False
    return all(f[1] in present for f in files) and all(k[0] in present for k in links)


def ensure(path: str, files: Sequence[Sequence[str]], links: Sequence[Sequence[str]]) -> None:
    """Make the directory ``path`` hold hard links of ``files`` and the ``links``, unless it
    already does (``complete``); an incomplete one is replaced.

    Raises:
        OSError: a file cannot be linked there (another filesystem: EXDEV), or the cache
            directory is not writable; nothing is left behind.
    """
    if complete(path, files, links):
        return
    root, key = os.path.split(path)
    os.makedirs(root, mode=0o755, exist_ok=True)
    tmp = fresh_tmp(path)
    try:
        for source, name in files:
            os.link(source, os.path.join(tmp, file_name(name)))
        for name, target in links:
            os.symlink(target, os.path.join(tmp, file_name(name)))
        if files:
            copy_label(os.path.dirname(files[0][0]), tmp, [name for name, _ in links])
        _write_manifest(path + MANIFEST, files)
        publish(tmp, path)
    finally:
        remove_tree(tmp)
    _sweep_orphans(root, keep=key)


def _write_manifest(path: str, files: Sequence[Sequence[str]]) -> None:
    """``[source, st_dev, st_ino]`` of each file, beside its directory (never through a
    symlink): what the sweep checks the driver against."""
    rows = []
    for source, _ in files:
        st = os.stat(source)
        rows.append([source, st.st_dev, st.st_ino])
    write_atomic(path, fastjson.dumps(rows).encode(), durable=False)


def read_manifest(path: str) -> list[list[Any]] | None:
    """The rows of a manifest beside a directory (never through a symlink); None when it
    cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            rows = fastjson.loads(os.read(fd, 1 << 20))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None
    return rows if isinstance(rows, list) else None


def _superseded(manifest: str) -> bool:
    """Whether the manifest names a source that is gone or another inode now (False when it
    cannot be read: never remove what may be current)."""
    for source, dev, ino in read_manifest(manifest) or ():
        try:
            st = os.stat(source)
        except OSError:
            return True
        if (st.st_dev, st.st_ino) != (dev, ino):
            return True
    return False


def fresh_tmp(path: str) -> str:
    """An empty 0755 directory beside ``path`` to make its content in (``publish``); an
    incomplete ``path`` is removed first, moved aside in one step, so a start sees one or
    the other."""
    root, key = os.path.split(path)
    tmp = os.path.join(root, f".{key}.{os.getpid()}.tmp")
    remove_tree(tmp)  # a leftover of a killed process with the same pid
    if ready(path):
        aside = os.path.join(root, f".{key}.{os.getpid()}.old")
        remove_tree(aside)
        os.rename(path, aside)
        remove_tree(aside)
    os.mkdir(tmp, 0o755)
    try:
        os.chmod(tmp, 0o755)  # noqa: S103 - the container's users read the libraries in it
    except OSError:
        remove_tree(tmp)
        raise
    return tmp


def publish(tmp: str, path: str) -> None:
    """Rename the directory ``tmp`` made by ``fresh_tmp`` to ``path``."""
    try:
        os.rename(tmp, path)
    except OSError:
        if not ready(path):  # another start built it first: theirs serves
            raise


def existing_parent(path: str) -> str:
    """``path``, or its nearest existing parent: where a cache dir not made yet will be."""
    while not os.path.exists(path) and path not in ("", "/"):
        path = os.path.dirname(path)
    return path or "/"


def same_filesystem(cache_dir: str, files: Sequence[Sequence[str]]) -> bool:
    try:
        dev = os.stat(existing_parent(cache_dir)).st_dev
        return all(os.stat(source).st_dev == dev for source, _ in files)
    except OSError:
        return False


def copy_label(source_dir: str, directory: str, links: Sequence[str]) -> None:
    """Give ``directory`` and its ``links`` the SELinux label of the libraries' own directory
    (the hard links keep their files' labels): made under cache-dir, they would carry its
    label, which a container's domain may not be allowed to search. No-op without SELinux."""
    try:
        label = os.getxattr(source_dir, XATTR_SELINUX)
    except OSError:  # no SELinux (ENOTSUP), or no label (ENODATA)
        return
    try:
        os.setxattr(directory, XATTR_SELINUX, label)
        for name in links:
            os.setxattr(os.path.join(directory, name), XATTR_SELINUX, label, follow_symlinks=False)
    except OSError:
        return  # a policy that refuses the label: the cache dir's own one stays


def file_name(name: str) -> str:
    if not name or "/" in name or name in (".", ".."):
        raise OSError(f"not a file name: {name!r}")
    return name


def _sweep_orphans(root: str, keep: str) -> None:
    """Remove directories whose files are the last links to their inodes (their driver is
    gone), once they are an hour old: a start that planned with one has long mounted it."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    cutoff = time.time() - ORPHAN_AGE_S
    for name in names:
        path = os.path.join(root, name)
        if name in (keep, keep + MANIFEST) or name.startswith("."):
            continue
        try:
            if name.endswith(MANIFEST):  # its directory is gone (a cache cleaner took it)
                if not os.path.lexists(path[: -len(MANIFEST)]) and os.lstat(path).st_mtime < cutoff:
                    os.unlink(path)
                continue
            if not ready(path) or os.lstat(path).st_mtime > cutoff:
                continue
            if _superseded(path + MANIFEST) or any(
                stat.S_ISREG(st.st_mode) and st.st_nlink == 1
                for st in (os.lstat(os.path.join(path, e)) for e in os.listdir(path))
            ):
                remove_tree(path)
                if os.path.lexists(path + MANIFEST):
                    os.unlink(path + MANIFEST)
        except OSError:
            continue


def remove_tree(path: str) -> None:
    """Remove a directory of files and symlinks (no subdirectories: ``ensure`` makes none);
    a symlink in its place is removed, never followed."""
    if not ready(path):
        if os.path.lexists(path):
            os.unlink(path)
        return
    names = os.listdir(path)
    for name in names:
        os.unlink(os.path.join(path, name))
    os.rmdir(path)
