"""``nvct-device-plugin``: GPUs as Kubernetes extended resources (kubelet device plugin API).

Settings come from the ``[device-plugin]`` table of nvct's config.toml; flags override them.
Logs are JSON lines on stdout (the pod's log); errors also go to stderr as one line.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import threading
import traceback
from typing import Any

import click
import structlog

from nvct.base.defaults import config_path
from nvct.base.errors import NvctError
from nvct.base.log import configure_stdout_structlog
from nvct.config import Config, load_config
from nvct.config.flags import flag_options, with_flags
from nvct.deviceplugin.plugin import Plugin, error
from nvct.deviceplugin.watchers import watchdog
from nvct.node.devices import DeviceConfigError
from nvct.node.guard import FIX as GUARD_FIX
from nvct.node.guard import envvar_without_guard_pass, node_guard
from nvct.node.nogpu import wait_for_a_gpu
from nvct.node.sharing import SharingConfigError

INIT_RETRY_MIN_S = 0.5
INIT_RETRY_S = 5.0

log = structlog.get_logger("nvct-device-plugin")


def _logging() -> None:
    configure_stdout_structlog()


def run(config: Config) -> int:
    """The plugin until SIGTERM/SIGINT; exit 0 then, 1 when NVML fails with fail-on-init."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    plugin = Plugin(config, stop)
    # A node without GPUs: idle, no error; an empty status makes the pod Ready meanwhile.
    if not wait_for_a_gpu(config.dev_root, stop, waiting=lambda: plugin.status.write(dict)):
        return 0
    pause = INIT_RETRY_MIN_S
    try:
        while not plugin.start():
            if config.device_plugin.fail_on_init_error:
                return 1
            log.info("init_retry", retry_in_s=pause)
            if stop.wait(pause):
                return 0
            pause = min(pause * 2, INIT_RETRY_S)
            plugin = Plugin(config, stop)
    except (SharingConfigError, DeviceConfigError) as err:  # the config, not the host
        error(err.one_line())
        plugin.close()
        return 2
    except NvctError as err:  # the install (e.g. no nvct-cdi-hook for the CDI spec)
        error(err.one_line())
        plugin.close()
        return 1
    for name in plugin.status.sweep():
        log.info("stale_temp_removed", file=name)
    plugin.write_status()
    watchers = [w.start() for w in plugin.watchers()]
    watchdog(watchers, stop)
    try:
        plugin.serve()
    except Exception as err:  # a bug: said, with its traceback; the DaemonSet restarts us
        log.error("serve_crashed", error=repr(err), traceback=traceback.format_exc())
        error(f"the serve loop crashed: {err!r}")
        return 1
    finally:
        plugin.close()
        log.info("stopped")
    return 0


@click.command("nvct-device-plugin")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="nvct config.toml")
@flag_options("")  # --driver-root, --dev-root, --proc-root
@flag_options("device-plugin")
def cli(config_file: str | None, **flags: Any) -> int:
    """Advertise the node's GPUs to the kubelet and answer its allocations."""
    _logging()
    try:
        config = load_config(config_file)
    except NvctError as err:
        error(err.one_line())
        return 2
    try:
        config = with_flags(with_flags(config, "", flags), "device-plugin", flags)
    except NvctError as err:
        error(err.one_line())
        return 2
    log.info("starting", settings=json.loads(json.dumps(_settings(config), default=str)))
    try:
        _check_guard(config, config_path(config_file)[0])
    except NvctError as err:
        error(err.one_line())
        return 2
    _check_cdi_cri(config.device_plugin.device_list_strategy)
    return run(config)


CDI_CRI_ONLY = (
    "device-list-strategy cdi-cri alone: only an engine with CDI of its own applies the CDI "
    "devices the kubelet hands it (containerd 1.7 with enable_cdi, containerd 2.x, CRI-O); "
    "containerd 1.6 drops them and the pod starts without its GPU"
)
CDI_CRI_FIX = (
    "add cdi-annotations to [device-plugin] device-list-strategy (nvct-runtime applies them), "
    "and run nvct-cli doctor on the node (its device-plugin-cdi-cri check reads the engine)"
)


def _check_cdi_cri(strategies: tuple[str, ...]) -> None:
    """Say, at start, that a cdi-cri-only answer depends on the engine's CDI: the plugin cannot
    see the node's engine, and an engine without CDI gives such a pod no GPU without a word."""
    if tuple(strategies) == ("cdi-cri",):
        log.warning("cdi_cri_only", problem=CDI_CRI_ONLY, fix=CDI_CRI_FIX)


def _check_guard(config: Config, own_file: str) -> None:
    """Say, at start, when the node's leak guard drops every answer this plugin gives.

    Raises:
        ConfigError: runtime-config names an invalid config.
    """
    guarded, where = node_guard(config, own_file)
    problem = envvar_without_guard_pass(config.device_plugin.device_list_strategy, guarded, where)
    if problem is not None:
        log.error("envvar_ignored_by_guard", problem=problem, fix=GUARD_FIX)
        print(f"nvct-device-plugin: error: {problem} (fix: {GUARD_FIX})", file=sys.stderr)


def _settings(config: Config) -> dict[str, Any]:
    return {"driver_root": config.driver_root, **dataclasses.asdict(config.device_plugin)}


def main() -> int:
    """Console-script entry."""
    try:
        return int(cli.main(standalone_mode=False) or 0)
    except click.ClickException as err:
        err.show()
        return 2


if __name__ == "__main__":
    sys.exit(main())
