"""A device's health as a DRA device taint (KEP-5055, ``DRADeviceTaints``): what the health
policy said, in the few characters a taint holds.

The key is the driver's own (``<driver>/unhealthy``), the value names the cause (``xid-79``,
``ecc``, ``gpu-lost``, ``recovery-action``, ``service``; ``other`` for the rest), the effect
``NoSchedule``: pods already running keep their GPU (NoExecute would evict them for an error
that may be an application's own), new claims are not given it.
"""

from __future__ import annotations

import re
from typing import Any

EFFECT = "NoSchedule"

# The health state machine's reasons (nvct.node.health.policy, nvct.node.health.state) and
# the short value each becomes; the first that matches wins.
_CAUSES = (
    (re.compile(r"\bXID (\d+)\b"), "xid-{0}"),
    (re.compile(r"double-bit ECC", re.I), "ecc"),
    (re.compile(r"does not answer|GPU_IS_LOST|lost", re.I), "gpu-lost"),
    (re.compile(r"recovery action", re.I), "recovery-action"),
    (re.compile(r"row remapping failed|needs service", re.I), "service"),
)


def taint_value(reason: str) -> str:
    """The taint value for the health policy's ``reason``."""
    for pattern, value in _CAUSES:
        found = pattern.search(reason)
        if found:
            return value.format(*found.groups())
    return "other"


def health_taint(driver: str, reason: str) -> dict[str, Any]:
    """The taint an Unhealthy device carries in the driver's slice."""
    return {"key": f"{driver}/unhealthy", "value": taint_value(reason), "effect": EFFECT}
