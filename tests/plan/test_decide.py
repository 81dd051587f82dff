"""The one decision of the shim, the hook and explain: no GPU, a CDI order, a planned order or
refused; on the recorded h100x4 inventory and CDI specs in a private directory (unprivileged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvct.base.errors import RequestError
from nvct.config.container import Cdi, RequestRules
from nvct.host.arch import host_arch
from nvct.host.fingerprint import cdi_specs_stamp
from nvct.plan.decide import CdiOrdered, NoGpu, PlannedOrder, Refused, decide
from nvct.plan.model import RootfsLayout
from nvct.request.parse import parse_request
from tests.conftest import sim_config

PRIVILEGED = True


def _request(env: dict[str, str], config):
    return parse_request(env, mounts=(), privileged=PRIVILEGED, config=config)


def _no_layout() -> RootfsLayout:
    raise AssertionError("the rootfs layout is read only when a plan is made")


def _cdi_spec(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"env": ["FROM_CDI=1"]}}],
    }
    (directory / "nvidia.json").write_text(json.dumps(spec))
    (directory / "broken.json").write_text("{")


def test_no_gpu_keeps_its_decisions_and_reads_no_rootfs(recorded_h100x4, tmp_path) -> None:
    config = sim_config(recorded_h100x4, tmp_path, request=RequestRules(only_allocated_gpus=True))
    request = _request({"NVIDIA_VISIBLE_DEVICES": "all"}, config)
    decision = decide(request, config, _no_layout, library_dirs="show")
    assert isinstance(decision, NoGpu)
    assert "ignored: request.only-allocated-gpus is on" in decision.request.decisions[0]
    assert decision.ignored == list(decision.request.ignored)


def test_cdi_names_give_the_specs_order_with_its_stamp_and_problems(
    recorded_h100x4, tmp_path
) -> None:
    dirs = [str(tmp_path / "cdi")]
    _cdi_spec(tmp_path / "cdi")
    config = sim_config(recorded_h100x4, tmp_path, cdi=Cdi(spec_dirs=tuple(dirs)))
    request = _request({"NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=0"}, config)
    decision = decide(request, config, _no_layout, library_dirs="create")
    assert isinstance(decision, CdiOrdered)
    assert decision.order["env"] == ["FROM_CDI=1"]
    assert decision.order["cdi"] == [("nvidia.com/gpu=0", str(tmp_path / "cdi/nvidia.json"))]
    assert (decision.dirs, decision.stamp) == (dirs, cdi_specs_stamp(dirs))
    assert [p.split(" ")[0] for p in decision.problems] == [str(tmp_path / "cdi/broken.json")]


def test_an_unknown_cdi_name_is_refused_with_the_specs_problems(recorded_h100x4, tmp_path) -> None:
    _cdi_spec(tmp_path / "cdi")
    config = sim_config(recorded_h100x4, tmp_path, cdi=Cdi(spec_dirs=(str(tmp_path / "cdi"),)))
    request = _request({"NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=7"}, config)
    decision = decide(request, config, _no_layout, library_dirs="show")
    assert isinstance(decision, Refused)
    assert isinstance(decision.error, RequestError)
    assert "nvidia.com/gpu=7" in decision.error.one_line()
    assert len(decision.problems) == 1


def test_a_frontend_without_cdi_refuses_cdi_names(recorded_h100x4, tmp_path) -> None:
    config = sim_config(recorded_h100x4, tmp_path, cdi=Cdi(spec_dirs=(str(tmp_path / "none"),)))
    request = _request({"NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=0"}, config)
    decision = decide(request, config, _no_layout, library_dirs="create", cdi=False)
    assert isinstance(decision, Refused)
    assert "come from CDI specs, not nvct's plan" in decision.error.one_line()


def test_a_gpu_request_is_planned_in_the_layout_given(recorded_h100x4, tmp_path) -> None:
    config = sim_config(recorded_h100x4, tmp_path)
    asked: list[bool] = []

    def lib64() -> RootfsLayout:
        asked.append(True)
        return RootfsLayout(debian=False)

    request = _request({"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_REQUIRE_CUDA": ""}, config)
    decision = decide(
        request,
        config,
        lib64,
        library_dirs="none",
        inventory=lambda: recorded_h100x4.inventory,
        arch=host_arch(),
    )
    assert isinstance(decision, PlannedOrder)
    assert asked == [True]
    assert "/dev/nvidia0" in [d[0] for d in decision.planned.order["devices"]]
    assert not any("x86_64-linux-gnu" in m[1] for m in decision.planned.order["mounts"])
    assert decision.ignored == [*request.ignored, *decision.planned.plan.notes]


@pytest.mark.parametrize("enforce", [True, False])
def test_an_unknown_device_is_refused_not_raised(recorded_h100x4, tmp_path, enforce) -> None:
    config = sim_config(recorded_h100x4, tmp_path)
    decision = decide(
        _request({"NVIDIA_VISIBLE_DEVICES": "9"}, config),
        config,
        RootfsLayout,
        library_dirs="none",
        inventory=lambda: recorded_h100x4.inventory,
        enforce_requirements=enforce,
    )
    assert isinstance(decision, Refused)
    assert "unknown device '9' in NVIDIA_VISIBLE_DEVICES" in decision.error.one_line()
