"""doctor's sharing check: the device plugin's sharing rules against the GPUs NVML reports
(recorded inventories: unprivileged)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from nvct.config import Config, parse_config
from nvct.doctor import FAIL, PASS, SKIP, WARN
from nvct.doctor.driver import DriverFacts
from nvct.doctor.sharing import check_sharing
from nvct.host.discover.nvml import NvmlGpu, NvmlMig
from nvct.host.inventory import Inventory
from tests.doctor.conftest import context, executable

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def facts(preset: str) -> DriverFacts:
    inv = Inventory.from_dict(json.loads((FIXTURES / f"{preset}.json").read_text()))
    names = [f.name for f in dataclasses.fields(NvmlGpu) if f.name != "migs"]
    mig_names = [f.name for f in dataclasses.fields(NvmlMig)]
    gpus = tuple(
        NvmlGpu(
            **{n: getattr(g, n) for n in names},
            migs=tuple(NvmlMig(**{n: getattr(m, n) for n in mig_names}) for m in g.migs),
        )
        for g in inv.gpus
    )
    return DriverFacts(inv.driver_version, inv.cuda_version, gpus)


def config(tmp: Path, toml: str, mig: str = "none") -> Config:
    text = f'[device-plugin]\nmig-strategy = "{mig}"\n{toml}'
    parsed = parse_config(text.encode(), source=str(tmp / "config.toml"))
    return dataclasses.replace(parsed, driver_root=tmp / "driver")


def rule(devices: str, replicas: int, extra: str = "") -> str:
    return f"[[device-plugin.sharing.gpus]]\ndevices = {devices}\nreplicas = {replicas}\n{extra}\n"


def test_no_rules_pass_and_no_nvml_skips(tmp_path) -> None:
    assert check_sharing(context(tmp_path), facts("h100x4-550")).status == PASS
    ctx = context(tmp_path, config(tmp_path, rule('["0"]', 2)))
    assert check_sharing(ctx, DriverFacts()).status == SKIP


def test_valid_rules_pass_with_what_is_shared(tmp_path) -> None:
    executable(tmp_path / "driver/usr/bin/nvidia-cuda-mps-control")
    mps = 'strategy = "mps"\nresource = "nvidia.com/gpu.mps"'
    toml = rule('["0"]', 4, "rename = true") + rule('["1"]', 2, mps)
    ctx = context(tmp_path, config(tmp_path, toml), which=lambda name: f"/usr/bin/{name}")
    result = check_sharing(ctx, facts("h100x4-550"))
    assert result.status == PASS, result
    assert result.message == (
        "shared: 0 time-slicing x4 as nvidia.com/gpu.shared; 1 mps x2 (40779 MiB pinned, 50% "
        "threads per client) as nvidia.com/gpu.mps; 2 GPU(s) whole"
    )


def test_a_gpu_in_two_rules_fails_with_the_fix(tmp_path) -> None:
    ctx = context(tmp_path, config(tmp_path, rule('["all"]', 2) + rule('["3"]', 4)))
    result = check_sharing(ctx, facts("h100x4-550"))
    assert result.status == FAIL
    assert "rule 2 (devices ['3'])" in result.message and "matched by rule 1" in result.message
    assert "disjoint" in result.fix and str(tmp_path / "config.toml") in result.fix


def test_mps_on_mig_and_a_missing_control_program_fail(tmp_path) -> None:
    mig = config(tmp_path, rule('["2"]', 2, 'strategy = "mps"'), "mixed")
    result = check_sharing(context(tmp_path, mig), facts("a100x8-570-mig"))
    assert result.status == FAIL and "mig-strategy mixed" in result.message
    plain = config(tmp_path, rule('["2"]', 2, 'strategy = "mps"'))
    result = check_sharing(context(tmp_path, plain), facts("a100x8-570-mig"))
    assert result.status == FAIL and "no nvidia-cuda-mps-control" in result.message
    assert result.fix


def test_a_selector_matching_no_gpu_warns(tmp_path) -> None:
    ctx = context(tmp_path, config(tmp_path, rule('["Tesla T4", "9"]', 2)))
    result = check_sharing(ctx, facts("h100x4-550"))
    assert result.status == WARN
    assert "'Tesla T4' matches no GPU on this node" in result.message
    assert result.message.endswith("(and 1 more)") and "nvidia-smi -L" in result.fix


def test_shared_gpus_beside_whole_ones_warn_with_the_way_out(tmp_path) -> None:
    result = check_sharing(
        context(tmp_path, config(tmp_path, rule('["0"]', 2))), facts("h100x4-550")
    )
    assert result.status == WARN and "beside whole GPUs" in result.message
    assert "rename-by-default = true" in result.message and "as the message says" in result.fix
