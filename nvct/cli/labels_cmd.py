"""``nvct-cli labels``: the node's GPU labels (NVIDIA's GFD names) as an NFD feature file, or
as NFD's NodeFeature object through the API server (``--use-node-feature-api``, GFD's flag and
environment names; ``nvct.kubeapi.client.nodefeature``).

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
from collections.abc import Callable
from pathlib import Path

import click

from nvct.base.errors import ConfigError, DiscoveryError
from nvct.cli.labels_outputs import FileOutput, NodeFeatureOutput
from nvct.cli.main import CliContext
from nvct.config import Config, with_settings
from nvct.config.kubernetes import MIG_STRATEGIES
from nvct.host.load import load_inventory
from nvct.kubeapi.client.access import SERVICE_ACCOUNT_DIR
from nvct.kubeapi.client.errors import KubeApiError
from nvct.node.offer import offer

DEFAULT_OUTPUT = "/etc/kubernetes/node-feature-discovery/features.d/nvct"
DMI_PRODUCT = "class/dmi/id/product_name"
# After a refused or failed write of the NodeFeature object: the next try in 1 s, doubling up
# to the round's interval (a 403 or a missing CRD waits for an admin, not a restart loop).
RETRY_MIN_S = 1.0


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
@click.option(
    "--use-node-feature-api/--no-use-node-feature-api",
    envvar=["GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API"],
    default=False,
    help="Write the labels as NFD's NodeFeature object nvidia-features-for-<node> through the "
    "Kubernetes API (GFD's flag; env GFD_USE_NODE_FEATURE_API), not a feature file; it stays "
    "when the labeller stops.",
)
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    default="",
    help="With --use-node-feature-api: this node's name (env NODE_NAME).",
)
@click.option(
    "--namespace",
    envvar="NAMESPACE",
    default="",
    help="With --use-node-feature-api: the object's namespace (env NAMESPACE); default the "
    "service account's (the kubeconfig context's, else default).",
)
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    default="",
    help="With --use-node-feature-api: a kubeconfig file (env KUBECONFIG); default in-cluster.",
)
@click.option(
    "--service-account-dir",
    envvar="NVCT_SERVICE_ACCOUNT_DIR",
    default=SERVICE_ACCOUNT_DIR,
    show_default=True,
    help="With --use-node-feature-api in a pod: the token, ca.crt and namespace.",
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
    use_node_feature_api: bool,
    node_name: str,
    namespace: str,
    kubeconfig: str,
    service_account_dir: str,
) -> None:
    """GPU feature discovery's labels: product, memory, family, MIG, sharing, mode, versions.

    With --interval and --output (a labeller DaemonSet), the file goes when the labeller
    does (SIGTERM, SIGINT, an error), so an uninstalled labeller leaves no labels behind, and
    a round where NVML fails, or the config does not read, keeps the last labels. SIGHUP
    starts a round at once (the config changed).

    With --use-node-feature-api the labels go to the NodeFeature object instead, written only
    when they changed (not counting gfd.timestamp); a refused write is one line and is tried
    again with backoff; the object stays when the labeller stops (NFD keeps the labels).
    """
    out: FileOutput | NodeFeatureOutput = FileOutput(output)
    if use_node_feature_api:
        if output is not None:
            raise click.UsageError(
                "--output and --use-node-feature-api (or GFD_USE_NODE_FEATURE_API) both set: "
                "the labels go to one place; drop one"
            )
        out = NodeFeatureOutput(node_name, namespace, kubeconfig, service_account_dir)
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

    def render() -> dict[str, str]:
        config = settings()
        inventory = load_inventory(config, use_cache=obj.use_cache)
        offered = offer(config, inventory)  # a bad sharing rule: one line, exit 1
        return dict(
            offered.labels(
                machine=_machine(sysfs_root),
                timestamp=None if no_timestamp else int(time.time()),
            )
        )

    if interval is None:
        out.publish(render())
    else:
        _keep_labelling(render, out, interval)


def _keep_labelling(
    render: Callable[[], dict[str, str]],
    out: FileOutput | NodeFeatureOutput,
    interval: float,
) -> None:
    """A round every ``interval`` seconds and on SIGHUP, until SIGTERM or SIGINT."""
    stop, wake = threading.Event(), threading.Event()

    def stopping(*_: object) -> None:
        stop.set()
        wake.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stopping)
    signal.signal(signal.SIGHUP, lambda *_: wake.set())  # its default would end the labeller
    retry = RETRY_MIN_S
    try:
        while True:
            wake.clear()
            pause = interval
            try:
                found = render()
            # the driver answers again later, the config-manager writes a good config later
            except (DiscoveryError, ConfigError) as err:
                out.kept(err)
            else:
                try:
                    out.publish(found)
                    retry = RETRY_MIN_S
                except KubeApiError as err:  # one line, and again soon: never a crash loop
                    out.failed(err)
                    pause, retry = min(retry, interval), min(retry * 2, interval)
            wake.wait(pause)
            if stop.is_set():
                return
    finally:
        out.close()
