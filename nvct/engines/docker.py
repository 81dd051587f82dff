"""docker: ``runtimes.<name>`` (and ``default-runtime``) in ``daemon.json``.

Every other key stays as it was, in its order; the indentation of the file is kept (4 spaces
for a new file, as NVIDIA's tool writes). dockerd re-reads ``runtimes`` and
``default-runtime`` on SIGHUP, so ``systemctl reload docker`` is enough.

``--cdi`` sets ``features.cdi`` (and ``cdi-spec-dirs`` when directories are named), which
docker reads from 25.0 on; an older dockerd is refused by name, since it would start without
CDI and say nothing. daemon.json has no room for a mark (dockerd refuses unknown keys), so
``--undo`` turns CDI off only when asked with ``--cdi`` too.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from nvct.base.errors import EngineConfigError
from nvct.engines import (
    RUNTIME_BINARY,
    Edit,
    EngineOptions,
    flag_value,
    refuse_before,
    running_daemons,
    same_file,
)
from nvct.engines.files import FileChange

DEFAULT_CONFIG = Path("/etc/docker/daemon.json")
CDI_SINCE = (25, 0)
_INDENT = re.compile(r"^\{\s*\n([ \t]+)\S", re.MULTILINE)


def _parse(text: str, path: Path) -> dict[str, Any]:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise EngineConfigError(f"{path} has the key {key!r} twice", hint="remove one")
            out[key] = value
        return out

    if not text.strip():
        return {}
    try:
        data = json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as err:
        raise EngineConfigError(
            f"{path} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}",
            hint="fix the file (dockerd would refuse to start with it too); it was not changed",
        ) from err
    except RecursionError:  # json recurses per nested array or object
        raise EngineConfigError(
            f"{path} is not valid JSON: arrays or objects nested too deeply",
            hint="fix the file (dockerd would refuse to start with it too); it was not changed",
        ) from None
    if not isinstance(data, dict):
        raise EngineConfigError(f"{path} is not a JSON object", hint="daemon.json must be {...}")
    return data


def _indent(text: str) -> str | int:
    match = _INDENT.search(text)
    if match is None:
        return 4
    return "\t" if match.group(1).startswith("\t") else len(match.group(1))


def is_nvct_runtime(path: object, opts: EngineOptions) -> bool:
    """Whether a configured runtime path is nvct's (by name, or the path being installed)."""
    if not isinstance(path, str):
        return False
    return posixpath.basename(path) == RUNTIME_BINARY or path == opts.runtime_path


def edit(text: str | None, opts: EngineOptions) -> Edit:
    """The new ``daemon.json`` text (``None``: remove a file only nvct's entry was in).

    Raises:
        EngineConfigError: not JSON, not an object, or ``runtimes`` is not an object.
    """
    data = _parse(text or "", opts.config_path)
    before = json.loads(json.dumps(data))
    runtimes = data.get("runtimes", {})
    if not isinstance(runtimes, dict):
        raise EngineConfigError(f"{opts.config_path}: 'runtimes' is not a JSON object")
    notes: list[str] = []
    name = opts.runtime_name
    current = runtimes.get(name)
    if opts.undo:
        if current is not None:
            if isinstance(current, dict) and is_nvct_runtime(current.get("path"), opts):
                del runtimes[name]
            else:
                notes.append(f"runtimes.{name} does not point at {RUNTIME_BINARY}: left alone")
        if not runtimes:
            data.pop("runtimes", None)
        if data.get("default-runtime") == name and name not in runtimes:
            del data["default-runtime"]
            notes.append("default-runtime removed: docker's default (runc) applies again")
    else:
        # dockerd reads arguments from "runtimeArgs"; NVIDIA's tool writes "args": [] (ignored).
        wanted: dict[str, Any] = {"path": opts.runtime_path}
        if opts.runtime_args:
            wanted["runtimeArgs"] = list(opts.runtime_args)
        else:
            wanted["args"] = []
        if isinstance(current, dict) and current.get("path") != opts.runtime_path:
            notes.append(f"runtimes.{name} pointed at {current.get('path')!r}: replaced")
        if current != wanted:
            runtimes[name] = wanted
        data["runtimes"] = runtimes
        if opts.set_as_default:
            previous = data.get("default-runtime")
            if previous not in (None, name, "runc"):
                notes.append(f"default-runtime was {previous!r}; --undo resets it to runc")
            data["default-runtime"] = name
    if opts.cdi:
        notes += _cdi(data, opts)
    if data == before:
        return Edit(text, tuple(notes))
    if not data and opts.undo:
        return Edit(None, (*notes, "nothing else was in the file: it is removed"))
    return Edit(json.dumps(data, indent=_indent(text or "")) + "\n", tuple(notes))


def _cdi(data: dict[str, Any], opts: EngineOptions) -> list[str]:
    """Turn ``features.cdi`` on (off for ``--undo``) in ``data``; notes for the user."""
    features = data.get("features", {})
    if not isinstance(features, dict):
        raise EngineConfigError(f"{opts.config_path}: 'features' is not a JSON object")
    if opts.undo:
        features.pop("cdi", None)
        data.pop("cdi-spec-dirs", None)
        if not features:
            data.pop("features", None)
        return []
    notes = []
    if features.get("cdi") is True:
        notes.append("features.cdi was already on: --undo --cdi would turn it off")
    features["cdi"] = True
    data["features"] = features
    if opts.cdi_spec_dirs:
        data["cdi-spec-dirs"] = list(opts.cdi_spec_dirs)
    return notes


def validate(change: FileChange, opts: EngineOptions) -> None:
    """Refuse ``--cdi`` for an installed dockerd older than 25 (it has no CDI support).

    Raises:
        EngineConfigError: the installed dockerd is older than 25.0.
    """
    if not opts.cdi or opts.undo:
        return
    refuse_before(
        "dockerd",
        CDI_SINCE,
        "features.cdi",
        change.path,
        "upgrade docker, or leave out --cdi: nvct-runtime resolves CDI names "
        "(NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0) itself",
    )


def next_step(opts: EngineOptions) -> str:
    """How to make dockerd read the change."""
    if same_file(opts.config_path, DEFAULT_CONFIG):
        return "systemctl reload docker   (dockerd re-reads runtimes on SIGHUP)"
    return f"kill -HUP <pid of the dockerd started with --config-file {opts.config_path}>"


def checks(opts: EngineOptions) -> list[str]:
    """Warnings when no running dockerd reads the file, or it does not list the runtime yet."""
    daemons = running_daemons("dockerd")
    if not daemons:
        return ["no dockerd is running: the change applies when it starts"]
    readers = [
        (pid, argv)
        for pid, argv in daemons
        if same_file(flag_value(argv, "--config-file") or DEFAULT_CONFIG, opts.config_path)
    ]
    if not readers:
        shown = ", ".join(
            f"pid {pid} reads {flag_value(argv, '--config-file') or DEFAULT_CONFIG}"
            for pid, argv in daemons[:3]
        )
        return [
            f"no running dockerd reads {opts.config_path} ({shown}); "
            "configure the file it reads with --config"
        ]
    warnings = []
    for pid, argv in readers:
        listed = docker_runtimes(flag_value(argv, "-H", "--host"))
        if listed is None:
            continue
        present = opts.runtime_name in listed
        if present == opts.undo:
            state = "still lists" if opts.undo else "does not list"
            warnings.append(
                f"the running dockerd (pid {pid}) {state} runtime {opts.runtime_name!r} yet: "
                f"run {next_step(opts).split('   ')[0]}"
            )
    return warnings


def docker_runtimes(host: str | None) -> list[str] | None:
    """Runtime names ``docker info`` reports, or ``None`` when docker cannot be asked."""
    docker = shutil.which("docker")
    if docker is None:
        return None
    argv = [docker]
    if host:
        argv += ["-H", host]
    argv += ["info", "--format", "{{json .Runtimes}}"]
    env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "DOCKER_CONTEXT")}
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=15, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    try:
        runtimes = json.loads(done.stdout)
    except ValueError:
        return None
    return sorted(runtimes) if isinstance(runtimes, dict) else None
