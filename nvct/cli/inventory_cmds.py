"""``nvct-cli info`` and ``nvct-cli list``: what the host has, what would be injected."""

from __future__ import annotations

import json

import click

from nvct.cli.main import CliContext
from nvct.config import CAPABILITIES
from nvct.host.load import load_inventory
from nvct.plan.compose import plan_container
from nvct.plan.model import RootfsLayout
from nvct.plan.render import inventory_to_dict, inventory_to_text, plan_to_dict, plan_to_text
from nvct.request.parse import operator_request


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def info(obj: CliContext, as_json: bool) -> None:
    """Driver version, CUDA version and every GPU / MIG device."""
    inventory = load_inventory(obj.config, use_cache=obj.use_cache)
    if as_json:
        click.echo(json.dumps(inventory_to_dict(inventory), indent=2))
    else:
        click.echo("\n".join(inventory_to_text(inventory)))


@click.command("list")
@click.option(
    "--device",
    "-d",
    "devices",
    default="all",
    show_default=True,
    metavar="LIST",
    help="Devices as in NVIDIA_VISIBLE_DEVICES (indices, UUIDs, PCI ids, MIG, all, none).",
)
@click.option(
    "--capabilities",
    "-c",
    default=None,
    metavar="LIST",
    help=f"As NVIDIA_DRIVER_CAPABILITIES ({', '.join(CAPABILITIES)}, all); default from config.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole plan as JSON.")
@click.pass_obj
def list_cmd(obj: CliContext, devices: str, capabilities: str | None, as_json: bool) -> None:
    """Device nodes, libraries, binaries, IPC and firmware that would be injected."""
    config = obj.config
    env = {"NVIDIA_VISIBLE_DEVICES": devices}
    if capabilities is not None:
        env["NVIDIA_DRIVER_CAPABILITIES"] = capabilities
    request = operator_request(env, config)
    inventory = load_inventory(config, use_cache=obj.use_cache)
    plan = plan_container(
        request,
        config,
        RootfsLayout(),
        library_dirs="show",
        inventory=inventory,
        enforce_requirements=False,
    ).plan
    if as_json:
        click.echo(json.dumps(plan_to_dict(plan), indent=2))
    else:
        click.echo("\n".join(plan_to_text(plan)))
