"""``nvct-cli labels``: the node's GPU labels (NVIDIA's GFD names) as an NFD feature file.

The MIG strategy and the sharing (replicas, strategy, ``.shared`` resources) are the device
plugin's, from the same inputs read the same way (``[device-plugin]`` of nvct's config, NVIDIA's
config file and environment names: ``nvct/deviceplugin/settings.py``), so the labels say what it
advertises, whichever per-node config a config-manager chose. A labeller reads them again every
round, and at once on SIGHUP (the config-manager's signal).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import click

from nvct.base.atomic import write_atomic
from nvct.base.errors import ConfigError, DiscoveryError
from nvct.cli.main import CliContext
from nvct.config import Config, with_settings
from nvct.config.kubernetes import MIG_STRATEGIES
from nvct.host.load import load_inventory
from nvct.node.labels import feature_file
from nvct.node.offer import offer

DEFAULT_OUTPUT = "/etc/kubernetes/node-feature-discovery/features.d/nvct"
DMI_PRODUCT = "class/dmi/id/product_name"


def _machine(sysfs_root: Path) -> str:
    try:
        return (sysfs_root / DMI_PRODUCT).read_text().strip()
    except OSError:
        return ""


@click.command("labels")
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path, dir_okay=False),
    help=f"Write an NFD feature file here (atomically), e.g. {DEFAULT_OUTPUT}; default stdout.",
)
@click.option(
    "--mig-strategy",
    type=click.Choice(MIG_STRATEGIES),
    help="Default: [device-plugin] mig-strategy of the config (none).",
)
@click.option(
    "--config-file",
    type=click.Path(dir_okay=False),
    help="NVIDIA's device-plugin config (version v1, YAML or JSON; env CONFIG_FILE), read as "
    "nvct-device-plugin reads it, with NVIDIA's environment names (MIG_STRATEGY...).",
)
@click.option("--no-timestamp", is_flag=True, help="Leave out nvidia.com/gfd.timestamp.")
@click.option(
    "--interval",
    type=click.FloatRange(min=1),
    help="Keep running: refresh the labels every INTERVAL seconds (a labeller DaemonSet); "
    "the --output file is removed when it stops.",
)
@click.option(
    "--sysfs-root",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("/sys"),
    show_default=True,
    help="Where the machine type is read (class/dmi/id/product_name); the GPUs' PCI class "
    "(gpu.mode) and config space (vgpu.*) come from [device-plugin] sysfs-root, as their "
    "NUMA nodes.",
)
@click.pass_obj
def labels(
    obj: CliContext,
    output: Path | None,
    mig_strategy: str | None,
    config_file: str | None,
    no_timestamp: bool,
    interval: float | None,
    sysfs_root: Path,
) -> None:
    """GPU feature discovery's labels: product, memory, family, MIG, sharing, mode, versions.

    With --interval and --output (a labeller DaemonSet), the file goes when the labeller
    does (SIGTERM, SIGINT, an error), so an uninstalled labeller leaves no labels behind, and
    a round where NVML fails, or the config does not read, keeps the last labels. SIGHUP
    starts a round at once (the config changed).
    """
    env = dict(os.environ)
    if config_file:  # flag > environment, as the plugin
        env["CONFIG_FILE"] = config_file

    def settings() -> Config:
        from nvct.deviceplugin.settings import Inputs, settle

        # the device plugin's inputs, read as it reads them (ConfigError: one line)
        config = settle(Inputs(obj.config_file, env, dict(obj.flags))).config
        if mig_strategy is not None:
            config = with_settings(config, "device-plugin", mig_strategy=mig_strategy)
        return config

    def render() -> str:
        config = settings()
        inventory = load_inventory(config, use_cache=obj.use_cache)
        offered = offer(config, inventory)  # a bad sharing rule: one line, exit 1
        return feature_file(
            offered.labels(
                machine=_machine(sysfs_root),
                timestamp=None if no_timestamp else int(time.time()),
            )
        )

    if interval is None:
        _put(render(), output)
        return
    stop, wake = threading.Event(), threading.Event()

    def stopping(*_: object) -> None:
        stop.set()
        wake.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stopping)
    signal.signal(signal.SIGHUP, lambda *_: wake.set())  # its default would end the labeller
    try:
        while True:
            wake.clear()
            try:
                text = render()
            # the driver answers again later, the config-manager writes a good config later
            except (DiscoveryError, ConfigError) as err:
                click.echo(f"nvct-cli labels: warning: {err.one_line()}; {KEPT}", err=True)
            else:
                _put(text, output)
            wake.wait(interval)
            if stop.is_set():
                return
    finally:
        if output is not None:
            output.unlink(missing_ok=True)


KEPT = "the last labels stay until the next round"


def _put(text: str, output: Path | None) -> None:
    if output is None:
        click.echo(text, nl=False)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(str(output), text.encode(), 0o644)
