"""Run every check in order and render the results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nvct.doctor import (
    binaries,
    cdi,
    cdi_conflicts,
    cgroup,
    containerd,
    crio,
    devices,
    docker,
    driver,
    kubernetes,
    launch,
    libdir,
    native_path,
    sharing,
)
from nvct.doctor.context import DoctorContext
from nvct.doctor.result import FAIL, CheckResult, passed


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """All results, in the order they were checked."""

    results: tuple[CheckResult, ...]

    @property
    def failed(self) -> bool:
        """True when any check FAILed (doctor's exit status is then 1)."""
        return any(r.status == FAIL for r in self.results)

    def counts(self) -> dict[str, int]:
        """How many results per status."""
        out: dict[str, int] = {}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "ok": not self.failed,
            "counts": self.counts(),
            "checks": [r.to_dict() for r in self.results],
        }

    def to_text(self) -> list[str]:
        """``STATUS name: message`` lines, each FAIL/WARN followed by its fix."""
        lines = []
        for r in self.results:
            lines.append(f"{r.status} {r.name}: {r.message}")
            if r.fix and r.status != "PASS":
                lines.append(f"     fix: {r.fix}")
        summary = ", ".join(f"{n} {s}" for s, n in sorted(self.counts().items()))
        lines.append(f"{'FAILED' if self.failed else 'OK'}: {summary}")
        return lines


def run_doctor(
    ctx: DoctorContext,
    first: tuple[CheckResult, ...] = (),
    *,
    fix_dev_char: bool = False,
) -> DoctorReport:
    """Every check, after ``first`` (the config check, done while loading the config)."""
    results = list(first)
    facts, nvml = driver.probe_nvml(ctx)
    results += [
        nvml,
        driver.check_kernel_module(ctx, facts),
        driver.check_ldcache(ctx, facts),
        devices.check_device_nodes(ctx, facts),
    ]
    if fix_dev_char:
        made = devices.fix_dev_char_links(ctx.config.dev_root)
        if made:
            results.append(
                passed("dev-char-fix", f"created {len(made)} link(s): {', '.join(made)}")
            )
    results += [
        devices.check_dev_char_links(ctx),
        driver.check_persistence(ctx, facts),
        binaries.check_runtime(ctx),
        launch.check_launcher(ctx),
        launch.check_daemon(ctx),
        native_path.check_native_path(ctx),
        binaries.check_hook(ctx),
        binaries.check_low_level(ctx),
        binaries.check_ldconfig(ctx),
        libdir.check_library_dir(ctx),
    ]
    docker_state = docker.gather(ctx)
    results += docker.check_docker(ctx, docker_state)
    results += containerd.check_containerd(ctx)
    results += crio.check_crio(ctx)
    results.append(cgroup.check_cgroup(ctx, docker_state.info if docker_state else None))
    results += cdi.check_cdi(ctx, facts.version)
    results += cdi_conflicts.check_cdi_conflicts(ctx)
    results += kubernetes.check_kubernetes(ctx)
    results.append(sharing.check_sharing(ctx, facts))
    return DoctorReport(tuple(results))
