"""``nvct-cli mps-control``: run the node's MPS control daemons for the device plugin."""

from __future__ import annotations

from pathlib import Path

import click

from nvct.cli.main import CliContext
from nvct.config import with_settings


@click.command("mps-control")
@click.option(
    "--mps-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where each GPU's daemon keeps its pipe, log and shm ([device-plugin.sharing] "
    "mps-root, default /run/nvct/mps); the device plugin must be given the same.",
)
@click.pass_obj
def mps_control(obj: CliContext, /, mps_root: Path | None) -> int:
    """One MPS control daemon per GPU the config shares with strategy mps, with its limits,
    restarted when it dies and quit on SIGTERM: they outlive the device plugin."""
    from nvct.base.log import configure_stdout_structlog
    from nvct.deviceplugin.mps_control import run

    configure_stdout_structlog()
    config = obj.config
    if mps_root is not None:  # containers mount from it: never relative
        config = with_settings(config, "device-plugin", mps_root=str(mps_root.absolute()))
    return run(config)
