"""The files nvct-device-plugin keeps in the kubelet's device-plugins directory and its CDI
spec directory: here, below every frontend, so nvct-cli (device-plugin-status) and doctor read
the names the plugin writes without importing the plugin."""

from __future__ import annotations

DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET = "kubelet.sock"
# Beside the sockets: the kubelet removes sockets only, and nvct-cli reads it from the node.
STATUS_FILE = "nvct-device-plugin.status.json"
CDI_SPEC_NAME = "nvct-device-plugin.json"
# The kind of that spec: a vendor no node spec uses. `nvct-cli cdi generate`, the packages'
# refresh unit and NVIDIA's toolkit all write nvidia.com/gpu into /var/run/cdi, and two specs
# of one kind in one directory lose every name they share (the CDI rule: neither is used).
# Not NVIDIA's plugin's k8s.device-plugin.nvidia.com either: its spec may be left on a node that
# moves to nvct. The same shape as NVIDIA's, so tools that know that pattern read it.
CDI_VENDOR = "k8s.device-plugin.nvct.io"
CDI_CLASS = "gpu"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"
SOCKET_PREFIX = "nvidia-"
SOCKET_SUFFIX = ".sock"


def socket_name(resource: str) -> str:
    """A resource's socket file (NVIDIA's names): ``nvidia.com/mig-1g.10gb`` ->
    ``nvidia-mig-1g.10gb.sock``."""
    return f"{SOCKET_PREFIX}{resource.split('/', 1)[1]}{SOCKET_SUFFIX}"
