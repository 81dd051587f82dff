"""containerd's annotation pass-through for the handlers that run nvct-runtime: the device
plugin's ``cdi.k8s.io/*`` answers must reach the container (``container_annotations``), and a
pod's own must not (``pod_annotations``: containerd adds what it lets through to every
container of the pod, so any pod could name GPUs past the scheduler)."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

from nvct.base import cri_annotations
from nvct.doctor.result import CheckResult, failed, passed, warned
from nvct.doctor.tomlfiles import RUNTIME_BASENAME, table_at

NAME = "containerd-annotations"
CONFIGURE = "nvct-cli configure --runtime containerd"


def nvct_handlers(
    files: list[tuple[Path, dict[str, Any]]],
) -> dict[tuple[str, str], tuple[Path, dict[str, Any], bool]]:
    """(CRI plugin, handler name) -> (file, handler table, CDI on in that plugin) for each
    handler whose ``BinaryName`` is nvct-runtime, the later file winning as containerd merges."""
    found: dict[tuple[str, str], tuple[Path, dict[str, Any], bool]] = {}
    for path, data in files:
        for plugin, table in (table_at(data, ("plugins",)) or {}).items():
            if not isinstance(table, dict):
                continue
            cdi = table.get("enable_cdi") is True
            for name, handler in (table_at(table, ("containerd", "runtimes")) or {}).items():
                binary = (table_at(handler, ("options",)) or {}).get("BinaryName")
                if isinstance(binary, str) and posixpath.basename(binary) == RUNTIME_BASENAME:
                    found[(plugin, name)] = (path, handler, cdi)
    return found


def check_annotations(files: list[tuple[Path, dict[str, Any]]]) -> CheckResult | None:
    """FAIL where ``pod_annotations`` lets ``cdi.k8s.io/`` through; WARN where the device
    plugin's annotations cannot reach nvct-runtime; None when no handler runs nvct-runtime."""
    handlers = nvct_handlers(files)
    if not handlers:
        return None
    wide, closed = [], []
    for (plugin, name), (path, handler, cdi) in sorted(handlers.items()):
        where = f'{path}: [plugins."{plugin}".containerd.runtimes.{name}]'
        pods = cri_annotations.cdi_patterns(handler.get("pod_annotations") or [])
        if pods:
            wide.append(f"{where} pod_annotations = {pods}")
        if not cdi and not cri_annotations.cdi_patterns(handler.get("container_annotations") or []):
            closed.append(where)
    if wide:
        return failed(
            NAME,
            "a pod's own cdi.k8s.io/ annotation reaches every container of the pod, so any pod "
            "can name GPUs past the scheduler: " + "; ".join(wide),
            "remove those patterns from pod_annotations (the device plugin's annotations need "
            f'only container_annotations = ["{cri_annotations.CDI_PATTERN}"]), then restart '
            "containerd",
        )
    if closed:
        return warned(
            NAME,
            "the device plugin's cdi-annotations answer never reaches nvct-runtime (no "
            f"container_annotations pattern lets {cri_annotations.CDI_PREFIX} through and "
            "enable_cdi is off): " + "; ".join(closed),
            f"{CONFIGURE} (it adds container_annotations = "
            f'["{cri_annotations.CDI_PATTERN}"]), then restart containerd',
        )
    return passed(
        NAME,
        f"{cri_annotations.CDI_PREFIX} annotations reach the containers of "
        f"{', '.join(sorted(n for _, n in handlers))}, never through pod_annotations",
    )
