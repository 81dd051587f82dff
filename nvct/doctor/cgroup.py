"""cgroup version of the host (``<sysfs>/fs/cgroup``) and the cgroup driver docker uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvct.doctor.context import DoctorContext
from nvct.doctor.result import CheckResult, passed, warned

NAME = "cgroup"


def cgroup_version(sysfs_root: Path) -> str:
    """``2`` (unified), ``1 (hybrid)``, ``1`` or ``unknown``."""
    base = sysfs_root / "fs/cgroup"
    if (base / "cgroup.controllers").exists():
        return "2"
    if (base / "unified").is_dir():
        return "1 (hybrid)"
    if (base / "devices").is_dir():
        return "1"
    return "unknown"


def check_cgroup(ctx: DoctorContext, docker_info: dict[str, Any] | None) -> CheckResult:
    """Report the cgroup setup; warn when it cannot be told or docker sees another version."""
    version = cgroup_version(ctx.sysfs_root)
    parts = [f"cgroup v{version}" if version != "unknown" else "cgroup version unknown"]
    docker_version = ""
    if docker_info is not None:
        driver = docker_info.get("CgroupDriver") or "?"
        docker_version = str(docker_info.get("CgroupVersion") or "")
        parts.append(f"docker: cgroup driver {driver}, cgroup v{docker_version or '?'}")
        if driver == "systemd":
            parts.append("device access survives daemon-reload only with /dev/char links")
    message = "; ".join(parts)
    if version == "unknown":
        return warned(
            NAME,
            f"{message}: no cgroup hierarchy under {ctx.sysfs_root}/fs/cgroup",
            "mount the cgroup filesystem (or pass --sysfs-root)",
        )
    if docker_version and docker_version != version.split()[0]:
        return warned(
            NAME,
            f"{message}: docker and {ctx.sysfs_root}/fs/cgroup disagree (a nested or "
            "containerized daemon?)",
            "check the cgroup namespace docker runs in",
        )
    return passed(NAME, message)
