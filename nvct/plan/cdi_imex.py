"""The CDI spec of the host's IMEX channels (kind ``nvidia.com/imex-channel``), as NVIDIA's
``nvidia-ctk cdi generate --mode imex`` writes it: one device per channel node the host has,
named by its number (``nvidia.com/imex-channel=0``), and ``all``."""

from __future__ import annotations

import posixpath
from typing import Any

from nvct.base.errors import RequestError
from nvct.cdi import model
from nvct.host.inventory import Inventory
from nvct.plan.cdi_spec import CDI_VERSION, spec_node
from nvct.plan.features import IMEX_DIR

IMEX_KIND = "nvidia.com/imex-channel"


def build_imex_spec(inventory: Inventory) -> dict[str, Any]:
    """The spec as a JSON-ready dict.

    Raises:
        RequestError: the host has no IMEX channel node.
    """
    channels = sorted(
        (n for n in inventory.feature_nodes if posixpath.dirname(n.path) == IMEX_DIR),
        key=lambda n: n.minor,
    )
    if not channels:
        raise RequestError(
            f"this host has no IMEX channel nodes under {IMEX_DIR}",
            hint="load the driver's IMEX support (nvidia-caps-imex-channels) and create the "
            "channels (nvidia-modprobe -i <channel>)",
        )
    devices = [
        model.Device(
            posixpath.basename(n.path)[len("channel") :],
            model.ContainerEdits(device_nodes=(spec_node(n),)),
        )
        for n in channels
    ]
    every = model.ContainerEdits(device_nodes=tuple(spec_node(n) for n in channels))
    devices.append(model.Device("all", every))
    return model.Spec(CDI_VERSION, IMEX_KIND, tuple(devices)).to_dict()
