"""Pointing container engines at nvct: docker, containerd, CRI-O and podman.

Each engine module turns the text of one config file into its new text with a pure function
(``edit``), so the change is shown as a diff, tested without root, and written atomically by
``nvct.engines.files``. ``configure`` ties the steps together and then asks the engine
whether the running daemon will see the change (``checks``), because most support threads
against NVIDIA's toolkit are drift between what was written and what the daemon reads.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from nvct.base.errors import EngineConfigError
from nvct.base.release import parse_release
from nvct.engines.files import Applied, FileChange, apply_change, read_config

ENGINES = ("docker", "containerd", "crio", "podman")
RUNTIME_BINARY = "nvct-runtime"
HOOK_BINARY = "nvct-hook"


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOptions:
    """What the user asked ``nvct-cli configure`` for."""

    config_path: Path
    runtime_name: str = "nvidia"
    runtime_path: str = ""
    runtime_args: tuple[str, ...] = ()
    set_as_default: bool = False
    undo: bool = False
    hook: dict[str, Any] = field(default_factory=dict)  # podman: the hook entry to install
    containerd_version: int | None = None  # containerd config version for an empty file
    cdi: bool = False  # turn the engine's own CDI support on (undo: off)
    cdi_spec_dirs: tuple[str, ...] = ()  # CDI spec directories to name (default: the engine's)


@dataclass(frozen=True, slots=True)
class Edit:
    """An engine's answer for one file: the new text (``None``: remove it) and notes."""

    new: str | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigureResult:
    """Everything ``nvct-cli configure`` prints."""

    engine: str
    change: FileChange
    applied: Applied | None  # None on --dry-run
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    next_step: str = ""


class Engine(Protocol):
    """What each module in this package provides."""

    DEFAULT_CONFIG: Path

    def edit(self, text: str | None, opts: EngineOptions) -> Edit: ...

    def validate(self, change: FileChange, opts: EngineOptions) -> None: ...

    def checks(self, opts: EngineOptions) -> list[str]: ...

    def next_step(self, opts: EngineOptions) -> str: ...


def engine_module(name: str) -> Engine:
    """The module that configures engine ``name``."""
    if name not in ENGINES:
        raise EngineConfigError(f"unknown engine {name!r}", hint=f"use one of {', '.join(ENGINES)}")
    module: Engine = importlib.import_module(f"nvct.engines.{name}")
    return module


def default_config(engine: str) -> Path:
    """The file (or hooks directory, for podman) an engine is configured through by default."""
    return engine_module(engine).DEFAULT_CONFIG


def configure(engine: str, opts: EngineOptions, *, dry_run: bool = False) -> ConfigureResult:
    """Compute, validate and (unless ``dry_run``) write one engine's configuration change.

    Raises:
        EngineConfigError: the file does not parse, is not a file, or cannot be written; the
            file is left exactly as it was.
    """
    module = engine_module(engine)
    old = read_config(opts.config_path)
    edit = module.edit(old, opts)
    elsewhere = getattr(module, "backup_dir", None)
    change = FileChange(
        opts.config_path, old, edit.new, elsewhere(opts) if elsewhere is not None else None
    )
    if change.changed:
        module.validate(change, opts)
    applied = None if dry_run else apply_change(change)
    warnings = [] if dry_run else module.checks(opts)
    return ConfigureResult(
        engine=engine,
        change=change,
        applied=applied,
        notes=edit.notes,
        warnings=tuple(warnings),
        next_step=module.next_step(opts) if change.changed else "",
    )


def find_program(name: str, explicit: str | None = None) -> str:
    """Absolute path of one of nvct's console scripts.

    The script installed beside the running interpreter wins (it belongs to this very
    installation), then ``PATH``.

    Raises:
        EngineConfigError: not found, or ``explicit`` is not an absolute path.
    """
    if explicit:
        if not explicit.startswith("/"):
            raise EngineConfigError(
                f"{name} path {explicit!r} is not absolute", hint="give an absolute path"
            )
        return explicit
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found:
        return str(Path(found).absolute())
    raise EngineConfigError(
        f"cannot find {name} next to {sys.executable} or in PATH",
        hint=f"install nvct, or pass the path of {name} with --runtime-path",
    )


def program_release(program: str) -> tuple[tuple[int, int], str] | None:
    """((major, minor), version text) of ``program --version``; None: not installed or unclear."""
    path = shutil.which(program)
    if path is None:
        return None
    try:
        done = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_release(done.stdout)


def refuse_before(
    program: str, since: tuple[int, int], feature: str, path: Path, hint: str
) -> None:
    """Refuse a change whose ``feature`` the installed ``program`` is too old for.

    Raises:
        EngineConfigError: ``program --version`` is older than ``since``.
    """
    release = program_release(program)
    if release is not None and release[0] < since:
        name = "docker" if program == "dockerd" else program
        raise EngineConfigError(
            f"{name} {release[1]} has no CDI support ({feature} needs {name} >= "
            f"{since[0]}.{since[1]}); {path} was not changed",
            hint=hint,
        )


def running_daemons(comm: str) -> list[tuple[int, list[str]]]:
    """(pid, argv) of running processes whose command name is ``comm``."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm", encoding="utf-8", errors="replace") as f:
                if f.read().strip() != comm:
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        found.append((int(entry), argv))
    return sorted(found)


def flag_value(argv: list[str], *names: str) -> str | None:
    """The value of ``--flag VALUE`` / ``--flag=VALUE`` (last one wins) in an argv."""
    value = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg[len(name) + 1 :]
    return value


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name the same file (by realpath; the file need not exist)."""
    return os.path.realpath(a) == os.path.realpath(b)
