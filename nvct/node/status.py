"""The status file nvct-device-plugin rewrites beside its sockets on every change: each
advertised device with its health and why, and the settings the plugin runs with.

Readers (``nvct-cli device-plugin-status``, doctor, the exporter) live on the node, while the
plugin may run in a pod from a ConfigMap: the recorded settings tell them what the plugin
really does, not what the node's own config.toml says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvct.config.declare import recorded_names
from nvct.config.kubernetes import DevicePlugin
from nvct.node.files import STATUS_FILE

VERSION = 2
# The [device-plugin] keys recorded, by their config.toml names: those declared recorded=True.
SETTINGS = recorded_names(DevicePlugin)

Devices = dict[str, list[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class PluginStatus:
    """Resource -> its devices (id, uuid, sharing, health, reason), and the settings (empty
    for a file written before they were recorded)."""

    resources: Devices
    settings: dict[str, Any] = field(default_factory=dict)


def status_bytes(resources: Devices, settings: dict[str, Any]) -> bytes:
    """The file's contents."""
    document = {"version": VERSION, "settings": settings, "resources": resources}
    return json.dumps(document, indent=2).encode()


def read_status(directory: Path) -> tuple[PluginStatus | None, str]:
    """The status file in ``directory``; (None, "") when there is none, (None, why) when it
    cannot be read."""
    path = directory / STATUS_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError) as err:
        return None, f"cannot read {path}: {err}"
    if isinstance(data, dict) and "resources" in data:
        resources, settings = data.get("resources"), data.get("settings") or {}
    else:  # version 1: the resources map alone
        resources, settings = data, {}
    if not isinstance(resources, dict) or not isinstance(settings, dict):
        return None, f"{path} is not nvct-device-plugin's status (resource -> devices)"
    if not all(isinstance(v, list) for v in resources.values()):
        return None, f"{path} is not nvct-device-plugin's status (resource -> devices)"
    return PluginStatus(resources, settings), ""


def advertised(directory: Path) -> tuple[str, ...]:
    """The resource names the status file in ``directory`` records as advertised, rule-named
    ones (``nvidia.com/gpu.mps``) included; none without a readable file."""
    status, _ = read_status(directory)
    return tuple(status.resources) if status is not None else ()
