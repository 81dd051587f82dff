"""Container root filesystems, opened so that nothing resolves outside them.

The image's author controls every path under the rootfs, so every lookup is done relative
to a descriptor of the rootfs with symlinks (absolute or ``..``) confined to it:
openat2(RESOLVE_IN_ROOT) where the kernel has it (5.6+), else a component-by-component
O_NOFOLLOW walk that resolves symlinks itself against the rootfs descriptor. Files and
directories are created with ``*at`` calls under an already-resolved parent descriptor,
and mounts target ``/proc/self/fd/<fd>`` of the resolved descriptor, never a path string.
"""

from __future__ import annotations

import os
import posixpath
import stat

from nvct.base.atomic import write_atomic

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

    from nvct.base.errors import ApplyError

_MAX_LINKS = 40
_EAGAIN_RETRIES = 32
_FORCE_WALK = os.environ.get("NVCT_TEST_NO_OPENAT2") == "1"


class Rootfs:
    """An open container root; close() when done (or use as a context manager).

    ``openat2=False`` resolves every path with the walk alone. It is as strict (the
    hostile-rootfs tests run both), costs a few more syscalls per path, and spares loading
    ctypes (~2 ms), which the shim's create, with a handful of paths to resolve per GPU
    container, does not need otherwise.
    """

    def __init__(self, path: str, *, openat2: bool = True) -> None:
        self.path = path
        self._openat2 = openat2 and not _FORCE_WALK
        try:
            self.fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            raise apply_error(f"cannot open container rootfs {path}: {err.strerror}") from err

    def __enter__(self) -> Rootfs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the rootfs descriptor."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def open(self, path: str, flags: int = os.O_PATH) -> int:
        """A descriptor for ``path`` resolved inside the rootfs (symlinks confined)."""
        if self._openat2:
            import errno

            from nvct.base import linux  # ctypes: loaded by the first openat2 lookup

            for _ in range(_EAGAIN_RETRIES):
                try:
                    return linux.openat2(
                        self.fd, path, flags, linux.RESOLVE_IN_ROOT | linux.RESOLVE_NO_MAGICLINKS
                    )
                except OSError as err:
                    # EAGAIN: a rename raced the in-root ".." checks; the kernel asks to retry.
                    if err.errno == errno.ENOSYS:
                        self._openat2 = False
                        break
                    if err.errno != errno.EAGAIN:
                        raise
            else:
                raise OSError(errno.EAGAIN, "paths keep changing under the lookup", path)
        return self._walk(path, flags)

    def exists(self, path: str) -> bool:
        """Whether ``path`` resolves inside the rootfs."""
        try:
            os.close(self.open(path))
        except OSError:
            return False
        return True

    def is_dir(self, path: str) -> bool:
        """Whether ``path`` resolves to a directory inside the rootfs."""
        try:
            fd = self.open(path, os.O_PATH | os.O_DIRECTORY)
        except OSError:
            return False
        os.close(fd)
        return True

    def makedirs(self, path: str, mode: int = 0o755, _depth: int = 0) -> int:
        """Create ``path`` (and parents) inside the rootfs; return an O_PATH dir descriptor.

        Each prefix is resolved from the rootfs descriptor (symlinks confined), and a missing
        component is created with mkdirat under its resolved parent.
        """
        parent = os.dup(self.fd)
        prefix: list[str] = []
        try:
            for part in _parts(path):
                prefix.append(part)
                joined = "/".join(prefix)
                try:
                    nxt = self.open(joined, os.O_PATH | os.O_DIRECTORY)
                except FileNotFoundError:
                    try:
                        os.mkdir(part, mode, dir_fd=parent)
                    except FileExistsError:
                        self._create_link_target(parent, part, "/".join(prefix[:-1]), _depth)
                    nxt = self.open(joined, os.O_PATH | os.O_DIRECTORY)
                except NotADirectoryError as err:
                    raise apply_error(
                        f"/{joined} in the container image is not a directory",
                        hint="fix the image, or drop the capability that needs this path",
                    ) from err
                os.close(parent)
                parent = nxt
        except BaseException:
            os.close(parent)
            raise
        return parent

    def make_mount_point(self, path: str, *, is_dir: bool) -> None:
        """Create an empty file (or directory) at ``path`` to mount on, unless something is
        there already (then the mount covers what the image has, resolved in the rootfs)."""
        parent = self.makedirs(posixpath.dirname(path))
        try:
            make_mount_point_at(parent, path, is_dir=is_dir)
        finally:
            os.close(parent)

    def read_file(self, path: str, limit: int) -> bytes:
        """The content of the regular file ``path`` (resolved in the rootfs), at most ``limit``
        bytes.

        The image controls the file: its type is read from an O_PATH descriptor before anything
        opens it, since opening a FIFO blocks (the container never starts) and opening a device
        node acts on the host's device (nvct runs as root, outside the container's device
        cgroup). The same inode is then opened through /proc/self/fd.

        Raises:
            OSError: missing, not a regular file, or unreadable.
        """
        at = self.open(path, os.O_PATH | os.O_NOFOLLOW)
        try:
            st = os.fstat(at)
            if not stat.S_ISREG(st.st_mode):
                import errno  # a rare error: not loaded by a create that never meets it

                raise OSError(errno.EINVAL, "not a regular file", path)
            fd = os.open(fd_path(at), os.O_RDONLY | os.O_CLOEXEC)
        finally:
            os.close(at)
        try:
            again = os.fstat(fd)
            if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):  # no procfs of ours
                import errno

                raise OSError(errno.EINVAL, "cannot be reopened by its descriptor", path)
            return os.read(fd, limit)
        finally:
            os.close(fd)

    def replace_file(self, path: str, data: bytes, mode: int) -> None:
        """Replace ``path`` (its directory resolved in the rootfs) with ``data``, as ldconfig
        replaces its cache: a temporary file beside it, renamed over it (a symlink there is
        replaced, not followed).

        Raises:
            OSError: the directory is missing or not writable.
        """
        parent = self.open(posixpath.dirname(path), os.O_PATH | os.O_DIRECTORY)
        try:
            write_atomic(posixpath.basename(path), data, mode, durable=False, dir_fd=parent)
        finally:
            os.close(parent)

    def _create_link_target(self, parent: int, name: str, base: str, depth: int) -> None:
        """``name`` exists but does not resolve: if it is a dangling symlink, create its
        target directory inside the rootfs, as ``mkdir -p`` in a chroot would."""
        if depth > _MAX_LINKS:
            raise apply_error(f"/{base}/{name}: too many levels of symlinks in the image")
        try:
            target = os.readlink(name, dir_fd=parent)
        except OSError:
            return  # created concurrently by someone else: the caller resolves again
        in_root = target if target.startswith("/") else f"/{base}/{target}"
        os.close(self.makedirs(in_root, _depth=depth + 1))

    def _walk(self, path: str, flags: int) -> int:
        """O_NOFOLLOW walk from the rootfs descriptor; ``..`` never climbs above it."""
        stack = [os.dup(self.fd)]
        pending = _parts(path, keep_dotdot=True)
        links = 0
        try:
            while pending:
                part = pending.pop(0)
                if part == "..":
                    if len(stack) > 1:
                        os.close(stack.pop())
                    continue
                st = os.stat(part, dir_fd=stack[-1], follow_symlinks=False)
                # O_NOFOLLOW binds the last component, as openat2 reads it: that link itself.
                if stat.S_ISLNK(st.st_mode) and (pending or not flags & os.O_NOFOLLOW):
                    links += 1
                    if links > _MAX_LINKS:
                        import errno

                        raise OSError(errno.ELOOP, f"too many symlinks: {path}")
                    target = os.readlink(part, dir_fd=stack[-1])
                    if target.startswith("/"):
                        while len(stack) > 1:
                            os.close(stack.pop())
                    pending = _parts(target, keep_dotdot=True) + pending
                    continue
                last = not pending
                open_flags = (flags if last else os.O_PATH | os.O_DIRECTORY) | os.O_NOFOLLOW
                stack.append(os.open(part, open_flags | os.O_CLOEXEC, dir_fd=stack[-1]))
            result = stack.pop() if len(stack) > 1 else os.dup(stack[0])
            if flags != os.O_PATH and len(_parts(path)) == 0:
                os.close(result)
                result = os.open(".", flags | os.O_CLOEXEC, dir_fd=self.fd)
            return result
        finally:
            for fd in stack:
                os.close(fd)


def _parts(path: str, *, keep_dotdot: bool = False) -> list[str]:
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if keep_dotdot:
        return parts
    out: list[str] = []  # lexical ".." (from a relative symlink target), confined to "/"
    for part in parts:
        if part == "..":
            if out:
                out.pop()
        else:
            out.append(part)
    return out


def in_container(path: str, call: Any, *args: Any) -> Any:
    """``call(*args)``; a lookup under ``path`` that fails (the image's paths changed while
    the container was prepared, or a component is unusable) becomes one line naming the
    path, not a crash."""
    try:
        return call(*args)
    except OSError as err:
        raise apply_error(
            f"cannot resolve {path} in the container: {err.strerror or err}",
            hint="the image's paths changed while the container started, or are unusable",
        ) from err


def make_mount_point_at(parent: int, path: str, *, is_dir: bool) -> None:
    """``Rootfs.make_mount_point`` for a ``path`` whose directory is already resolved and
    open as ``parent``."""
    name = posixpath.basename(path)
    try:
        if is_dir:
            os.mkdir(name, 0o755, dir_fd=parent)
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            os.close(os.open(name, flags, 0o644, dir_fd=parent))
    except FileExistsError:
        pass
    except OSError as err:
        raise apply_error(f"cannot create {path} in the container: {err.strerror}") from err


def fd_path(fd: int) -> str:
    """The magic-link path through which mount(2) and friends reach a descriptor."""
    return f"/proc/self/fd/{fd}"


def apply_error(message: str, hint: str | None = None) -> ApplyError:
    """An ``ApplyError``: ``nvct.base.errors`` is loaded by the first one, so a create whose
    rootfs is fine never loads it (~0.2 ms)."""
    from nvct.base.errors import ApplyError

    return ApplyError(message, hint=hint)
