"""Reading and replacing engine config files: atomic, backed up, diffable, no-op when equal.

A config file nvct changes is read once (``read_config``), its new text is computed by a pure
function, and the difference is a ``FileChange``. ``apply_change`` then writes it the only way
a daemon can never observe half a file: a temp file in the same directory, fsync, rename over
the original (through a symlink to its target), fsync of the directory. The previous content
is kept next to it as ``<file>.nvct-backup`` — or, for a file in a directory the engine reads
whole (CRI-O's ``crio.conf.d`` takes every file in it, in name order, so a backup there would be
applied after the file it backs up), in ``backup_dir`` outside it.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from nvct.base.errors import EngineConfigError

BACKUP_SUFFIX = ".nvct-backup"
MAX_CONFIG_BYTES = 4 << 20
NEW_FILE_MODE = 0o644


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file's old and new text; ``None`` means the file does not (or will not) exist."""

    path: Path
    old: str | None
    new: str | None
    backup_dir: Path | None = None  # None: beside the file

    @property
    def changed(self) -> bool:
        """Whether applying the change would touch the file."""
        return self.old != self.new

    def diff(self) -> str:
        """A unified diff (empty when nothing changes)."""
        if not self.changed:
            return ""
        before = (self.old or "").splitlines(keepends=True)
        after = (self.new or "").splitlines(keepends=True)
        lines = difflib.unified_diff(
            before,
            after,
            fromfile=str(self.path) if self.old is not None else "/dev/null",
            tofile=str(self.path) if self.new is not None else "/dev/null",
        )
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


@dataclass(frozen=True, slots=True)
class Applied:
    """What ``apply_change`` did: ``written``, ``removed`` or ``unchanged``."""

    path: Path
    action: str
    backup: Path | None = None


def read_config(path: Path) -> str | None:
    """The text of an engine config file, or ``None`` when it does not exist.

    Raises:
        EngineConfigError: a directory (or other non-file) is there, it cannot be read, it is
            too large, or it is not UTF-8 text.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise EngineConfigError(f"cannot inspect {path}: {err.strerror}") from err
    if stat.S_ISDIR(st.st_mode):
        raise EngineConfigError(
            f"{path} is a directory, not a config file",
            hint="pass the file itself with --config",
        )
    if not stat.S_ISREG(st.st_mode):
        raise EngineConfigError(f"{path} is not a regular file")
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise EngineConfigError(
            f"cannot read {path}: {err.strerror}", hint="run as root (sudo)"
        ) from err
    if len(raw) > MAX_CONFIG_BYTES:
        raise EngineConfigError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise EngineConfigError(f"{path} is not UTF-8 text (byte {err.start})") from err


def apply_change(change: FileChange) -> Applied:
    """Carry out ``change``; the previous content (if any) goes to ``<file>.nvct-backup``.

    Raises:
        EngineConfigError: the directory cannot be created or written; nothing was changed.
    """
    if not change.changed:
        return Applied(change.path, "unchanged")
    target = Path(os.path.realpath(change.path))
    folder = change.backup_dir or target.parent
    backup = folder / (target.name + BACKUP_SUFFIX) if change.old is not None else None
    mode, owner = NEW_FILE_MODE, None
    with contextlib.suppress(FileNotFoundError):
        st = target.stat()
        mode, owner = stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid)
    try:
        if change.new is not None:
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        staged = (
            _stage(target, change.new.encode(), mode, owner) if change.new is not None else None
        )
    except OSError as err:
        raise _write_error(change.path, err) from err
    try:
        if backup is not None and change.old is not None:
            backup.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            kept = _stage(backup, change.old.encode(), mode, owner)
            os.replace(kept, backup)
        if staged is not None:
            os.replace(staged, target)
        else:
            target.unlink()
        _fsync_dir(target.parent)
    except OSError as err:
        if staged is not None:
            staged.unlink(missing_ok=True)
        raise _write_error(change.path, err) from err
    return Applied(change.path, "written" if change.new is not None else "removed", backup)


def _stage(target: Path, data: bytes, mode: int, owner: tuple[int, int] | None) -> Path:
    """Write ``data`` to a new temp file beside ``target`` (fsynced); return its path."""
    tmp = target.with_name(f".{target.name}.nvct-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
        if owner is not None and os.geteuid() == 0:
            os.fchown(fd, *owner)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_error(path: Path, err: OSError) -> EngineConfigError:
    where = err.filename or path.parent
    hint = "run as root (sudo)" if err.errno in (1, 13) else "choose a writable location"
    if err.errno == 30:
        hint = "the filesystem is read-only; choose another path with --config"
    return EngineConfigError(
        f"cannot write {path}: {err.strerror} ({where}); the file was left as it was", hint=hint
    )
