"""``nvct-cli exporter``: serve the node's GPU metrics (Prometheus text) with pod labels."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from nvct.cli.main import CliContext


@click.command("exporter")
@click.option("--address", help="Listen address (default 0.0.0.0; [exporter] address).")
@click.option("--port", type=click.IntRange(0, 65535), help="Listen port (default 9400; 0: any).")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    help="Seconds between NVML samples (default 10); a scrape serves the latest sample.",
)
@click.option(
    "--kubernetes/--no-kubernetes",
    default=None,
    help="Pod, namespace and container labels from the kubelet (default on).",
)
@click.option(
    "--pod-resources-socket",
    type=click.Path(dir_okay=False),
    help="The kubelet's pod-resources socket (default "
    "/var/lib/kubelet/pod-resources/kubelet.sock).",
)
@click.option(
    "--plugin-dir",
    type=click.Path(file_okay=False),
    help="Where nvct-device-plugin writes its status file (health); [device-plugin] plugin-dir.",
)
@click.option("--hostname", help="The Hostname label (default $NODE_NAME, else the host name).")
@click.pass_obj
def exporter(obj: CliContext, /, **flags: Any) -> int:
    """GPU utilization, memory, temperature, power, clocks, XIDs, health and replicas per GPU,
    named as dcgm-exporter's, each series with the pod holding the GPU."""
    from nvct.base.log import configure_stdout_structlog
    from nvct.exporter.run import run

    configure_stdout_structlog()
    overrides = {f"ex_{k}": v for k, v in flags.items() if v is not None and k != "plugin_dir"}
    if "ex_pod_resources_socket" in overrides:
        overrides["ex_pod_resources_socket"] = str(Path(overrides["ex_pod_resources_socket"]))
    if flags["plugin_dir"] is not None:
        overrides["dp_plugin_dir"] = flags["plugin_dir"]
    return run(dataclasses.replace(obj.config, **overrides))
