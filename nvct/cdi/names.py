"""CDI's fully-qualified device names (``vendor/class=name``, e.g. ``nvidia.com/gpu=0``).

A container names CDI devices in ``NVIDIA_VISIBLE_DEVICES`` (as NVIDIA's toolkit accepts since
1.18) or in ``cdi.k8s.io/<key>`` annotations (what device plugins answer for engines without CDI
support). The grammar is the CDI specification's (``pkg/parser`` of the CDI project): a vendor
is a domain name, a class a simple name (``mig-1g.10gb``), a device name may also hold ``:``.
"""

from __future__ import annotations

import re

_VENDOR = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
_CLASS = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?"
QUALIFIED = re.compile(rf"^({_VENDOR})/({_CLASS})=({_NAME})$")
KIND = re.compile(rf"^{_VENDOR}/{_CLASS}$")

# The kind of nvct-device-plugin's own spec: a vendor no node spec uses. `nvct-cli cdi
# generate`, the packages' refresh unit and NVIDIA's toolkit all write nvidia.com/gpu into
# /var/run/cdi, and two specs of one kind in one directory lose every name they share (the CDI
# rule: neither is used). Not NVIDIA's plugin's k8s.device-plugin.nvidia.com either: its spec
# may be left on a node that moves to nvct. The same shape as NVIDIA's, so tools that know that
# pattern read it.
PLUGIN_VENDOR = "k8s.device-plugin.nvct.io"
PLUGIN_CLASS = "gpu"
PLUGIN_KIND = f"{PLUGIN_VENDOR}/{PLUGIN_CLASS}"
PLUGIN_SPEC_NAME = "nvct-device-plugin.json"  # in [device-plugin] cdi-spec-dir
# nvct-dra-plugin's per-claim specs: one file per claim, all of this kind, each device named
# <claim uid>-<device>, so claims never share a name (NVIDIA's DRA driver: k8s.gpu.nvidia.com/
# claim). Apart from the node's spec and the device plugin's.
DRA_VENDOR = "k8s.gpu.nvct.io"
DRA_CLASS = "claim"
DRA_KIND = f"{DRA_VENDOR}/{DRA_CLASS}"
DRA_SPEC_PREFIX = "nvct-dra-claim-"  # <prefix><claim uid>.json in the plugin's CDI directory


def looks_qualified(token: str) -> bool:
    """Whether ``token`` is meant as a CDI name (it has the ``kind=`` shape), valid or not."""
    kind, eq, _ = token.partition("=")
    return bool(eq) and "/" in kind


def is_qualified(token: str) -> bool:
    """Whether ``token`` is a valid fully-qualified CDI device name."""
    return QUALIFIED.match(token) is not None


def split_qualified(token: str) -> tuple[str, str]:
    """``(kind, name)`` of a valid qualified name: ``("nvidia.com/gpu", "0")``."""
    kind, _, name = token.partition("=")
    return kind, name
