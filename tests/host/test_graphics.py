"""Graphics and display: the selected GPUs' DRM nodes and the Vulkan files under every name."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvct.host.arch import host_arch
from nvct.host.discover.files import discover_graphics_configs
from nvct.host.load import load_inventory
from nvct.plan.build import build_plan
from nvct.request.parse import parse_request
from tests.conftest import DRM_MAJOR, sim_config, with_feature_nodes

pytestmark = pytest.mark.root


@pytest.mark.parametrize(
    ("caps", "drm"),
    [("graphics", True), ("display", True), ("compute,utility", False)],
)
def test_graphics_brings_the_selected_gpus_drm_nodes(h100x4, tmp_path, caps, drm) -> None:
    dev_root, proc_root = with_feature_nodes(h100x4, tmp_path)
    config = sim_config(h100x4, tmp_path, dev_root=dev_root, proc_root=proc_root)
    inventory = load_inventory(config, use_cache=False)
    env = {"NVIDIA_VISIBLE_DEVICES": "0,1", "NVIDIA_DRIVER_CAPABILITIES": caps}
    plan = build_plan(parse_request(env, config=config), inventory, config, host_arch())
    got = {
        d.node.path: (d.node.major, d.node.minor) for d in plan.devices if "/dri/" in d.node.path
    }
    # GPU 0 has no DRM nodes on this host (no display engine): nothing is made up for it.
    expected = {"/dev/dri/card1": (DRM_MAJOR, 1), "/dev/dri/renderD129": (DRM_MAJOR, 129)}
    assert got == (expected if drm else {})
    only_gpu0 = build_plan(
        parse_request({**env, "NVIDIA_VISIBLE_DEVICES": "0"}, config=config),
        inventory,
        config,
        host_arch(),
    )
    assert not any("/dri/" in d.node.path for d in only_gpu0.devices)


def test_vulkan_files_found_under_every_name(tmp_path: Path) -> None:
    files = {
        "usr/share/vulkan/icd.d/nvidia_icd.json": "Debian/Ubuntu packages",
        "etc/vulkan/icd.d/nvidia_icd.x86_64.json": "RPM packages",
        "usr/share/vulkan/implicit_layer.d/nvidia_layers.json": "layers",
        "usr/share/vulkan/icd.d/other_icd.json": "another vendor's",
    }
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    found = {f.name for f in discover_graphics_configs(tmp_path)}
    assert found == set(files) - {"usr/share/vulkan/icd.d/other_icd.json"}


def test_egl_platform_libraries_the_json_files_name_come_with_them(h100x4, tmp_path) -> None:
    from tests.conftest import sim_inventory

    config = sim_config(h100x4, tmp_path)
    inventory = sim_inventory(h100x4, tmp_path)

    def plan_files(caps: str) -> set[str]:
        env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": caps}
        plan = build_plan(parse_request(env, config=config), inventory, config, host_arch())
        return {Path(m.source).name for m in plan.mounts} | {
            Path(s.path).name for s in plan.symlinks
        }

    graphics = plan_files("graphics")
    # The JSON files name libnvidia-egl-gbm.so.1 and libnvidia-egl-wayland.so.1; their files
    # carry their own versions (1.1.1, 1.1.13), not the driver's.
    assert {"15_nvidia_gbm.json", "10_nvidia_wayland.json"} <= graphics
    assert {
        "libnvidia-egl-gbm.so.1.1.1",
        "libnvidia-egl-gbm.so.1",
        "libnvidia-egl-wayland.so.1.1.13",
        "libnvidia-egl-wayland.so.1",
    } <= graphics
    assert not any("egl-gbm" in name for name in plan_files("compute,utility"))


def test_display_brings_the_xorg_modules(h100x4, tmp_path) -> None:
    import subprocess

    root = tmp_path / "driver"
    subprocess.run(["cp", "-a", str(h100x4.driver_root), str(root)], check=True)
    modules = root / "usr/lib/xorg/modules"
    (modules / "drivers").mkdir(parents=True)
    (modules / "extensions").mkdir()
    (modules / "drivers/nvidia_drv.so").write_bytes(b"\x7fELF")
    (modules / "extensions/libglxserver_nvidia.so.550.54.15").write_bytes(b"\x7fELF")
    config = sim_config(h100x4, tmp_path, driver_root=root)
    inventory = load_inventory(config, use_cache=False)

    def planned(caps: str) -> tuple[set[str], set[tuple[str, str]]]:
        env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": caps}
        plan = build_plan(parse_request(env, config=config), inventory, config, host_arch())
        return {m.target for m in plan.mounts}, {(s.path, s.target) for s in plan.symlinks}

    mounts, links = planned("display")
    assert {
        "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
        "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.550.54.15",
    } <= mounts
    assert (
        "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so",
        "libglxserver_nvidia.so.550.54.15",
    ) in links
    mounts, links = planned("graphics")  # the loaders' files, not an X server's
    assert not any("xorg" in m for m in mounts) and not any("xorg" in p for p, _ in links)
