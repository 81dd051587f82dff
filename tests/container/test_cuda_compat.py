"""CUDA forward compatibility: which libcuda a container loads first, and why."""

from __future__ import annotations

import dataclasses
import json

import pytest

from nvct.config import with_settings
from nvct.container.cuda_compat import choose_compat
from nvct.host.arch import host_arch
from nvct.plan.build import build_plan
from nvct.plan.workorder import from_plan
from nvct.request.parse import parse_request
from tests.cli.test_cli import cli, roots
from tests.conftest import sim_config, sim_inventory

LINK = "libcuda.so.1"


@pytest.mark.parametrize(
    ("names", "datacenter", "chosen", "why"),
    [
        ([], True, None, "no /usr/local/cuda/compat/libcuda.so.*"),
        ([LINK, "libcuda.so.550.54.15"], True, None, "is not newer"),
        ([LINK, "libcuda.so.535.104.05"], True, None, "is not newer"),
        ([LINK, "libcuda.so.560.35.03"], False, None, "needs data-center GPUs"),
        (
            [LINK, "libcuda.so.555.42.06", "libcuda.so.560.35.03", "libnvidia-ptxjitcompiler.so.1"],
            True,
            "libcuda.so.560.35.03",
            "newer than the host driver 550.54.15",
        ),
        # 550.100 is newer than 550.54.15: versions compare as numbers, not as text.
        (["libcuda.so.550.100.1"], True, "libcuda.so.550.100.1", "newer"),
    ],
)
def test_choose_compat(names: list[str], datacenter: bool, chosen: str | None, why: str) -> None:
    got, reason = choose_compat(names, "550.54.15", datacenter)
    assert got == chosen
    assert why in reason


@pytest.mark.root
def test_work_order_carries_the_driver_and_whether_gpus_are_data_center(h100x4, tmp_path) -> None:
    config = sim_config(h100x4, tmp_path)
    inventory = sim_inventory(h100x4, tmp_path)
    request = parse_request({"NVIDIA_VISIBLE_DEVICES": "0"}, config=config)
    plan = build_plan(request, inventory, config, host_arch())
    assert from_plan(plan, config)["cuda_compat"] == ("550.54.15", True)
    geforce = dataclasses.replace(
        inventory, gpus=tuple(dataclasses.replace(g, brand="GeForce") for g in inventory.gpus)
    )
    plan = build_plan(request, geforce, config, host_arch())
    assert from_plan(plan, config)["cuda_compat"] == ("550.54.15", False)
    utility = parse_request(
        {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "utility"}, config=config
    )
    assert (
        from_plan(build_plan(utility, inventory, config, host_arch()), config)["cuda_compat"]
        is None
    )
    off = with_settings(config, "inject", cuda_compat="off")
    assert from_plan(build_plan(request, inventory, off, host_arch()), off)["cuda_compat"] is None


@pytest.mark.root
def test_explain_says_which_libcuda_the_container_loads(h100x4, tmp_path) -> None:
    bundle = tmp_path / "bundle"
    compat = bundle / "rootfs/usr/local/cuda/compat"
    compat.mkdir(parents=True)
    (compat / "libcuda.so.560.35.03").write_bytes(b"")
    spec = {
        "root": {"path": "rootfs"},
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=1"], "capabilities": {"bounding": []}},
    }
    (bundle / "config.json").write_text(json.dumps(spec))
    out = cli(*roots(h100x4, tmp_path), "explain", "--bundle", str(bundle)).stdout
    assert (
        "libcuda: /usr/local/cuda/compat/libcuda.so.560.35.03: the image's forward-compatible "
        "libcuda, newer than the host driver 550.54.15" in out
    )
    (compat / "libcuda.so.560.35.03").rename(compat / "libcuda.so.545.23.08")
    out = cli(*roots(h100x4, tmp_path), "explain", "--bundle", str(bundle), "--json").stdout
    assert json.loads(out)["libcuda"] == (
        "the host driver's libcuda.so.550.54.15: "
        "the image's compat libcuda.so.545.23.08 is not newer"
    )
    out = cli(*roots(h100x4, tmp_path), "explain", "-e", "NVIDIA_VISIBLE_DEVICES=1").stdout
    assert "not checked: no image given" in out
