"""Plans and inventories as JSON-ready dicts and as text, for the CLI."""

from __future__ import annotations

import posixpath
from dataclasses import asdict
from typing import Any

from nvct.host.inventory import Inventory
from nvct.plan.model import Plan


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """A JSON-ready view of a plan, grouped the way ``nvct-cli list`` prints it."""
    req = plan.request
    mounts: dict[str, list[dict[str, Any]]] = {
        "libraries": [],
        "libraries32": [],
        "binaries": [],
        "ipc": [],
        "firmware": [],
        "configs": [],
    }
    group = {
        "lib": "libraries",
        "lib32": "libraries32",
        "bin": "binaries",
        "ipc": "ipc",
        "firmware": "firmware",
        "config": "configs",
    }
    libdirs = {d.target: d for d in plan.library_dirs}
    linked = {(b.source, posixpath.basename(b.path)) for b in plan.binary_links}
    for m in plan.mounts:
        libdir = libdirs.get(m.target) if m.kind == "libdir" else None
        if libdir is None:
            mounts[group[m.kind]].append(
                {
                    "host_path": m.source,
                    "container_path": m.target,
                    "options": list(m.options),
                    "reason": m.reason,
                }
            )
            continue
        # A library bound with its directory: listed as the file it is, seen in that directory.
        mounts[group[libdir.kind]].extend(
            {
                "host_path": source,
                "container_path": f"{libdir.target}/{name}",
                "options": list(m.options),
                "reason": f"{'copied into' if libdir.copies else 'in'} {libdir.host_dir}, "
                f"bound at {libdir.target}",
            }
            for source, name in libdir.files
            if (source, name) not in linked
        )
    # A binary made a link into its library directory: listed where the container runs it.
    mounts["binaries"].extend(
        {
            "host_path": b.source,
            "container_path": b.path,
            "options": list(b.options),
            "reason": b.reason,
            "link": b.target,
        }
        for b in plan.binary_links
    )
    return {
        "driver_version": plan.driver_version,
        "request": {
            "visible": req.visible,
            "devices": list(req.devices),
            "capabilities": sorted(req.capabilities),
            "source": req.source,
            "decisions": list(req.decisions),
            "ignored": list(req.ignored),
        },
        "left_out": list(plan.notes),
        "selected": [
            {
                "label": s.label,
                "token": s.token,
                "uuid": (s.mig or s.gpu).uuid,
                "gpu_index": s.gpu.index,
            }
            for s in plan.selected
        ],
        "devices": [
            {
                "path": d.node.path,
                "host_path": d.node.host_path,
                "type": "c",
                "major": d.node.major,
                "minor": d.node.minor,
                "mode": f"{d.node.mode:04o}",
                "reason": d.reason,
            }
            for d in plan.devices
        ],
        **mounts,
        "symlinks": [asdict(s) for s in plan.symlinks],
        "library_dirs": [
            {
                "host_dir": d.host_dir,
                "container_path": d.target,
                "files": [name for _, name in d.files],
                "copies": d.copies,
                "links": [{"path": f"{d.target}/{n}", "target": t} for n, t in d.links],
            }
            for d in plan.library_dirs
        ],
        "ldconfig_dirs": list(plan.ldconfig_dirs),
        "requirements": [asdict(r) for r in plan.requirements],
    }


def plan_to_text(plan: Plan) -> list[str]:
    """Host paths per section, one per line, as NVIDIA's ``nvidia-container-cli list``."""
    data = plan_to_dict(plan)
    lines: list[str] = []
    sections = [
        ("devices", [d["host_path"] for d in data["devices"]]),
        ("libraries", [m["host_path"] for m in data["libraries"]]),
        ("libraries32", [m["host_path"] for m in data["libraries32"]]),
        ("binaries", [m["host_path"] for m in data["binaries"]]),
        ("ipc", [m["host_path"] for m in data["ipc"]]),
        ("firmware", [m["host_path"] for m in data["firmware"]]),
        ("configs", [m["host_path"] for m in data["configs"]]),
    ]
    for title, items in sections:
        if items:
            lines.append(f"# {title}")
            lines.extend(items)
    return lines


def inventory_to_dict(inventory: Inventory) -> dict[str, Any]:
    """The ``nvct-cli info --json`` document."""
    return {
        "driver_version": inventory.driver_version,
        "cuda_version": inventory.cuda_version,
        "driver_root": inventory.driver_root,
        "gpus": [
            {
                "index": g.index,
                "minor": g.minor,
                "uuid": g.uuid,
                "pci_bus_id": g.pci_bus_id,
                "name": g.name,
                "brand": g.brand,
                "architecture": g.architecture,
                "compute_capability": g.compute_capability,
                "memory_mib": g.memory_mib,
                "persistence_mode": g.persistence_mode,
                "mig_enabled": g.mig_enabled,
                "migs": [
                    {
                        "index": m.index,
                        "id": f"{g.index}:{m.index}",
                        "uuid": m.uuid,
                        "profile": m.profile,
                        "gpu_instance": m.gpu_instance,
                        "compute_instance": m.compute_instance,
                        "memory_mib": m.memory_mib,
                    }
                    for m in g.migs
                ],
            }
            for g in inventory.gpus
        ],
        "warnings": list(inventory.warnings),
    }


def inventory_to_text(inventory: Inventory) -> list[str]:
    """Human-readable ``nvct-cli info``."""
    lines = [
        f"Driver version:      {inventory.driver_version}",
        f"CUDA driver version: {inventory.cuda_version}",
        f"Driver root:         {inventory.driver_root}",
        f"GPUs:                {len(inventory.gpus)}",
    ]
    for g in inventory.gpus:
        lines += [
            "",
            f"GPU {g.index}: {g.name}",
            f"  UUID:               {g.uuid}",
            f"  Minor:              {g.minor}",
            f"  PCI bus id:         {g.pci_bus_id}",
            f"  Brand:              {g.brand}",
            f"  Architecture:       {g.architecture} ({g.compute_capability})",
            f"  Memory:             {g.memory_mib} MiB",
            f"  MIG mode:           {'enabled' if g.mig_enabled else 'disabled'}",
        ]
        for m in g.migs:
            lines.append(f"  MIG {g.index}:{m.index}  {m.profile:<10} {m.uuid}")
    lines += [f"warning: {w}" for w in inventory.warnings]
    return lines
