"""``nvct-cli configure``: point docker, containerd, CRI-O or podman at nvct."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

import click

from nvct.base.defaults import CDI_SPEC_DIRS
from nvct.base.errors import EngineConfigError
from nvct.cli.main import CliContext
from nvct.engines import (
    ENGINES,
    HOOK_BINARY,
    RUNTIME_BINARY,
    ConfigureResult,
    EngineOptions,
    default_config,
    find_program,
)
from nvct.engines import configure as configure_engine

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
CDI_ENGINES = ("docker", "containerd")  # CRI-O and podman read CDI specs natively, always
HOOK_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _runtime_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not _NAME.match(value):
        raise click.BadParameter("letters, digits, '_', '.', '-' only (at most 64)")
    return value


def build_options(
    engine: str,
    *,
    config: Path | None,
    hooks_dir: Path | None,
    runtime_name: str,
    runtime_path: str | None,
    nvct_config: str | None,
    set_as_default: bool,
    undo: bool,
    cdi: bool = False,
    cdi_spec_dirs: tuple[str, ...] = (),
) -> EngineOptions:
    """The engine options for the command line (paths resolved, combinations checked).

    Raises:
        EngineConfigError: nvct-runtime / nvct-hook cannot be found, or an option does not
            apply to the engine.
    """
    if nvct_config is not None and engine in ("containerd", "crio"):
        raise EngineConfigError(
            f"--nvct-config cannot be passed through {engine}",
            hint="nvct-runtime then reads /etc/nvct/config.toml (or NVCT_CONFIG)",
        )
    if cdi_spec_dirs and not cdi:
        raise EngineConfigError("--cdi-spec-dir applies with --cdi only", hint="add --cdi")
    if any(not d.startswith("/") for d in cdi_spec_dirs):
        raise EngineConfigError(
            f"--cdi-spec-dir {next(d for d in cdi_spec_dirs if not d.startswith('/'))!r} is "
            "not absolute",
            hint="give absolute directories (e.g. /etc/cdi)",
        )
    if hooks_dir is not None and engine != "podman":
        raise EngineConfigError("--hooks-dir applies to --runtime podman only")
    if engine == "podman":
        path = config or (hooks_dir / "oci-nvct-hook.json" if hooks_dir else None)
    else:
        path = config
    path = (path or default_config(engine)).absolute()
    opts = EngineOptions(
        config_path=path,
        runtime_name=runtime_name,
        set_as_default=set_as_default,
        undo=undo,
        cdi=cdi and engine in CDI_ENGINES,
        cdi_spec_dirs=cdi_spec_dirs,
    )
    if undo:
        return opts
    if engine == "podman":
        from nvct.engines.hooksd import hooksd_entry

        env = [HOOK_PATH_ENV]
        if nvct_config:
            env.append(f"NVCT_CONFIG={Path(nvct_config).absolute()}")
        hook_path = find_program(HOOK_BINARY, runtime_path)
        return dataclasses.replace(opts, hook=hooksd_entry(sys.executable, hook_path, env))
    args = ("--nvct-config", str(Path(nvct_config).absolute())) if nvct_config else ()
    return dataclasses.replace(
        opts, runtime_path=find_program(RUNTIME_BINARY, runtime_path), runtime_args=args
    )


def result_to_dict(result: ConfigureResult) -> dict[str, Any]:
    """A JSON-ready view of a configure result."""
    applied = result.applied
    return {
        "engine": result.engine,
        "file": str(result.change.path),
        "changed": result.change.changed,
        "action": applied.action if applied else "dry-run",
        "backup": str(applied.backup) if applied and applied.backup else None,
        "diff": result.change.diff(),
        "notes": list(result.notes),
        "warnings": list(result.warnings),
        "next_step": result.next_step,
    }


def render_text(result: ConfigureResult) -> tuple[list[str], list[str]]:
    """(stdout lines, stderr lines) for a configure result."""
    out: list[str] = []
    change, applied = result.change, result.applied
    if applied is None:
        out.append(change.diff().rstrip("\n") or f"{change.path}: already as wanted")
    elif applied.action == "unchanged":
        out.append(f"{change.path}: already as wanted; nothing written")
    else:
        backup = f" (previous content in {applied.backup})" if applied.backup else ""
        out.append(f"{change.path}: {applied.action}{backup}")
    out += [f"note: {n}" for n in result.notes]
    if result.next_step and applied is not None:
        out.append(f"next: {result.next_step}")
    return out, [f"warning: {w}" for w in result.warnings]


@click.command()
@click.option(
    "--runtime",
    "engine",
    type=click.Choice(ENGINES),
    default="docker",
    show_default=True,
    help="Container engine to configure.",
)
@click.option(
    "--config",
    "config",
    type=click.Path(path_type=Path, dir_okay=True),
    help="Engine config file (default: /etc/docker/daemon.json, /etc/containerd/config.toml, "
    "/etc/crio/crio.conf.d/99-nvct.toml, <hooks-dir>/oci-nvct-hook.json).",
)
@click.option(
    "--hooks-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="podman: hooks directory (default /usr/share/containers/oci/hooks.d).",
)
@click.option(
    "--runtime-name",
    default="nvidia",
    show_default=True,
    callback=_runtime_name,
    help="Name the engine knows the runtime by (docker run --runtime=NAME).",
)
@click.option(
    "--runtime-path",
    metavar="PATH",
    help="Absolute path of nvct-runtime (podman: nvct-hook); default: this installation's.",
)
@click.option(
    "--nvct-config",
    metavar="PATH",
    help="docker/podman: nvct config file the runtime (hook) reads instead of the default.",
)
@click.option("--set-as-default", is_flag=True, help="Make it the engine's default runtime.")
@click.option(
    "--cdi",
    is_flag=True,
    help="Also turn on the engine's CDI support (docker >= 25: features.cdi; containerd >= "
    "1.7: enable_cdi and cdi_spec_dirs). With --undo: turn it off again.",
)
@click.option(
    "--cdi-spec-dir",
    "cdi_spec_dirs",
    multiple=True,
    metavar="DIR",
    help="With --cdi: CDI spec directories the engine reads (repeatable; default "
    f"{', '.join(CDI_SPEC_DIRS)}).",
)
@click.option("--dry-run", is_flag=True, help="Print the change as a unified diff; write nothing.")
@click.option("--undo", is_flag=True, help="Remove what nvct added.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--import-nvidia-config",
    "nvidia_config",
    metavar="[FILE]",
    is_flag=False,
    flag_value="/etc/nvidia-container-runtime/config.toml",
    default=None,
    help="Write the nvct equivalents of NVIDIA's config.toml (default "
    "/etc/nvidia-container-runtime/config.toml) into nvct's config (the global --config, "
    "$NVCT_CONFIG or /etc/nvct/config.toml) and say which settings have none; no engine "
    "is configured.",
)
@click.option(
    "--import-nvidia-plugin-config",
    "nvidia_plugin_config",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the [device-plugin] equivalents of NVIDIA's device-plugin config (version v1, "
    "YAML or JSON, as in its ConfigMap) into nvct's config and say which settings have none; "
    "no engine is configured.",
)
@click.pass_obj
def configure(
    obj: CliContext,
    engine: str,
    config: Path | None,
    hooks_dir: Path | None,
    runtime_name: str,
    runtime_path: str | None,
    nvct_config: str | None,
    set_as_default: bool,
    cdi: bool,
    cdi_spec_dirs: tuple[str, ...],
    dry_run: bool,
    undo: bool,
    as_json: bool,
    nvidia_config: str | None,
    nvidia_plugin_config: str | None,
) -> None:
    """Register nvct-runtime with a container engine (podman: install the OCI hook).

    Writes are atomic, keep the previous file as <file>.nvct-backup, and do nothing when the
    file is already as wanted.
    """
    if nvidia_plugin_config is not None:
        if undo or set_as_default or nvidia_config is not None:
            raise click.UsageError(
                "--import-nvidia-plugin-config takes no --undo, --set-as-default or "
                "--import-nvidia-config"
            )
        _import_nvidia(
            obj, Path(nvidia_plugin_config), dry_run=dry_run, as_json=as_json, plugin=True
        )
        return
    if nvidia_config is not None:
        if undo or set_as_default:
            raise click.UsageError("--import-nvidia-config takes no --undo or --set-as-default")
        _import_nvidia(obj, Path(nvidia_config), dry_run=dry_run, as_json=as_json)
        return
    if undo and set_as_default:
        raise click.UsageError("--undo and --set-as-default exclude each other")
    opts = build_options(
        engine,
        config=config,
        hooks_dir=hooks_dir,
        runtime_name=runtime_name,
        runtime_path=runtime_path,
        nvct_config=nvct_config,
        set_as_default=set_as_default,
        undo=undo,
        cdi=cdi,
        cdi_spec_dirs=cdi_spec_dirs,
    )
    if cdi and engine not in CDI_ENGINES:
        click.echo(f"note: {engine} reads CDI specs natively: --cdi changes nothing there")
    result = configure_engine(engine, opts, dry_run=dry_run)
    if result.applied is not None and result.change.changed:
        obj.event(
            "engine_configured",
            engine=result.engine,
            file=str(result.change.path),
            undo=undo,
            action=result.applied.action,
        )
    if as_json:
        click.echo(json.dumps(result_to_dict(result), indent=2))
        return
    out, err = render_text(result)
    for line in out:
        click.echo(line)
    for line in err:
        click.echo(line, err=True)


def _import_nvidia(
    obj: CliContext, source: Path, *, dry_run: bool, as_json: bool, plugin: bool = False
) -> None:
    from nvct.base.defaults import config_path
    from nvct.engines.nvidia_config import import_nvidia_config, write_settings

    target = Path(config_path(obj.config_file)[0]).absolute()
    if plugin:
        from nvct.config.nvidia_plugin import read_plugin_config

        mapped = read_plugin_config(source)
        result = write_settings(source, target, mapped.settings, mapped.unmapped, dry_run=dry_run)
    else:
        result = import_nvidia_config(source, target, dry_run=dry_run)
    if result.applied is not None and result.change.changed:
        obj.event("nvidia_config_imported", source=str(source), file=str(target))
    if as_json:
        doc = {
            "source": str(source),
            "file": str(target),
            "changed": result.change.changed,
            "action": result.applied.action if result.applied else "dry-run",
            "diff": result.change.diff(),
            "settings": [{"nvidia": k, "nvct": n, "value": v} for k, n, v in result.settings],
            "no_equivalent": [
                {"nvidia": k, "value": v, "why": why} for k, v, why in result.unmapped
            ],
        }
        click.echo(json.dumps(doc, indent=2))
        return
    for key, nvct_key, value in result.settings:
        click.echo(f"{nvct_key} = {json.dumps(value)}  (from {key})")
    for key, value, why in result.unmapped:
        click.echo(f"no nvct equivalent: {key} = {json.dumps(value)}: {why}")
    applied = result.applied
    if applied is None:
        click.echo(result.change.diff().rstrip("\n") or f"{target}: already as wanted")
    elif applied.action == "unchanged":
        click.echo(f"{target}: already as wanted; nothing written")
    else:
        backup = f" (previous content in {applied.backup})" if applied.backup else ""
        click.echo(f"{target}: {applied.action}{backup}")
