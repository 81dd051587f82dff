"""``nvct-cli exporter``: serve the node's GPU metrics (Prometheus text) with pod labels."""

from __future__ import annotations

from typing import Any

import click

from nvct.cli.main import CliContext
from nvct.config import with_settings
from nvct.config.flags import flag_options, with_flags


@click.command("exporter")
@flag_options("exporter")
@click.option(
    "--plugin-dir",
    type=click.Path(file_okay=False),
    help="Where nvct-device-plugin writes its status file (health); [device-plugin] plugin-dir.",
)
@click.pass_obj
def exporter(obj: CliContext, /, **flags: Any) -> int:
    """GPU utilization, memory, temperature, power, clocks, XIDs, health and replicas per GPU,
    named as dcgm-exporter's, each series with the pod holding the GPU."""
    from nvct.base.log import configure_stdout_structlog
    from nvct.exporter.run import run

    configure_stdout_structlog()
    config = with_flags(obj.config, "exporter", flags)
    if flags["plugin_dir"] is not None:
        config = with_settings(config, "device-plugin", plugin_dir=flags["plugin_dir"])
    return run(config)
