"""Live reload: on SIGHUP, or when a config file the plugin was started with is replaced (a
config-manager sidecar writes the node's chosen config by atomic rename, or, as NVIDIA's does,
points a symlink at it; a ConfigMap volume swaps its symlink), the settings are read again from
the same inputs and applied without a restart.

A resource whose devices and answers did not change keeps its endpoint, its registration and
the kubelet's ListAndWatch stream; a changed one is served and registered again; a removed one
stops (its socket goes); a new one registers. An input that does not read, or a config the
GPUs cannot take, keeps the running plugin and says so in one line.
"""

from __future__ import annotations

import sys

import structlog

from nvct.base.errors import NvctError
from nvct.deviceplugin.plugin import Plugin
from nvct.deviceplugin.settings import Inputs, check_guard, say, settle
from nvct.deviceplugin.trigger import Trigger

log = structlog.get_logger("nvct-device-plugin")


def refused(why: str) -> None:
    """The one line a refused reload is: logged, and on stderr."""
    log.error("reload_refused", error=why, kept="the running config")
    print(f"nvct-device-plugin: error: reload refused, the running config stays: {why}",
          file=sys.stderr)  # fmt: skip


def reloaded(plugin: Plugin, inputs: Inputs, own_file: str) -> Plugin:
    """The plugin for the inputs as they read now: ``plugin`` itself when they are invalid, do
    not fit the GPUs, or change nothing; else a new one that took over ``plugin``'s unchanged
    endpoints (``plugin`` is retired)."""
    try:
        settled = settle(inputs)
        config = check_guard(settled, own_file)
    except NvctError as err:
        refused(err.one_line())
        return plugin
    if config == plugin.config:
        log.info("reload_unchanged")
        return plugin
    say(settled)
    new = Plugin(config, plugin.stop)
    try:
        started = new.start()
    except NvctError as err:  # the sharing rules or MIG strategy do not fit these GPUs
        new.close()
        refused(err.one_line())
        return plugin
    if not started:
        new.close()
        refused("NVML failed with the new config (see the error above)")
        return plugin
    kept = new.adopt(plugin)
    new.write_status()
    new.run_watchers()
    changed = [e.service.resource.name for e in new.endpoints]
    log.info("reloaded", kept=kept, served=[r for r in changed if r not in kept])
    return new


def trigger(inputs: Inputs, own_file: str) -> Trigger:
    """The reload trigger of these inputs' files (SIGHUP handled from now on: its default
    would end the process, and a config-manager may send it while the plugin starts)."""
    return Trigger([f for f in (inputs.nvidia_file, own_file) if f])


def serve(plugin: Plugin, inputs: Inputs, own_file: str, asked: Trigger) -> Plugin:
    """``plugin.serve()``, reloading when ``asked``, until stop; the plugin running at the
    end."""
    registered = plugin.serve(asked)
    while not plugin.stop.is_set():
        plugin = reloaded(plugin, inputs, own_file)
        registered = plugin.serve(asked, registered)
    return plugin
