"""Whether the plugin's answers can give a GPU on a node whose nvct-runtime has the leak guard
(``request.only-allocated-gpus``) on.

The guard ignores ``NVIDIA_VISIBLE_DEVICES`` from every source: nvct-runtime cannot tell the
plugin's variable from an image's. So an answer in the ``envvar`` form alone gives a pod no GPU
there, while ``volume-mounts`` (a /dev/null source), ``cdi-annotations`` and ``cdi-cri`` pass.
The plugin says so when it starts, and ``nvct-cli doctor`` reports it; neither changes what
is answered (a form the operator did not choose would hide the mistake).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nvct.base.errors import ConfigError
from nvct.config import Config, load_config

FIX = (
    'set [device-plugin] device-list-strategy = ["cdi-cri", "cdi-annotations"] (or add '
    '"volume-mounts"), or turn request.only-allocated-gpus off on the node'
)


def envvar_without_guard_pass(strategies: Sequence[str], guarded: bool, where: str) -> str | None:
    """The problem in one line, or None: ``strategies`` answer only ``envvar`` and ``where``
    (the node's config) has the guard on."""
    if not guarded or set(strategies) != {"envvar"}:
        return None
    return (
        "device-list-strategy envvar answers only NVIDIA_VISIBLE_DEVICES, which this node's "
        f"nvct-runtime ignores (request.only-allocated-gpus is on in {where}): pods get no GPU"
    )


def node_guard(config: Config, own_file: str | None) -> tuple[bool, str]:
    """Whether the node's nvct-runtime guards, and the file that says so: ``runtime-config``
    where set (a missing file guards nothing: nvct is not installed there yet), else the
    plugin's own config.

    Raises:
        ConfigError: ``runtime-config`` names a file that is not a valid nvct config.
    """
    path = config.device_plugin.runtime_config
    if not path:
        return config.request.only_allocated_gpus, own_file or "the plugin's config"
    if not Path(path).is_file():
        return False, path
    try:
        return load_config(path).request.only_allocated_gpus, path
    except ConfigError as err:
        raise ConfigError(
            f"[device-plugin] runtime-config {path}: {err.message}", hint=err.hint
        ) from err
