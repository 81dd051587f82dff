"""NVIDIA device nodes under the dev root: present, right major/minor, ``/dev/char`` links.

Majors: nvidiactl and the GPUs are 195 (nvidiactl 195:255, GPU n 195:n); nvidia-uvm and
nvidia-caps get dynamic majors, read from ``<proc-root>/devices``.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from nvct.doctor.context import DoctorContext
from nvct.doctor.driver import DriverFacts
from nvct.doctor.result import CheckResult, failed, passed, warned

NODES = "device-nodes"
DEV_CHAR = "dev-char-links"
NVIDIA_MAJOR = 195
_GPU_RE = re.compile(r"^nvidia([0-9]+)$")


@dataclass(frozen=True, slots=True)
class ExpectedNode:
    """A node that should exist: ``/dev/<name>`` as ``c major:minor``."""

    name: str
    major: int | None  # None: the major is unknown (not in /proc/devices)
    minor: int
    required: bool
    fix: str


@dataclass(frozen=True, slots=True)
class FoundNode:
    """An NVIDIA character device that exists under the dev root."""

    name: str  # relative to <dev-root>/dev, e.g. nvidia0, nvidia-caps/nvidia-cap3
    host_path: Path
    major: int
    minor: int


def proc_majors(proc_root: Path) -> dict[str, int]:
    """Character-device majors by driver name, from ``<proc-root>/devices``."""
    out: dict[str, int] = {}
    try:
        text = (proc_root / "devices").read_text()
    except OSError:
        return out
    for line in text.partition("Block devices:")[0].splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            out.setdefault(parts[1], int(parts[0]))
    return out


def expected_nodes(ctx: DoctorContext, facts: DriverFacts) -> list[ExpectedNode]:
    """The nodes this host should have, from NVML's GPU minors (else what /dev shows)."""
    majors = proc_majors(ctx.config.proc_root)
    uvm = majors.get("nvidia-uvm")
    load = "load the driver and create its nodes: nvidia-modprobe -c 0 (or modprobe nvidia)"
    uvm_fix = "load nvidia-uvm and create its nodes: nvidia-modprobe -u -c 0"
    nodes = [
        ExpectedNode("nvidiactl", NVIDIA_MAJOR, 255, True, load),
        ExpectedNode("nvidia-uvm", uvm, 0, True, uvm_fix),
        ExpectedNode("nvidia-uvm-tools", uvm, 1, False, uvm_fix),
    ]
    minors = [g.minor for g in facts.gpus]
    if not facts.gpus:
        minors = sorted(
            int(m.group(1))
            for m in (_GPU_RE.match(p.name) for p in _listdir(ctx.config.dev_root / "dev"))
            if m
        )
    nodes += [
        ExpectedNode(f"nvidia{m}", NVIDIA_MAJOR, m, True, f"nvidia-modprobe -c {m}") for m in minors
    ]
    return nodes


def _listdir(path: Path) -> list[Path]:
    try:
        return sorted(path.iterdir())
    except OSError:
        return []


def _shown(ctx: DoctorContext, name: str) -> str:
    root = ctx.config.dev_root
    return f"/dev/{name}" if str(root) == "/" else str(root / "dev" / name)


def check_device_nodes(ctx: DoctorContext, facts: DriverFacts) -> CheckResult:
    """Every expected node exists as a character device with the right major and minor."""
    dev = ctx.config.dev_root / "dev"
    problems: list[str] = []
    fixes: list[str] = []
    warnings: list[str] = []
    ok = 0
    for node in expected_nodes(ctx, facts):
        path = dev / node.name
        shown = _shown(ctx, node.name)
        try:
            st = os.stat(path)
        except OSError:
            (problems if node.required else warnings).append(f"{shown} is missing")
            if node.required:
                fixes.append(node.fix)
            continue
        if not stat.S_ISCHR(st.st_mode):
            problems.append(f"{shown} is not a character device")
            fixes.append(f"rm {shown}; {node.fix}")
            continue
        have = (os.major(st.st_rdev), os.minor(st.st_rdev))
        if node.major is None:
            warnings.append(f"{shown}: no {node.name.split('-tools')[0]} major in /proc/devices")
            continue
        if have != (node.major, node.minor):
            problems.append(
                f"{shown} is c {have[0]}:{have[1]}, expected c {node.major}:{node.minor}"
            )
            fixes.append(f"rm {shown} && mknod -m 666 {shown} c {node.major} {node.minor}")
            continue
        ok += 1
    caps_major = proc_majors(ctx.config.proc_root).get("nvidia-caps")
    for found in _caps_nodes(dev):
        if caps_major is not None and found.major != caps_major:
            shown = _shown(ctx, found.name)
            problems.append(
                f"{shown} has major {found.major}, /proc/devices says nvidia-caps is {caps_major}"
            )
            fixes.append(f"recreate the MIG capability nodes: nvidia-modprobe -f {shown}")
    if problems:
        return failed(NODES, "; ".join(problems + warnings), "; ".join(dict.fromkeys(fixes)))
    if warnings:
        return warned(NODES, "; ".join(warnings), "nvidia-modprobe -u -c 0")
    return passed(NODES, f"{ok} NVIDIA device nodes present with the right major:minor")


def _caps_nodes(dev: Path) -> list[FoundNode]:
    out = []
    for path in _listdir(dev / "nvidia-caps"):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            out.append(
                FoundNode(
                    f"nvidia-caps/{path.name}", path, os.major(st.st_rdev), os.minor(st.st_rdev)
                )
            )
    return out


def nvidia_nodes(dev_root: Path) -> list[FoundNode]:
    """Every NVIDIA character device under ``<dev-root>/dev`` (and its nvidia-caps/)."""
    dev = dev_root / "dev"
    out = []
    for path in _listdir(dev):
        if not path.name.startswith("nvidia"):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            out.append(FoundNode(path.name, path, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return out + _caps_nodes(dev)


def _link_ok(link: Path, node: FoundNode) -> bool:
    try:
        st = os.stat(link)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (
        node.major,
        node.minor,
    )


def missing_dev_char_links(dev_root: Path) -> list[tuple[FoundNode, Path]]:
    """NVIDIA nodes without a ``/dev/char/<major>:<minor>`` link to them."""
    char = dev_root / "dev/char"
    return [
        (node, char / f"{node.major}:{node.minor}")
        for node in nvidia_nodes(dev_root)
        if not _link_ok(char / f"{node.major}:{node.minor}", node)
    ]


def check_dev_char_links(ctx: DoctorContext) -> CheckResult:
    """``/dev/char/M:m`` links exist for the NVIDIA nodes (the daemon-reload problem)."""
    missing = missing_dev_char_links(ctx.config.dev_root)
    if not nvidia_nodes(ctx.config.dev_root):
        return warned(DEV_CHAR, "no NVIDIA device nodes to check /dev/char links for")
    if not missing:
        return passed(DEV_CHAR, "/dev/char links exist for every NVIDIA device node")
    names = ", ".join(_shown(ctx, f"char/{link.name}") for _node, link in missing[:6])
    more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
    commands = "; ".join(
        f"ln -sfn {_relative_target(node)} {_shown(ctx, f'char/{link.name}')}"
        for node, link in missing[:3]
    )
    more_commands = " ..." if len(missing) > 3 else ""
    return failed(
        DEV_CHAR,
        f"{len(missing)} NVIDIA device node(s) have no /dev/char link ({names}{more}): with "
        "the systemd cgroup driver, a systemctl daemon-reload then revokes their access in "
        "running containers ('Failed to initialize NVML: Unknown Error')",
        f"nvct-cli doctor --fix-dev-char (or by hand: {commands}{more_commands}); redo it "
        "after each driver load, e.g. from a udev rule",
    )


def _relative_target(node: FoundNode) -> str:
    return f"../{node.name}"


def fix_dev_char_links(dev_root: Path) -> list[str]:
    """Create the missing ``/dev/char`` links (relative, as udev does); return what was made."""
    made = []
    for node, link in missing_dev_char_links(dev_root):
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(_relative_target(node))
        made.append(f"{link} -> {_relative_target(node)}")
    return made
