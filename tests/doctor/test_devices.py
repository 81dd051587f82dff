"""doctor's device-node checks: missing nodes, wrong majors, /dev/char links and their fix."""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from nvct.doctor import FAIL, PASS, devices
from tests.doctor.conftest import facts_of, healthy_dev_root, sim_ctx


@pytest.mark.root
def test_healthy_dev_root_passes(h100x4, tmp_path) -> None:
    ctx = sim_ctx(h100x4, tmp_path, dev_root=healthy_dev_root(h100x4, tmp_path))
    facts = facts_of(ctx)
    assert devices.check_device_nodes(ctx, facts).status == PASS
    assert devices.check_dev_char_links(ctx).status == PASS


@pytest.mark.root
def test_missing_gpu_node_fails(h100x4, tmp_path) -> None:
    dev = healthy_dev_root(h100x4, tmp_path, minors=[0, 1, 2])
    ctx = sim_ctx(h100x4, tmp_path, dev_root=dev)
    result = devices.check_device_nodes(ctx, facts_of(ctx))
    assert result.status == FAIL
    assert f"{dev}/dev/nvidia3 is missing" in result.message
    assert result.fix == "nvidia-modprobe -c 3"


@pytest.mark.root
def test_missing_nvidiactl_fails(h100x4, tmp_path) -> None:
    dev = healthy_dev_root(h100x4, tmp_path, control=False)
    ctx = sim_ctx(h100x4, tmp_path, dev_root=dev)
    result = devices.check_device_nodes(ctx, facts_of(ctx))
    assert result.status == FAIL and f"{dev}/dev/nvidiactl is missing" in result.message
    assert "nvidia-modprobe -c 0" in result.fix


@pytest.mark.root
def test_wrong_major_fails_with_mknod(h100x4, tmp_path) -> None:
    dev = healthy_dev_root(h100x4, tmp_path)
    node = dev / "dev/nvidia0"
    node.unlink()
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(196, 0))
    ctx = sim_ctx(h100x4, tmp_path, dev_root=dev)
    result = devices.check_device_nodes(ctx, facts_of(ctx))
    assert result.status == FAIL
    assert f"{node} is c 196:0, expected c 195:0" in result.message
    assert result.fix == f"rm {node} && mknod -m 666 {node} c 195 0"


@pytest.mark.root
def test_uvm_major_comes_from_proc_devices(h100x4, tmp_path) -> None:
    proc = tmp_path / "driver-proc"
    shutil.copytree(h100x4.proc_root, proc)
    (proc / "devices").chmod(0o644)
    (proc / "devices").write_text(
        (proc / "devices").read_text().replace("511 nvidia-uvm", "510 nvidia-uvm")
    )
    dev = healthy_dev_root(h100x4, tmp_path)
    ctx = sim_ctx(h100x4, tmp_path, dev_root=dev, proc_root=proc)
    result = devices.check_device_nodes(ctx, facts_of(ctx))
    assert result.status == FAIL
    assert f"{dev}/dev/nvidia-uvm is c 511:0, expected c 510:0" in result.message
    assert f"{dev}/dev/nvidia-uvm-tools is c 511:1, expected c 510:1" in result.message


@pytest.mark.root
def test_missing_dev_char_links_fail_then_fix(h100x4, tmp_path) -> None:
    from integration.simdriver import make_dev_nodes

    dev = tmp_path / "devroot"
    make_dev_nodes(h100x4.spec, dev)
    ctx = sim_ctx(h100x4, tmp_path, dev_root=dev)
    result = devices.check_dev_char_links(ctx)
    assert result.status == FAIL
    assert "8 NVIDIA device node(s) have no /dev/char link" in result.message
    assert "Failed to initialize NVML: Unknown Error" in result.message
    assert result.fix.startswith("nvct-cli doctor --fix-dev-char (or by hand: ln -sfn ../nvidia")
    assert f"{dev}/dev/char/195:254" in result.fix
    made = devices.fix_dev_char_links(dev)
    assert len(made) == 8
    assert os.readlink(dev / "dev/char/195:0") == "../nvidia0"
    assert os.readlink(dev / "dev/char/195:255") == "../nvidiactl"
    assert devices.check_dev_char_links(ctx).status == PASS
    # A link to the wrong node counts as missing.
    (dev / "dev/char/195:1").unlink()
    (dev / "dev/char/195:1").symlink_to("../nvidia2")
    broken = devices.check_dev_char_links(ctx)
    assert broken.status == FAIL and "195:1" in broken.message


@pytest.mark.root
def test_mig_cap_links(a100mig, tmp_path) -> None:
    dev = healthy_dev_root(a100mig, tmp_path)
    assert os.readlink(next((dev / "dev/char").glob("508:*"))).startswith("../nvidia-caps/")
    ctx = sim_ctx(a100mig, tmp_path, dev_root=dev)
    assert devices.check_device_nodes(ctx, facts_of(ctx)).status == PASS
