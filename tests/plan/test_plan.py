"""Plans for simulated drivers of two versions (one with MIG), from their recorded inventories
(tests/inventories.py: no root needed); the inventory cache against a built driver (root)."""

from __future__ import annotations

import posixpath
from pathlib import Path

import pytest

from nvct.base.errors import RequestError, RequirementError
from nvct.config.container import Inject
from nvct.host.arch import host_arch
from nvct.plan.build import build_plan
from nvct.plan.model import RootfsLayout
from nvct.request.parse import parse_request
from tests.conftest import sim_config
from tests.nvidia_legacy import BINARIES, UTILITY_COMPUTE_LIBS

LEGACY_DEFAULT_LIBS = UTILITY_COMPUTE_LIBS
GRAPHICS_LIBS = {
    "libGLX_nvidia",
    "libEGL_nvidia",
    "libGLESv2_nvidia",
    "libGLESv1_CM_nvidia",
    "libnvidia-glcore",
    "libnvidia-eglcore",
    "libnvidia-tls",
    "libnvidia-glsi",
}


def plan_for(sim, tmp: Path, env: dict[str, str], **config: object):
    cfg = sim_config(sim, tmp, **config)
    return build_plan(
        parse_request(env, config=cfg), sim.inventory, cfg, host_arch(), RootfsLayout()
    )


def lib_stems(plan, kind: str = "lib") -> set[str]:
    return {posixpath.basename(m.source).split(".so.")[0] for m in plan.mounts if m.kind == kind}


@pytest.mark.parametrize("preset", ["h100x4", "a100mig"])
def test_default_capabilities_match_nvidia_legacy(preset, request, tmp_path) -> None:
    sim = request.getfixturevalue(f"recorded_{preset}")
    version = sim.spec.driver_version
    plan = plan_for(sim, tmp_path, {"NVIDIA_VISIBLE_DEVICES": "1"})
    libs = [m for m in plan.mounts if m.kind == "lib"]
    assert lib_stems(plan) == LEGACY_DEFAULT_LIBS
    assert all(m.source.endswith(f".so.{version}") for m in libs)  # never the stale 535 libcuda
    assert all(
        m.target == f"/usr/lib/x86_64-linux-gnu/{posixpath.basename(m.source)}" for m in libs
    )
    assert {posixpath.basename(m.target) for m in plan.mounts if m.kind == "bin"} == BINARIES
    assert {posixpath.basename(m.source) for m in plan.mounts if m.kind == "firmware"} == {
        "gsp_ga10x.bin",
        "gsp_tu10x.bin",
    }
    assert [d.node.path for d in plan.devices] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia1",
    ]
    assert not lib_stems(plan) & GRAPHICS_LIBS
    links = {s.path: s.target for s in plan.symlinks}
    assert links["/usr/lib/x86_64-linux-gnu/libcuda.so.1"] == f"libcuda.so.{version}"
    assert links["/usr/lib/x86_64-linux-gnu/libcuda.so"] == "libcuda.so.1"
    assert plan.ldconfig_dirs == ("/usr/lib/x86_64-linux-gnu",)
    ipc = {m.target: m.options for m in plan.mounts if m.kind == "ipc"}
    assert set(ipc) == {
        "/var/run/nvidia-persistenced/socket",
        "/var/run/nvidia-fabricmanager/socket",
        "/tmp/nvidia-mps",
    }
    assert all("noexec" in o and "rw" in o for o in ipc.values())
    assert all({"ro", "nosuid", "nodev"} <= set(m.options) for m in plan.mounts if m.kind != "ipc")


def test_graphics_display_adds_gl_and_modeset(recorded_h100x4, tmp_path) -> None:
    plan = plan_for(
        recorded_h100x4,
        tmp_path,
        {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "graphics,display"},
    )
    assert lib_stems(plan) >= GRAPHICS_LIBS
    assert "libcuda" not in lib_stems(plan)
    assert "/dev/nvidia-modeset" in [d.node.path for d in plan.devices]
    configs = {m.target for m in plan.mounts if m.kind == "config"}
    assert "/usr/share/glvnd/egl_vendor.d/10_nvidia.json" in configs
    assert "/etc/vulkan/icd.d/nvidia_icd.json" in configs


def test_video_brings_vdpau_and_compute(recorded_h100x4, tmp_path) -> None:
    plan = plan_for(
        recorded_h100x4,
        tmp_path,
        {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "video"},
    )
    targets = {m.target for m in plan.mounts}
    assert "/usr/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.550.54.15" in targets
    assert {"libnvcuvid", "libnvidia-encode", "libcuda"} <= lib_stems(plan)


def test_compat32_adds_32bit_libraries(recorded_h100x4, tmp_path) -> None:
    if recorded_h100x4.lib32_dir is None:
        pytest.skip("no 32-bit toolchain here (gcc-multilib), so no 32-bit simulated libraries")
    plan = plan_for(
        recorded_h100x4,
        tmp_path,
        {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "compute,compat32"},
    )
    targets = {m.target for m in plan.mounts if m.kind == "lib32"}
    assert "/usr/lib/i386-linux-gnu/libcuda.so.550.54.15" in targets
    assert "/usr/lib/i386-linux-gnu" in plan.ldconfig_dirs


def test_rpm_layout_uses_lib64(recorded_h100x4, tmp_path) -> None:
    cfg = sim_config(recorded_h100x4, tmp_path)
    plan = build_plan(
        parse_request({"NVIDIA_VISIBLE_DEVICES": "0"}, config=cfg),
        recorded_h100x4.inventory,
        cfg,
        host_arch(),
        RootfsLayout(debian=False),
    )
    assert {posixpath.dirname(m.target) for m in plan.mounts if m.kind == "lib"} == {"/usr/lib64"}


@pytest.mark.parametrize(
    ("token", "minor"),
    [("2", 2), ("GPU-{uuid2}", 2), ("00000000:86:00.0", 2), ("0000:86:00.0", 2), ("86:00.0", 2)],
)
def test_device_tokens(recorded_h100x4, tmp_path, token: str, minor: int) -> None:
    token = token.format(uuid2=recorded_h100x4.spec.gpus[2].uuid.lower().removeprefix("gpu-"))
    plan = plan_for(recorded_h100x4, tmp_path, {"NVIDIA_VISIBLE_DEVICES": token})
    assert [d.node.minor for d in plan.devices if d.node.major == 195 and d.node.minor < 255] == [
        minor
    ]


def test_none_injects_driver_without_gpus(recorded_h100x4, tmp_path) -> None:
    plan = plan_for(recorded_h100x4, tmp_path, {"NVIDIA_VISIBLE_DEVICES": "none"})
    assert [d.node.path for d in plan.devices] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    assert lib_stems(plan) == LEGACY_DEFAULT_LIBS


def test_all_selects_every_gpu(recorded_h100x4, tmp_path) -> None:
    plan = plan_for(recorded_h100x4, tmp_path, {"NVIDIA_VISIBLE_DEVICES": "all"})
    assert [s.gpu.index for s in plan.selected] == [0, 1, 2, 3]


def test_unknown_device_lists_the_devices(recorded_h100x4, tmp_path) -> None:
    with pytest.raises(RequestError) as err:
        plan_for(recorded_h100x4, tmp_path, {"NVIDIA_VISIBLE_DEVICES": "7"})
    text = err.value.one_line()
    assert "'7'" in text and all(g.uuid in text for g in recorded_h100x4.spec.gpus)


def test_mig_device_brings_parent_and_caps(recorded_a100mig, tmp_path) -> None:
    mig = recorded_a100mig.spec.gpus[0].migs[1]
    for token in ("0:1", mig.uuid):
        plan = plan_for(recorded_a100mig, tmp_path, {"NVIDIA_VISIBLE_DEVICES": token})
        paths = [d.node.path for d in plan.devices]
        assert "/dev/nvidia0" in paths
        assert f"/dev/nvidia-caps/nvidia-cap{mig.gi_cap_minor}" in paths
        assert f"/dev/nvidia-caps/nvidia-cap{mig.ci_cap_minor}" in paths
        assert [s.mig.uuid for s in plan.selected if s.mig] == [mig.uuid]


def test_all_on_mig_host_selects_mig_devices_and_whole_gpus(recorded_a100mig, tmp_path) -> None:
    plan = plan_for(recorded_a100mig, tmp_path, {"NVIDIA_VISIBLE_DEVICES": "all"})
    migs = sum(len(g.migs) for g in recorded_a100mig.spec.gpus)
    whole = sum(1 for g in recorded_a100mig.spec.gpus if not g.migs)
    assert len(plan.selected) == migs + whole


def test_requirements_checked_per_gpu(recorded_h100x4, tmp_path) -> None:
    with pytest.raises(RequirementError, match=r"cuda>=12\.5.*12\.4"):
        plan_for(
            recorded_h100x4,
            tmp_path,
            {"NVIDIA_VISIBLE_DEVICES": "1", "NVIDIA_REQUIRE_CUDA": "cuda>=12.5"},
        )
    plan = plan_for(
        recorded_h100x4,
        tmp_path,
        {"NVIDIA_VISIBLE_DEVICES": "1", "NVIDIA_REQUIRE_CUDA": "cuda>=12.0 brand=tesla"},
    )
    assert [r.where for r in plan.requirements] == ["GPU 1"]


def test_config_toggles(recorded_h100x4, tmp_path) -> None:
    plan = plan_for(
        recorded_h100x4,
        tmp_path,
        {"NVIDIA_VISIBLE_DEVICES": "0"},
        inject=Inject(mps=False, gsp_firmware=False, persistenced=False),
    )
    kinds = {(m.kind, posixpath.basename(m.target)) for m in plan.mounts}
    assert ("bin", "nvidia-cuda-mps-server") not in kinds
    assert not any(k == "firmware" for k, _ in kinds)
    assert ("ipc", "nvidia-mps") not in kinds and ("ipc", "socket") in kinds  # fabricmanager left


@pytest.mark.root
def test_inventory_cache_round_trip_and_invalidation(h100x4, tmp_path) -> None:
    from nvct.host.load import load_inventory

    cfg = sim_config(h100x4, tmp_path)
    fresh = load_inventory(cfg)
    assert list((tmp_path / "cache").glob("inventory-*.json"))
    assert load_inventory(cfg) == fresh
    # A different dev root (GPU 3 gone) is a different fingerprint: rediscovered, not stale.
    from integration.simdriver import make_dev_nodes

    dev = tmp_path / "dev-root"
    make_dev_nodes(h100x4.spec, dev, minors=[0, 1, 2])
    fewer = load_inventory(sim_config(h100x4, tmp_path, dev_root=dev))
    assert [g.node is not None for g in fewer.gpus].count(True) == 3
