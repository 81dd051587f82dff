"""The files nvct-device-plugin keeps in the kubelet's device-plugins directory: its sockets
(NVIDIA's names), the status file beside them, and the kubelet's own socket. Here, in the
node's library, so nvct-cli (device-plugin-status), doctor and the exporter read the names the
plugin writes without importing the plugin.

The directory's default is ``nvct.base.defaults.DEFAULT_PLUGIN_DIR`` (the config's default, and
the config sits below this library); the kind and file name of the plugin's CDI spec are in
``nvct.cdi.names`` (the CDI reader names them)."""

from __future__ import annotations

KUBELET_SOCKET = "kubelet.sock"
# Beside the sockets: the kubelet removes sockets only, and nvct-cli reads it from the node.
STATUS_FILE = "nvct-device-plugin.status.json"
SOCKET_PREFIX = "nvidia-"
SOCKET_SUFFIX = ".sock"


def socket_name(resource: str) -> str:
    """A resource's socket file (NVIDIA's names): ``nvidia.com/mig-1g.10gb`` ->
    ``nvidia-mig-1g.10gb.sock``."""
    return f"{SOCKET_PREFIX}{resource.split('/', 1)[1]}{SOCKET_SUFFIX}"
