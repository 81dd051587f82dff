"""``nvct-device-plugin``: GPUs as Kubernetes extended resources (kubelet device plugin API).

Settings come from the ``[device-plugin]`` table of nvct's config.toml; flags override them.
Logs are JSON lines on stdout (the pod's log); errors also go to stderr as one line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
import traceback
from typing import Any, TypeVar

import click
import structlog

from nvct.base.defaults import config_path
from nvct.base.errors import NvctError
from nvct.base.log import configure_stdout_structlog
from nvct.config import Config
from nvct.config.flags import bool_values, flag_options
from nvct.deviceplugin import reload
from nvct.deviceplugin.plugin import Plugin, error
from nvct.deviceplugin.settings import Inputs, check_guard, say, settle
from nvct.node.devices import DeviceConfigError
from nvct.node.nogpu import wait_for_a_gpu
from nvct.node.sharing import SharingConfigError

INIT_RETRY_MIN_S = 0.5
INIT_RETRY_S = 5.0

log = structlog.get_logger("nvct-device-plugin")
F = TypeVar("F", bound=Any)


def _logging() -> None:
    configure_stdout_structlog()


def run(config: Config, inputs: Inputs, own_file: str) -> int:
    """The plugin until SIGTERM/SIGINT, reloading ``inputs`` when asked (``reload``); exit 0
    then, 1 when NVML fails with fail-on-init."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    asked = reload.trigger(inputs, own_file)
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
    plugin.run_watchers()
    try:
        plugin = reload.serve(plugin, inputs, own_file, asked)
    except Exception as err:  # a bug: said, with its traceback; the DaemonSet restarts us
        log.error("serve_crashed", error=repr(err), traceback=traceback.format_exc())
        error(f"the serve loop crashed: {err!r}")
        return 1
    finally:
        plugin.close()
        log.info("stopped")
    return 0


# NVIDIA's flags nvct has no flag of its own for (cmd/nvidia-device-plugin/main.go): each
# becomes its environment name, so flag > environment holds by construction.
_BOOL = {"is_flag": True, "default": None}
NVIDIA_FLAGS: tuple[tuple[tuple[str, ...], str, dict[str, Any]], ...] = (
    (("--config-file",), "CONFIG_FILE", {"type": click.Path(dir_okay=False)}),
    (("--kubelet-socket",), "KUBELET_SOCKET", {}),
    (("--nvidia-driver-root",), "NVIDIA_DRIVER_ROOT", {}),
    (("--nvidia-dev-root",), "NVIDIA_DEV_ROOT", {}),
    (("--driver-root-ctr-path", "--container-driver-root"), "DRIVER_ROOT_CTR_PATH", {}),
    (("--nvidia-cdi-hook-path", "--nvidia-ctk-path"), "NVIDIA_CDI_HOOK_PATH", {}),
    (
        ("--shared-devices-allocation-policy",),
        "SHARED_DEVICES_ALLOCATION_POLICY",
        {"type": click.Choice(["distributed", "packed"])},
    ),
    (
        ("--device-discovery-strategy",),
        "DEVICE_DISCOVERY_STRATEGY",
        {"type": click.Choice(["auto", "nvml", "tegra"])},
    ),
    (("--gdrcopy-enabled",), "GDRCOPY_ENABLED", _BOOL),
    (("--gds-enabled",), "GDS_ENABLED", _BOOL),
    (("--mofed-enabled",), "MOFED_ENABLED", _BOOL),
    (("--imex-channel-ids",), "IMEX_CHANNEL_IDS", {}),
    (("--imex-required",), "IMEX_REQUIRED", _BOOL),
    (("--cdi-feature-flags",), "CDI_FEATURE_FLAGS", {}),
    (("--cdi-disable-hooks",), "CDI_DISABLE_HOOKS", {}),
)


def _nvidia_flags(command: F) -> F:
    for names, env, kwargs in reversed(NVIDIA_FLAGS):
        help_ = f"NVIDIA's flag (env {env}); see the README's 'Coming from NVIDIA's device plugin'."
        command = click.option(*names, f"nvidia_{env.lower()}", help=help_, **kwargs)(command)
    return command


@click.command("nvct-device-plugin")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="nvct config.toml")
@flag_options("")  # --driver-root, --dev-root, --proc-root
@flag_options("device-plugin")
@_nvidia_flags
def cli(config_file: str | None, **flags: Any) -> int:
    """Advertise the node's GPUs to the kubelet and answer its allocations."""
    _logging()
    env = dict(os.environ)
    for _, name, _ in NVIDIA_FLAGS:
        value = flags.pop(f"nvidia_{name.lower()}")
        if value is not None:  # flag > environment
            env[name] = str(value).lower() if isinstance(value, bool) else str(value)
    inputs = Inputs(config_file, env, flags)
    try:
        settled = settle(inputs)
    except NvctError as err:
        error(err.one_line())
        return 2
    say(settled)
    config = settled.config
    log.info("starting", settings=json.loads(json.dumps(_settings(config), default=str)))
    try:
        config = check_guard(settled, config_path(config_file)[0])
    except NvctError as err:
        error(err.one_line())
        return 2
    _check_cdi_cri(config.device_plugin.device_list_strategy)
    return run(config, inputs, config_path(config_file)[0])


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


def _settings(config: Config) -> dict[str, Any]:
    return {"driver_root": config.driver_root, **dataclasses.asdict(config.device_plugin)}


def main() -> int:
    """Console-script entry."""
    try:
        args = bool_values(sys.argv[1:], cli)
        return int(cli.main(args=args, standalone_mode=False) or 0)
    except click.ClickException as err:
        err.show()
        return 2


if __name__ == "__main__":
    sys.exit(main())
