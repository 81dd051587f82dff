"""``nvct-cli device-plugin-status``: each device nvct-device-plugin advertises, its health and
why, as the plugin last wrote it beside its sockets."""

from __future__ import annotations

import json
from pathlib import Path

import click

from nvct.base.defaults import DEFAULT_PLUGIN_DIR
from nvct.base.errors import NvctError
from nvct.node.files import STATUS_FILE
from nvct.node.status import read_status


@click.command("device-plugin-status")
@click.option(
    "--plugin-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path(DEFAULT_PLUGIN_DIR),
    show_default=True,
    help="The kubelet's device-plugins directory the plugin serves in.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plugin's status as JSON.")
def device_plugin_status(plugin_dir: Path, as_json: bool) -> None:
    """Advertised devices with their health and the reason (Unhealthy: why; Healthy again:
    after which quiet period)."""
    path = plugin_dir / STATUS_FILE
    found, problem = read_status(plugin_dir)
    if problem:
        raise NvctError(problem)
    if found is None:
        raise NvctError(
            f"{path} does not exist: nvct-device-plugin has not run here",
            hint="start it (deployments/device-plugin.yaml), or pass --plugin-dir",
        )
    status = found.resources
    if as_json:
        click.echo(json.dumps({"settings": found.settings, "resources": status}, indent=2))
        return
    for resource, devices in sorted(status.items()):
        click.echo(f"{resource}: {len(devices)} device(s)")
        for d in devices:
            reason = f"  ({d['reason']})" if d.get("reason") else ""
            click.echo(f"  {d['id']:<44} {d['health']}{reason}")
