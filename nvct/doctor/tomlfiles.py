"""Reading engine TOML configs (containerd, CRI-O) for the keys that name nvct-runtime."""

from __future__ import annotations

import datetime as dt
import glob
import posixpath
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nvct.doctor.processes import START_TIME_SLACK, ProcessInfo
from nvct.doctor.result import CheckResult, failed, passed, skipped, warned

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

RUNTIME_BASENAME = "nvct-runtime"


def load_toml(path: Path) -> tuple[dict[str, Any] | None, str]:
    """A TOML file as a dict, or the reason it cannot be read."""
    try:
        return tomllib.loads(path.read_text()), ""
    except FileNotFoundError:
        return None, f"{path} does not exist"
    except OSError as err:
        return None, f"cannot read {path}: {err.strerror}"
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as err:
        return None, f"{path} is not valid TOML ({err})"


def walk(data: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every (key path, value) pair of nested tables."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield (*prefix, str(key)), value
            yield from walk(value, (*prefix, str(key)))


def nvct_entries(data: Any, key: str) -> list[tuple[str, str]]:
    """(table path, value) of every ``key`` whose value is a path to nvct-runtime."""
    return [
        (".".join(path[:-1]), value)
        for path, value in walk(data)
        if path[-1] == key
        and isinstance(value, str)
        and posixpath.basename(value) == RUNTIME_BASENAME
    ]


def import_files(root: Path, data: dict[str, Any]) -> list[Path]:
    """containerd's ``imports``: globs, relative ones against the root config's directory."""
    out: list[Path] = []
    for pattern in data.get("imports") or ():
        if not isinstance(pattern, str):
            continue
        full = pattern if pattern.startswith("/") else str(root.parent / pattern)
        out.extend(Path(p) for p in sorted(glob.glob(full)))
    return out


def with_imports(root: Path, data: dict[str, Any]) -> list[tuple[Path, dict[str, Any]]]:
    """containerd's root config and each file it imports, parsed (an unreadable import as
    empty), in the order containerd merges them."""
    return [(root, data)] + [(f, load_toml(f)[0] or {}) for f in import_files(root, data)]


def table_at(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any] | None:
    """The nested table at ``keys``, or None where a key is missing or not a table."""
    node: Any = data
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def newest_mtime(paths: list[Path]) -> tuple[float, Path] | None:
    """The latest modification time among ``paths`` that exist, and which file it was."""
    stamps = []
    for path in paths:
        try:
            stamps.append((path.stat().st_mtime, path))
        except OSError:
            continue
    return max(stamps) if stamps else None


def started_before_change(daemon: ProcessInfo, files: list[Path]) -> tuple[float, Path] | None:
    """(mtime, file) when a config file changed after the daemon started, else None."""
    newest = newest_mtime(files)
    if newest is not None and newest[0] > daemon.start_time + START_TIME_SLACK:
        return newest
    return None


def restart_check(
    name: str, label: str, daemon: ProcessInfo | None, files: list[Path], fix: str
) -> CheckResult:
    """WARN "restart needed" when a config file changed after the daemon ``label`` started."""
    if daemon is None:
        return skipped(name, f"no running {label} found")
    changed = started_before_change(daemon, files)
    if changed is None:
        return passed(name, f"{label} (pid {daemon.pid}) started after its config last changed")
    stamp = dt.datetime.fromtimestamp(changed[0], dt.timezone.utc)
    return warned(
        name,
        f"restart needed: {changed[1]} changed at {stamp:%Y-%m-%d %H:%M:%S} UTC, after {label} "
        f"(pid {daemon.pid}) started",
        fix,
    )


def entry_check(
    name: str,
    key: str,
    files: list[tuple[Path, dict[str, Any]]],
    missing: str,
    fix: str,
    *,
    running: bool,
) -> CheckResult:
    """PASS naming the first ``key = .../nvct-runtime`` found in ``files``, else FAIL; only
    WARN when no daemon reads these files (an engine installed as a dependency, say
    containerd under docker, needs no nvct runtime of its own)."""
    for path, data in files:
        for table, value in nvct_entries(data, key):
            return passed(name, f"{path}: [{table}] {key} = {value}")
    if not running:
        return warned(name, f"{missing} (no running daemon reads it)", fix)
    return failed(name, missing, fix)
