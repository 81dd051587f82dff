"""Replace a file so that readers see the whole old or the whole new content, never a mix.

A temp file in the same directory (O_EXCL, O_NOFOLLOW), fsync, rename over the target.
Stdlib only: the shim and the hook use it on every GPU container start. (Engine configs, which
also keep backups and ownership, use ``nvct.engines.files`` on top of the same idea.)
"""

from __future__ import annotations

import os

# Each call's own temp name: two threads of one process replacing the same file must not
# unlink and rename each other's half-written temp (a torn file for readers). ``next`` on a
# builtin iterator is one C call, so neither another thread nor a signal handler in this one
# can get the same number (``itertools.count()`` did this before; loading ``itertools`` costs
# a hot-path create ~0.2 ms).
_SEQ = iter(range(1 << 62))


def write_atomic(
    path: str, data: bytes, mode: int = 0o644, *, durable: bool = True, dir_fd: int | None = None
) -> None:
    """Atomically replace ``path`` with ``data`` (created with ``mode``).

    ``durable=False`` skips the fsync, for files that do not outlive a crash anyway: readers
    still see the whole old or the whole new content. ``dir_fd``: ``path`` is relative to that
    directory (one already resolved inside a container's rootfs); a symlink at ``path`` is
    replaced, never followed.

    Raises:
        OSError: the directory is not writable, or the disk is full; ``path`` is unchanged.
    """
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.{next(_SEQ)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, mode, dir_fd=dir_fd)
    except FileExistsError:  # a leftover of a killed process with the same pid and count
        os.unlink(tmp, dir_fd=dir_fd)
        fd = os.open(tmp, flags, mode, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)  # umask must not narrow it
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:  # noqa: SIM105 - contextlib (and collections) would load on the hot path
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        raise
