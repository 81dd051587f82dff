"""``nvct-cli labels``: the node's GPU labels (NVIDIA's GFD names) as an NFD feature file.

The MIG strategy and the sharing (replicas, strategy, ``.shared`` resources) are the device
plugin's, from ``[device-plugin]`` of the same config, so the labels say what it advertises.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import click

from nvct.base.atomic import write_atomic
from nvct.base.errors import DiscoveryError
from nvct.cli.main import CliContext
from nvct.config import with_settings
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
    "(gpu.mode) comes from [device-plugin] sysfs-root, as their NUMA nodes.",
)
@click.pass_obj
def labels(
    obj: CliContext,
    output: Path | None,
    mig_strategy: str | None,
    no_timestamp: bool,
    interval: float | None,
    sysfs_root: Path,
) -> None:
    """GPU feature discovery's labels: product, memory, family, MIG, sharing, mode, versions.

    With --interval and --output (a labeller DaemonSet), the file goes when the labeller
    does (SIGTERM, SIGINT, an error), so an uninstalled labeller leaves no labels behind, and
    a round where NVML fails keeps the last labels.
    """
    config = obj.config
    if mig_strategy is not None:
        config = with_settings(config, "device-plugin", mig_strategy=mig_strategy)

    def render() -> str:
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
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        while True:
            try:
                text = render()
            except DiscoveryError as err:  # the driver answers again later: labels stay
                click.echo(f"nvct-cli labels: warning: {err.one_line()}; {KEPT}", err=True)
            else:
                _put(text, output)
            if stop.wait(interval):
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
