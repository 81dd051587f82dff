"""The hook's work order: a plan reduced to plain JSON data.

The shim has already built the plan on ``create`` (request, inventory, requirements, rootfs
layout), so it hands the hook the result in the hook's own environment (``NVCT_PLAN``), which
it writes into ``config.json`` itself: the hook then starts with the stdlib only, no config,
inventory or plan code. The hook run without the shim (``docker --gpus``) builds the same
order from a plan it computes. Either way ``apply`` consumes only this format.

Format (version 1)::

    {"v": 1, "devices": [[path, major, minor, mode], ...],
     "mounts": [[host_path, container_path, [options]], ...],
     "symlinks": [[path, target], ...], "ldconfig": "/sbin/ldconfig",
     "ldconfig_dirs": [...], "log": [file, level], "gpus": [...], "capabilities": [...]}
"""

from __future__ import annotations

import json

from nvct.errors import SpecError

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

    from nvct.config import Config
    from nvct.plan import Plan


ENV_VAR = "NVCT_PLAN"
VERSION = 1


def from_plan(plan: Plan, config: Config) -> dict[str, Any]:
    """The work order of a plan."""
    return {
        "v": VERSION,
        "devices": [[d.node.path, d.node.major, d.node.minor, d.node.mode] for d in plan.devices],
        "mounts": [[m.source, m.target, list(m.options)] for m in plan.mounts],
        "symlinks": [[s.path, s.target] for s in plan.symlinks],
        "ldconfig": str(config.ldconfig),
        "ldconfig_dirs": list(plan.ldconfig_dirs),
        "log": [config.log_file, config.log_level],
        "gpus": [s.gpu.uuid if s.mig is None else s.mig.uuid for s in plan.selected],
        "capabilities": sorted(plan.request.capabilities),
    }


def encode(order: dict[str, Any]) -> str:
    """Compact JSON for the hook's environment."""
    return json.dumps(order, separators=(",", ":"))


def decode(text: str) -> dict[str, Any]:
    """Parse and check a work order.

    Raises:
        SpecError: malformed, or written by an incompatible nvct version.
    """
    try:
        order = json.loads(text)
    except ValueError as err:
        raise SpecError(f"{ENV_VAR} in the hook's environment is not JSON ({err})") from err
    if not isinstance(order, dict) or order.get("v") != VERSION:
        raise SpecError(
            f"{ENV_VAR} has an unknown format",
            hint="nvct-runtime and nvct-hook come from different nvct versions; reinstall nvct",
        )
    for key, kind in (
        ("devices", list),
        ("mounts", list),
        ("symlinks", list),
        ("ldconfig", str),
        ("ldconfig_dirs", list),
        ("log", list),
    ):
        if not isinstance(order.get(key), kind):
            raise SpecError(f"{ENV_VAR}: '{key}' is missing or has the wrong type")
    return order
