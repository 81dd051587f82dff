"""The device plugin's GPU sharing rules against this host's GPUs: what nvct-device-plugin would
refuse to start with (FAIL), what it would only warn about (WARN), and what MPS needs on the
node (the driver's control program, ``unshare`` for the daemons' /dev/shm)."""

from __future__ import annotations

from dataclasses import asdict

from nvct.doctor.context import DoctorContext
from nvct.doctor.driver import DriverFacts
from nvct.doctor.result import CheckResult, failed, passed, skipped, warned
from nvct.host.discover.nvml import NvmlGpu
from nvct.host.inventory import Gpu, Inventory, MigDevice
from nvct.node.sharing import MPS, SharingConfigError, SharingPlan, mps_control_binary, plan_sharing

NAME = "sharing"


def check_sharing(ctx: DoctorContext, facts: DriverFacts) -> CheckResult:
    """``[device-plugin.sharing]`` is valid for the GPUs NVML reports here."""
    config = ctx.config
    if not config.device_plugin.sharing.gpus:
        return passed(NAME, "no [[device-plugin.sharing.gpus]] rule: every GPU is advertised whole")
    if facts.driver_version is None:
        return skipped(NAME, "NVML did not answer: the sharing rules cannot be checked")
    try:
        plan = plan_sharing(config, _inventory(facts))
    except SharingConfigError as err:
        return failed(NAME, err.message, f"{err.hint or 'fix the rule'} in {config.source}")
    if any(s.strategy == MPS for s in plan.shares.values()):
        if mps_control_binary(config.driver_root) is None:
            return failed(
                NAME,
                f"MPS is configured but driver root {config.driver_root} has no "
                "nvidia-cuda-mps-control",
                "install the driver's MPS control program, or share those GPUs by time-slicing",
            )
        if ctx.which("unshare") is None:
            return failed(
                NAME,
                "MPS is configured but unshare is missing (it gives each MPS daemon its /dev/shm)",
                "apt-get install util-linux",
            )
    if plan.warnings:
        more = f" (and {len(plan.warnings) - 1} more)" if len(plan.warnings) > 1 else ""
        first = plan.warnings[0]
        fix = (
            "make the rules match this node's GPUs (nvidia-smi -L)"
            if "matches no GPU" in first
            else "change the rules as the message says"
        )
        return warned(NAME, first + more, f"{fix}, in {config.source}")
    return passed(NAME, _summary(plan, len(facts.gpus)))


def _inventory(facts: DriverFacts) -> Inventory:
    return Inventory(
        driver_version=facts.driver_version or "",
        cuda_version=facts.cuda_version or "",
        driver_root="",
        gpus=tuple(_gpu(g) for g in facts.gpus),
        control_nodes=(),
        files=(),
    )


def _gpu(gpu: NvmlGpu) -> Gpu:
    fields = {k: v for k, v in asdict(gpu).items() if k != "migs"}
    return Gpu(**fields, migs=tuple(MigDevice(**asdict(m)) for m in gpu.migs))


def _summary(plan: SharingPlan, gpus: int) -> str:
    parts = []
    for share in sorted(plan.shares.values(), key=lambda s: s.device.index):
        part = f"{share.device.index} {share.strategy} x{share.replicas}"
        if share.strategy == MPS:
            part += (
                f" ({share.pinned_memory_mib} MiB pinned, "
                f"{share.active_thread_percentage}% threads per client)"
            )
        parts.append(part + (f" as nvidia.com/{share.resource}" if share.renamed else ""))
    whole = gpus - len({s.device.gpu for s in plan.shares.values()})
    return f"shared: {'; '.join(parts)}; {whole} GPU(s) whole"
