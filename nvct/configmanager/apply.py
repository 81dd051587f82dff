"""Put the chosen entry where the plugin reads its config: a copy, replaced atomically (the
plugin never reads half a file), written only when its content changes."""

from __future__ import annotations

from pathlib import Path

from nvct.base.atomic import write_atomic
from nvct.base.errors import NvctError
from nvct.configmanager.choose import EMPTY


class ApplyError(NvctError):
    """The entry could not be read or the destination written."""


def wanted(srcdir: Path, entry: str) -> bytes:
    """The bytes the destination should hold: the entry's, or nothing for ``EMPTY``."""
    if entry == EMPTY:
        return b""
    try:
        return (srcdir / entry).read_bytes()
    except OSError as err:
        raise ApplyError(
            f"cannot read config {entry!r} at {srcdir / entry}: {err.strerror}",
            hint="check the ConfigMap volume (CONFIG_FILE_SRCDIR)",
        ) from err


def apply(srcdir: Path, entry: str, dst: Path) -> bool:
    """Make ``dst`` hold ``entry``; whether it changed."""
    data = wanted(srcdir, entry)
    try:
        if dst.is_file() and not dst.is_symlink() and dst.read_bytes() == data:
            return False
        write_atomic(str(dst), data, 0o644)
    except OSError as err:
        raise ApplyError(
            f"cannot write the config file {dst}: {err.strerror}",
            hint="mount a writable volume there, shared with the plugin (CONFIG_FILE_DST)",
        ) from err
    return True
