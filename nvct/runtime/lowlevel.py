"""Find the low-level runtime (runc, crun) to exec; stdlib only, it runs on every call."""

from __future__ import annotations

import os
import sys

DEFAULT_RUNTIMES = ("runc", "crun")
DEFAULT_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def runtimes_from_config(path: str) -> tuple[str, ...]:
    """The ``[runtime] low-level`` list of a config file, defaults when unset or absent.

    tomllib costs ~10 ms to import, so it is loaded only when the file mentions the key.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return DEFAULT_RUNTIMES
    if b"low-level" not in raw:
        return DEFAULT_RUNTIMES
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    try:
        value = tomllib.loads(raw.decode())["runtime"]["low-level"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return DEFAULT_RUNTIMES  # the create path validates and reports the file properly
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    return DEFAULT_RUNTIMES


def find_low_level(candidates: tuple[str, ...], myself: str) -> str | None:
    """First candidate that is an executable file and not this shim itself."""
    me = _real(myself)
    path_dirs = [d for d in os.environ.get("PATH", "").split(":") if d]
    dirs = list(dict.fromkeys([*path_dirs, *DEFAULT_DIRS]))
    for name in candidates:
        options = [name] if "/" in name else [f"{d}/{name}" for d in dirs]
        for option in options:
            if os.path.isfile(option) and os.access(option, os.X_OK) and _real(option) != me:
                return option
    return None


def _real(path: str) -> str:
    try:
        return os.path.realpath(path)
    except OSError:
        return path
