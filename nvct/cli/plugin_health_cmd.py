"""``nvct-cli device-plugin-health``: the GPUs nvct holds Unhealthy until they are reset or
serviced (the node's latch file beside the device plugin's sockets), and ``clear`` for an
operator who reset or accepted one. The running plugin notices the change within a slice."""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict
from pathlib import Path

import click

from nvct.base.defaults import DEFAULT_PLUGIN_DIR
from nvct.base.errors import NvctError
from nvct.node.health.latches import LatchFile, boot_id

_PLUGIN_DIR = click.option(
    "--plugin-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path(DEFAULT_PLUGIN_DIR),
    show_default=True,
    help="The kubelet's device-plugins directory the plugin serves in.",
)


def _latches(ctx: click.Context, plugin_dir: Path) -> LatchFile:
    return LatchFile(plugin_dir, boot_id(Path(ctx.obj.config.proc_root)))


@click.group("device-plugin-health", invoke_without_command=True)
@_PLUGIN_DIR
@click.option("--json", "as_json", is_flag=True, help="Print the latched GPUs as JSON.")
@click.pass_context
def device_plugin_health(ctx: click.Context, plugin_dir: Path, as_json: bool) -> None:
    """GPUs held Unhealthy until reset or serviced (the default: list them)."""
    if ctx.invoked_subcommand is not None:
        return
    latched = _latches(ctx, plugin_dir).load()
    if as_json:
        click.echo(json.dumps({u: asdict(e) for u, e in latched.items()}, indent=2))
        return
    if not latched:
        click.echo("no GPU is latched")
    for uuid, entry in sorted(latched.items()):
        since = datetime.datetime.fromtimestamp(entry.since, datetime.timezone.utc).isoformat(
            timespec="seconds"
        )
        click.echo(f"{uuid:<44} {entry.hold:<8} since {since}  {entry.reason}")


@device_plugin_health.command("clear")
@click.option(
    "--plugin-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="As for device-plugin-health (either place).",
)
@click.argument("uuids", nargs=-1, required=True)
@click.pass_context
def clear(ctx: click.Context, plugin_dir: Path | None, uuids: tuple[str, ...]) -> None:
    """Release UUIDS (GPU- or MIG- UUIDs) after resetting them, or accept a row-remapping
    failure; the plugin advertises them Healthy again once NVML answers."""
    assert ctx.parent is not None  # noqa: S101 - a subcommand always has its group
    plugin_dir = plugin_dir or ctx.parent.params["plugin_dir"]
    latches = _latches(ctx, plugin_dir)
    known = latches.load(every=True)
    missing = [u for u in uuids if u not in known]
    if missing:
        raise NvctError(
            f"not latched: {', '.join(missing)}",
            hint=f"`nvct-cli device-plugin-health --plugin-dir {plugin_dir}` lists the latched "
            "GPUs",
        )
    for uuid in uuids:
        entry = latches.remove(uuid)
        if entry is not None:
            click.echo(f"cleared {uuid} ({entry.reason})")
