"""``nvct-dra-plugin``: the node's GPUs through Dynamic Resource Allocation (kubelet side).

Registers with the kubelet's plugin watcher and prepares the claims the scheduler allocated on
this node: per claim, a CDI spec of its devices (``k8s.gpu.nvct.io/claim``) whose ids the
kubelet hands the runtime. Settings: nvct's config.toml (driver and dev roots, ``[device-plugin]
sysfs-root``), flags or their environment names. Logs are JSON lines on stdout; errors also go
to stderr as one line.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import click
import structlog

from nvct.base.errors import NvctError
from nvct.base.log import configure_stdout_structlog
from nvct.config import load_config
from nvct.config.flags import flag_options, with_flags
from nvct.kubeapi.client.access import SERVICE_ACCOUNT_DIR

NAME = "nvct-dra-plugin"
DRIVER = "gpu.nvct.io"

log = structlog.get_logger(NAME)


def error(message: str) -> None:
    """One line on stderr (and the JSON log)."""
    log.error("error", error=message)
    print(f"{NAME}: error: {message}", file=sys.stderr, flush=True)


@click.command(NAME)
@flag_options("")  # --driver-root, --dev-root, --proc-root
@click.option("--config", "config_file", default=None, help="nvct's config.toml")
@click.option("--driver-name", envvar="DRIVER_NAME", default=DRIVER, show_default=True,
              help="the DRA driver's name (DeviceClasses select it)")  # fmt: skip
@click.option("--node-name", envvar="NODE_NAME", default="",
              help="this node's name: its ResourceSlice pool")  # fmt: skip
@click.option("--registry-dir", envvar="KUBELET_REGISTRAR_DIRECTORY_PATH",
              default="/var/lib/kubelet/plugins_registry", show_default=True,
              help="the kubelet's plugin registration directory")  # fmt: skip
@click.option("--plugins-dir", envvar="KUBELET_PLUGINS_DIRECTORY_PATH",
              default="/var/lib/kubelet/plugins", show_default=True,
              help="where the plugin's socket and checkpoint live (<dir>/<driver>/)")  # fmt: skip
@click.option("--cdi-root", envvar="CDI_ROOT", default="/var/run/cdi", show_default=True,
              help="where the claims' CDI specs go (the engine's CDI directory)")  # fmt: skip
@click.option("--mps-root", envvar="MPS_ROOT", default="/run/nvct/dra-mps", show_default=True,
              help="MPS claims' pipe, log and shm dirs (<dir>/<claim uid>/): a tmpfs")  # fmt: skip
@click.option("--sysfs-root", default=None, help="sysfs (default [device-plugin] sysfs-root)")
@click.option("--kubeconfig", envvar="KUBECONFIG", default="",
              help="kubeconfig file (default: in-cluster)")  # fmt: skip
@click.option("--service-account-dir", envvar="NVCT_SERVICE_ACCOUNT_DIR",
              default=SERVICE_ACCOUNT_DIR, hidden=True)  # fmt: skip
def cli(
    config_file: str | None,
    driver_name: str,
    node_name: str,
    registry_dir: str,
    plugins_dir: str,
    cdi_root: str,
    mps_root: str,
    sysfs_root: str | None,
    kubeconfig: str,
    service_account_dir: str,
    **roots: str | None,
) -> int:
    """Prepare the GPUs DRA allocated on this node for the kubelet."""
    configure_stdout_structlog()
    if not node_name:
        error("no node name (fix: set NODE_NAME from the pod's spec.nodeName, or --node-name)")
        return 2
    from nvct.dra.publishing import start_publishing
    from nvct.dra.setup import Settings, start
    from nvct.kubeapi.client.access import ClusterAccess

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        config = with_flags(load_config(config_file, use_cache=False), "", roots)
        settings = Settings(
            driver=driver_name, node=node_name, registry_dir=Path(registry_dir),
            plugins_dir=Path(plugins_dir), cdi_root=Path(cdi_root), mps_root=Path(mps_root),
            sysfs_root=Path(sysfs_root or config.device_plugin.sysfs_root),
            kubeconfig=kubeconfig, service_account_dir=service_account_dir,
        )  # fmt: skip
        sockets = start(config, settings, stop)
        start_publishing(
            config, ClusterAccess(kubeconfig, service_account_dir), node=node_name,
            driver=driver_name, devices=list(sockets.driver.devices.values()),
            state_dir=Path(plugins_dir) / driver_name, stop=stop,
        )  # fmt: skip
    except NvctError as err:
        error(err.one_line())
        return 1
    except OSError as err:
        error(str(err))
        return 1
    sockets.watch(stop)
    sockets.stop()
    log.info("stopped")
    return 0


def main() -> int:
    """Console-script entry."""
    try:
        return int(cli.main(standalone_mode=False) or 0)
    except click.ClickException as err:
        err.show()
        return 2


if __name__ == "__main__":
    sys.exit(main())
