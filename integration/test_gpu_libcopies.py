"""A real container through nvct-runtime and runc, the driver on another filesystem than
nvct's cache dir (a private tmpfs): with inject.library-mounts = "directory-copies" its
libraries come as one bound directory of copies, and the container's loader finds them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from integration.harness.bundles import BundleFactory
from integration.harness.nvct_config import write_nvct_config
from integration.harness.tmpfs import mounted_tmpfs
from integration.test_gpu_runc import run_through, smi_uuids

pytestmark = [pytest.mark.runc, pytest.mark.root]


def test_a_container_finds_the_copies_of_a_driver_on_another_filesystem(
    runc_bundle_factory: BundleFactory, container_id: str, sim_driver: Any, tmp_path: Path
) -> None:
    from nvct.host.arch import host_arch

    libdir = f"/usr/lib/{host_arch().multiarch64}/nvidia-driver"
    script = f"LD_DEBUG=libs nvidia-smi -L 2>&1; ls {libdir}; true"
    env = ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
    with mounted_tmpfs(tmp_path / "otherfs") as mount:
        config = write_nvct_config(
            mount / "nvct" / "config.toml",  # its cache-dir beside it, on the tmpfs
            sim_driver,
            **{"inject.library-mounts": '"directory-copies"'},
        )
        result = run_through("shim", runc_bundle_factory, container_id, config, script, env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert smi_uuids(result.stdout) == [sim_driver.spec.gpus[1].uuid]
        lookup = result.stdout.split("find library=libnvidia-ml.so.1", 1)[1]
        assert f"trying file={libdir}/libnvidia-ml.so.1" in lookup.split("calling", 1)[0]
        dirs = mount / "nvct/cache/libcopies/dirs"
        (copies,) = [p for p in dirs.iterdir() if p.is_dir() and not p.name.startswith(".")]
        listed = set(result.stdout.split())
        assert {p.name for p in copies.iterdir()} <= listed  # the copies, bound as one
        for name in (p.name for p in copies.iterdir() if not p.is_symlink()):
            original = Path(sim_driver.lib_dir) / name
            if not name.startswith("lib"):  # a binary, run through /usr/bin/<name>
                original = Path(sim_driver.driver_root) / "usr/bin" / name
            assert (copies / name).read_bytes() == original.read_bytes()
            assert (copies / name).stat().st_ino != original.stat().st_ino
        log = [json.loads(ln) for ln in (mount / "nvct/nvct.log").read_text().splitlines()]
        (prepared,) = [e for e in log if e["event"] == "container_prepared"]
        # without the option, the same start mounts each library on its own
        plain = write_nvct_config(mount / "plain" / "config.toml", sim_driver)
        other = run_through("shim", runc_bundle_factory, container_id, plain, script, env)
        assert other.returncode == 0 and smi_uuids(other.stdout) == smi_uuids(result.stdout)
        log = [json.loads(ln) for ln in (mount / "plain/nvct.log").read_text().splitlines()]
        (files,) = [e for e in log if e["event"] == "container_prepared"]
        libraries = sum(not p.is_symlink() for p in copies.iterdir())
        assert files["mounts"] == prepared["mounts"] - 1 + libraries
