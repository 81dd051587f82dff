"""``nvct-cli mps-control``: run the node's MPS control daemons for the device plugin."""

from __future__ import annotations

import os
from pathlib import Path

import click

from nvct.cli.main import CliContext
from nvct.config import Config, with_settings


@click.command("mps-control")
@click.option(
    "--mps-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where each GPU's daemon keeps its pipe, log and shm ([device-plugin.sharing] "
    "mps-root, default /run/nvct/mps); the device plugin must be given the same.",
)
@click.option(
    "--config-file",
    type=click.Path(dir_okay=False),
    help="NVIDIA's device-plugin config (version v1, YAML or JSON; env CONFIG_FILE), read as "
    "nvct-device-plugin reads it, with NVIDIA's environment names.",
)
@click.pass_obj
def mps_control(obj: CliContext, /, mps_root: Path | None, config_file: str | None) -> int:
    """One MPS control daemon per GPU the config shares with strategy mps, with its limits,
    restarted when it dies and quit on SIGTERM: they outlive the device plugin.

    The config is read again on SIGHUP (a config-manager's signal) and when its files change
    (nvct's --config, NVIDIA's --config-file): the daemons follow without a restart."""
    from nvct.base.defaults import config_path
    from nvct.base.errors import NvctError
    from nvct.base.log import configure_stdout_structlog
    from nvct.deviceplugin.mps_control import refused, run
    from nvct.deviceplugin.settings import Inputs, say, settle
    from nvct.deviceplugin.trigger import Trigger

    configure_stdout_structlog()
    env = dict(os.environ)
    if config_file:  # flag > environment, as the plugin
        env["CONFIG_FILE"] = config_file
    # the plugin's inputs, so that both share the same GPUs alike (NvctError: one line, exit 1)
    inputs = Inputs(obj.config_file, env, dict(obj.flags))

    def settled() -> Config:
        done = settle(inputs)
        say(done)
        if mps_root is None:
            return done.config
        # containers mount from it: never relative
        return with_settings(done.config, "device-plugin", mps_root=str(mps_root.absolute()))

    config = settled()
    # from here on SIGHUP asks for a reload: its default would end the daemons' supervisor
    asked = Trigger([f for f in (inputs.nvidia_file, config_path(obj.config_file)[0]) if f])

    def reread() -> Config | None:
        if not asked():
            return None
        try:
            return settled()
        except NvctError as err:
            refused(err.one_line())
            return None

    return run(config, reread=reread)
