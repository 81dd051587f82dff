"""``nvct-cli configure --import-nvidia-config``: carry NVIDIA's config.toml over to nvct's.

Each setting of NVIDIA's file (``/etc/nvidia-container-runtime/config.toml``) that nvct has an
equivalent for is written into nvct's config.toml with tomlkit (comments and layout kept),
validated against nvct's schema, and written atomically with a backup like every engine file.
Every other setting the file sets is reported with why nvct has nothing to carry it to (and
whether it only repeats NVIDIA's default, so nothing is lost).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit

from nvct.base.defaults import CDI_SPEC_DIRS
from nvct.base.errors import ConfigError, EngineConfigError
from nvct.config import parse_config
from nvct.engines.files import Applied, FileChange, apply_change, read_config
from nvct.engines.toml_edit import parse, plain

NVIDIA_CONFIG = "/etc/nvidia-container-runtime/config.toml"

# logrus levels -> nvct's.
_LOG_LEVELS = {
    "trace": "debug",
    "debug": "debug",
    "info": "info",
    "warn": "warning",
    "warning": "warning",
    "error": "error",
    "fatal": "error",
    "panic": "error",
}

# NVIDIA's defaults (NCT api/config/v1) of the settings nvct has no equivalent for: a file
# that only repeats them loses nothing in the move.
_NVIDIA_DEFAULTS: dict[str, Any] = {
    "supported-driver-capabilities": "compat32,compute,display,graphics,ngx,utility,video",
    "nvidia-container-cli.environment": [],
    "nvidia-container-cli.load-kmods": True,
    "nvidia-container-cli.no-cgroups": False,
    "nvidia-container-cli.no-pivot": False,
    "nvidia-container-cli.path": "",
    "nvidia-container-cli.debug": "",
    "nvidia-container-cli.ldcache": "",
    "nvidia-container-cli.user": "",
    "nvidia-container-runtime.debug": "/dev/null",
    "nvidia-container-runtime.mode": "auto",
    "nvidia-container-runtime.modes.cdi.annotation-prefixes": ["cdi.k8s.io/"],
    "nvidia-container-runtime.modes.cdi.default-kind": "nvidia.com/gpu",
    "nvidia-container-runtime.modes.cdi.spec-dirs": list(CDI_SPEC_DIRS),
    "nvidia-container-runtime.modes.csv.mount-spec-path": (
        "/etc/nvidia-container-runtime/host-files-for-container.d"
    ),
    "nvidia-container-runtime.modes.legacy.cuda-compat-mode": "ldconfig",
    "nvidia-container-runtime-hook.path": "nvidia-container-runtime-hook",
    "nvidia-container-runtime-hook.skip-mode-detection": False,
    "nvidia-ctk.path": "nvidia-ctk",
}

# Why nvct has nothing to carry a setting to (by key, then by key prefix).
_WHY = {
    "supported-driver-capabilities": "nvct accepts every capability it knows and refuses an "
    "unknown one; request.default-capabilities sets what a container gets without asking",
    "nvidia-container-cli.environment": "nvct runs no nvidia-container-cli",
    "nvidia-container-cli.load-kmods": "nvct loads no kernel modules (nvct-cli doctor says "
    "which are missing and how to load them)",
    "nvidia-container-cli.no-cgroups": "nvct always grants the selected devices in the "
    "device cgroup (in the spec, or from the hook)",
    "nvidia-container-cli.no-pivot": "nvct runs no nvidia-container-cli",
    "nvidia-container-cli.path": "nvct runs no nvidia-container-cli",
    "nvidia-container-cli.debug": "nvct logs JSON lines to log.file (log.level = debug)",
    "nvidia-container-cli.ldcache": "nvct reads the ld.so.cache under driver-root",
    "nvidia-container-cli.user": "nvct's ldconfig runs as root in a sealed namespace",
    "nvidia-container-runtime.debug": "nvct logs JSON lines to log.file",
    "nvidia-container-runtime.mode": "nvct has one mode: the devices and mounts go in the "
    "spec (what NVIDIA's legacy and jit-cdi modes do); CDI specs come from nvct-cli cdi",
    "nvidia-container-runtime.modes.": "nvct has one mode (see mode)",
    "nvidia-container-runtime-hook.": "nvct's hook is nvct-hook, installed by nvct-cli configure",
    "nvidia-ctk.": "nvct's CDI hook is nvct-cli's own",
    "features.": "an NVIDIA feature gate nvct has no switch for",
}


@dataclass(frozen=True, slots=True)
class Imported:
    """What an import writes and what it leaves behind."""

    source: Path
    change: FileChange
    settings: tuple[tuple[str, str, Any], ...]  # (NVIDIA key, nvct key, value)
    unmapped: tuple[tuple[str, Any, str], ...]  # (NVIDIA key, value, why nothing)
    applied: Applied | None = None


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, dict):
            out += _flatten(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _ldconfig(value: str) -> str | None:
    """NVIDIA's ``@/sbin/ldconfig`` (a host path) as nvct's; None for the container's own."""
    if not value.startswith("@"):
        return None
    path = value[1:]
    # NVIDIA uses ldconfig.real where it exists (Ubuntu's /sbin/ldconfig is a script).
    if path == "/sbin/ldconfig" and os.path.exists("/sbin/ldconfig.real"):
        return "/sbin/ldconfig.real"
    return path


def _map(key: str, value: Any) -> list[tuple[str, Any]] | str:
    """nvct's (dotted key, value) pairs for one NVIDIA setting, or why there are none."""
    if key == "nvidia-container-cli.root":
        if not value:
            return "empty: the driver is at / (nvct's default)"
        if not str(value).startswith("/"):
            return f"{value!r} is not an absolute path"
        return [("driver-root", value), ("dev-root", value)]
    if key == "nvidia-container-cli.ldconfig":
        path = _ldconfig(str(value))
        if path is None:
            return "an ldconfig from the container; nvct runs only the host's (static) ldconfig"
        return [("ldconfig", path)]
    simple = {
        "accept-nvidia-visible-devices-envvar-when-unprivileged": (
            "request.accept-envvar-when-unprivileged"
        ),
        "accept-nvidia-visible-devices-as-volume-mounts": "request.accept-volume-mounts",
        "disable-require": "request.disable-require",
        "nvidia-container-runtime.runtimes": "runtime.low-level",
    }
    if key in simple:
        return [(simple[key], value)]
    if key == "nvidia-container-runtime.modes.legacy.cuda-compat-mode":
        # ldconfig, and hook (the same ld.so.conf.d entry from a hook), are what nvct does;
        # mount (compat libraries mounted over the driver's) is done the ldconfig way.
        modes = {"ldconfig": "ldconfig", "hook": "ldconfig", "mount": "ldconfig", "disabled": "off"}
        mode = modes.get(str(value))
        return [("inject.cuda-compat", mode)] if mode else f"unknown mode {value!r}"
    if key == "features.disable-cuda-compat-lib-hook" and value is True:
        return [("inject.cuda-compat", "off")]
    if key == "swarm-resource":
        names = [n.strip() for n in str(value).split(",") if n.strip()]
        return [("request.swarm-resource", names)] if names else "empty: no Swarm resource"
    if key == "nvidia-container-runtime.log-level":
        level = _LOG_LEVELS.get(str(value).lower())
        return [("log.level", level)] if level else f"unknown log level {value!r}"
    why = _WHY.get(key) or next(
        (w for prefix, w in _WHY.items() if prefix.endswith(".") and key.startswith(prefix)),
        "nvct has no equivalent",
    )
    if key in _NVIDIA_DEFAULTS and _NVIDIA_DEFAULTS[key] == value:
        why += " (this is NVIDIA's default: nothing is lost)"
    return why


def import_nvidia_config(source: Path, target: Path, *, dry_run: bool) -> Imported:
    """Write the nvct equivalents of ``source`` (NVIDIA's config.toml) into ``target``.

    Raises:
        EngineConfigError: either file is unreadable or not TOML, or the result would not be
            a valid nvct config; nothing is written then.
    """
    text = read_config(source)
    if text is None:
        raise EngineConfigError(
            f"NVIDIA config {source} does not exist",
            hint="name the file: --import-nvidia-config PATH",
        )
    parse(text, source)  # a clear error for invalid TOML
    settings: list[tuple[str, str, Any]] = []
    unmapped: list[tuple[str, Any, str]] = []
    for key, value in _flatten(plain(text)):
        mapped = _map(key, value)
        if isinstance(mapped, str):
            unmapped.append((key, value, mapped))
        else:
            settings += [(key, nvct_key, v) for nvct_key, v in mapped]
    return write_settings(source, target, tuple(settings), tuple(unmapped), dry_run=dry_run)


def write_settings(
    source: Path,
    target: Path,
    settings: tuple[tuple[str, str, Any], ...],
    unmapped: tuple[tuple[str, Any, str], ...],
    *,
    dry_run: bool,
) -> Imported:
    """Set ``settings``' (NVIDIA key, nvct dotted key, value) in ``target``, nvct's
    config.toml, keeping its comments and every other key; validated, then written atomically
    (with a backup) unless ``dry_run``.

    Raises:
        EngineConfigError: ``target`` is not TOML, or the result is not a valid nvct config;
            nothing is written then.
    """
    old = read_config(target)
    doc = parse(old or "", target)
    for _, nvct_key, value in settings:
        *tables, name = nvct_key.split(".")
        node: Any = doc
        for table in tables:
            if table not in node:
                node[table] = tomlkit.table()
            node = node[table]
        node[name] = value
    new = tomlkit.dumps(doc)
    try:
        parse_config(new.encode(), source=f"{target} (as imported from {source})")
    except ConfigError as err:
        raise EngineConfigError(
            err.message, hint="fix the NVIDIA setting; nothing was written"
        ) from err
    change = FileChange(target, old, new)
    applied = None if dry_run else apply_change(change)
    return Imported(source, change, settings, unmapped, applied)
