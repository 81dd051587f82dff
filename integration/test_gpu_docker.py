"""GPUs in real docker containers through nvct-runtime (and --gpus on plain runc).

Each test starts real containers on a private dockerd, with the simulated driver as the
host's driver; what the container sees (device nodes, nvidia-smi, ld.so.cache, errno of
open) is the evidence.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.harness.dockerd import Dockerd, DockerdFactory
from integration.harness.images import GLIBC_TAG, ImageImporter
from integration.harness.nvct_config import write_nvct_config
from integration.harness.shimd import HOOK_PATHS, ShimDaemon, expected_via
from integration.harness.skips import need_cc, require
from nvct.runtime.launch.build import build_native
from tests.nvidia_legacy import BINARIES as LEGACY_BINARIES
from tests.nvidia_legacy import UTILITY_COMPUTE_LIBS as LEGACY_UTILITY_COMPUTE

pytestmark = [pytest.mark.docker, pytest.mark.root]


def run(
    dockerd: Dockerd, script: str, *env: str, runtime: str = "nvidia", extra: tuple[str, ...] = ()
):
    args = ["run", "--rm", "--network", "none"]
    if runtime:
        args += ["--runtime", runtime]
    for item in env:
        args += ["-e", item]
    return dockerd.docker(
        *args, *extra, GLIBC_TAG, "/bin/sh", "-c", script, check=False, timeout=120
    )


def gpu_nodes(listing: str) -> list[str]:
    return sorted(n for n in listing.split() if n.startswith("nvidia") and n[6:].isdigit())


def smi_uuids(output: str) -> list[str]:
    return [
        line.split("UUID: ")[1].rstrip(")") for line in output.splitlines() if "UUID: GPU-" in line
    ]


def test_one_gpu(nvidia_dockerd: Dockerd, sim_driver: Any) -> None:
    script = (
        "ls /dev; echo ===; nvidia-smi -L; echo ===; "
        "for l in libcuda.so.1 libnvidia-ml.so.1; do "
        "grep -a -q $l /etc/ld.so.cache && echo $l; done; "
        "echo ===; "
        "ls /usr/lib/x86_64-linux-gnu/nvidia-driver"
    )
    result = run(nvidia_dockerd, script, "NVIDIA_VISIBLE_DEVICES=1")
    assert result.returncode == 0, result.stderr
    devs, smi, cache, libs = result.stdout.split("===")
    assert gpu_nodes(devs) == ["nvidia1"]
    assert {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} <= set(devs.split())
    assert "nvidia-modeset" not in devs.split()
    assert smi_uuids(smi) == [sim_driver.spec.gpus[1].uuid]
    assert cache.split() == ["libcuda.so.1", "libnvidia-ml.so.1"]
    assert "libcuda.so" in libs.split() and "libcuda.so.550.54.15" in libs.split()
    assert not [lib for lib in libs.split() if "GL" in lib or "glcore" in lib]


def test_device_cgroup_grants_exactly_the_requested_gpu(nvidia_dockerd: Dockerd) -> None:
    script = (
        "mknod /tmp/gpu0 c 195 0; "
        "cat /tmp/gpu0 2>&1 >/dev/null; echo ===; cat /dev/nvidia1 2>&1 >/dev/null; echo ==="
    )
    result = run(nvidia_dockerd, script, "NVIDIA_VISIBLE_DEVICES=1")
    other, own, _ = result.stdout.split("===")
    assert "Operation not permitted" in other
    assert "No such device or address" in own  # allowed by the cgroup; no kernel driver here


def test_uuid_list_all_none(nvidia_dockerd: Dockerd, sim_driver: Any) -> None:
    uuids = [g.uuid for g in sim_driver.spec.gpus]
    result = run(nvidia_dockerd, "nvidia-smi -L", f"NVIDIA_VISIBLE_DEVICES={uuids[3]},{uuids[0]}")
    assert sorted(smi_uuids(result.stdout)) == sorted([uuids[0], uuids[3]])
    result = run(nvidia_dockerd, "nvidia-smi -L", "NVIDIA_VISIBLE_DEVICES=all")
    assert smi_uuids(result.stdout) == uuids
    result = run(
        nvidia_dockerd, "ls /dev; nvidia-smi -L; echo rc=$?", "NVIDIA_VISIBLE_DEVICES=none"
    )
    assert gpu_nodes(result.stdout) == [] and "nvidiactl" in result.stdout.split()
    assert smi_uuids(result.stdout) == []


@pytest.mark.parametrize(
    "env", [(), ("NVIDIA_VISIBLE_DEVICES=void",), ("NVIDIA_VISIBLE_DEVICES=",)]
)
def test_no_request_means_untouched(nvidia_dockerd: Dockerd, env: tuple[str, ...]) -> None:
    result = run(nvidia_dockerd, "ls /dev /usr/lib/x86_64-linux-gnu; ls /usr/bin/nvidia-smi", *env)
    assert "nvidiactl" not in result.stdout and "libcuda" not in result.stdout
    assert result.returncode != 0  # nvidia-smi is not there


def test_capabilities_all_and_graphics(nvidia_dockerd: Dockerd) -> None:
    listing = "ls /dev /usr/lib/x86_64-linux-gnu/nvidia-driver /usr/share/glvnd/egl_vendor.d"
    result = run(
        nvidia_dockerd, listing, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"
    )
    names = set(result.stdout.split())
    assert {
        "libGLX_nvidia.so.0",
        "libcuda.so.1",
        "libnvidia-encode.so.1",
        "nvidia-modeset",
    } <= names
    result = run(
        nvidia_dockerd,
        listing,
        "NVIDIA_VISIBLE_DEVICES=0",
        "NVIDIA_DRIVER_CAPABILITIES=graphics,display",
    )
    names = set(result.stdout.split())
    assert {"libGLX_nvidia.so.0", "libEGL_nvidia.so.0", "nvidia-modeset", "10_nvidia.json"} <= names
    assert "libcuda.so.1" not in names


def test_failing_requirement_refuses_the_container(nvidia_dockerd: Dockerd) -> None:
    before = nvidia_dockerd.docker("ps", "-aq").stdout
    result = run(
        nvidia_dockerd, "true", "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=13.0"
    )
    assert result.returncode != 0
    assert "cuda>=13.0" in result.stderr and "12.4" in result.stderr
    assert nvidia_dockerd.docker("ps", "-aq").stdout == before  # nothing half-started left


def test_unknown_device_lists_devices(nvidia_dockerd: Dockerd, sim_driver: Any) -> None:
    result = run(nvidia_dockerd, "true", "NVIDIA_VISIBLE_DEVICES=7")
    assert result.returncode != 0
    assert "unknown device '7'" in result.stderr
    assert all(g.uuid in result.stderr for g in sim_driver.spec.gpus)


@contextlib.contextmanager
def _path_prefix(directory: Path) -> Iterator[None]:
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{directory}:{old}"
    try:
        yield
    finally:
        os.environ["PATH"] = old


@pytest.fixture(scope="module", params=HOOK_PATHS)
def gpus_dockerd(
    request: pytest.FixtureRequest,
    dockerd_factory: DockerdFactory,
    sim_driver: Any,
    import_glibc_image: ImageImporter,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Dockerd, Path, str]:
    """A dockerd without the nvidia runtime whose PATH finds nvct's nvidia-container-runtime-hook
    (the Python hook's path, or the native hook served by a shim daemon); nvct's log; the path.

    dockerd runs that hook with an empty environment, so a wrapper passes the test config
    (an installed nvct reads /etc/nvct/config.toml).
    """
    how = request.param
    hook_exe = request.getfixturevalue(
        "served_hook_path" if how == "daemon" else "python_hook_path"
    )
    tmp = tmp_path_factory.mktemp("gpus")
    config = write_nvct_config(tmp / "config.toml", sim_driver)
    bindir = tmp / "bin"
    bindir.mkdir()
    hook = bindir / "nvidia-container-runtime-hook"
    hook.write_text(f'#!/bin/sh\nNVCT_CONFIG={config} exec {hook_exe} "$@"\n')
    hook.chmod(0o755)
    with _path_prefix(bindir):
        dockerd = dockerd_factory({})
    import_glibc_image(dockerd)
    return dockerd, config.parent / "nvct.log", how


def test_docker_gpus_flag_on_plain_runc(
    gpus_dockerd: tuple[Dockerd, Path, str], sim_driver: Any
) -> None:
    dockerd, log, how = gpus_dockerd
    result = dockerd.docker(
        "run",
        "--rm",
        "--network",
        "none",
        "--gpus",
        "device=1",
        GLIBC_TAG,
        "/bin/sh",
        "-c",
        "ls /dev; nvidia-smi -L; mknod /tmp/g0 c 195 0; cat /tmp/g0",
        check=False,
        timeout=120,
    )
    assert gpu_nodes(result.stdout) == ["nvidia1"], result.stderr
    assert smi_uuids(result.stdout) == [sim_driver.spec.gpus[1].uuid]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    ran = [e["via"] for e in events if e["event"] == "container_configured"]
    assert ran[-1:] == expected_via(how)
    assert "Operation not permitted" in result.stderr


def test_shim_log_records_phases_and_no_hook_runs(
    nvidia_dockerd: Dockerd, nvct_config: Path
) -> None:
    import json

    log = nvct_config.parent / "nvct.log"
    before = len(log.read_text().splitlines()) if log.exists() else 0
    run(nvidia_dockerd, "true", "NVIDIA_VISIBLE_DEVICES=2")
    lines = [json.loads(line) for line in log.read_text().splitlines()[before:]]
    shim = [e for e in lines if e["event"] == "container_prepared"][-1]
    # the library directory (its 5 binaries linked from /usr/bin), 2 IPC sockets, the MPS
    # directory, the firmware directory
    assert shim["devices"][-1] == "/dev/nvidia2" and shim["mounts"] == 5
    assert shim["binary_links"] == 5
    assert set(shim["phases_ms"]) == {"plan", "rootfs", "spec", "ldconfig"}
    assert len(shim["container_id"]) == 64
    assert not [e for e in lines if e["component"] == "nvct-hook"]


def test_container_holds_what_nvidia_legacy_injects(
    nvidia_dockerd: Dockerd, sim_driver: Any
) -> None:
    from integration.simdriver import DRIVER_LIBS

    version = sim_driver.spec.driver_version
    image_libs = set(run(nvidia_dockerd, "ls /usr/lib/x86_64-linux-gnu", runtime="").stdout.split())
    # The libraries and their links are in one directory (inject.library-mounts =
    # "directory"), which is all the image's own library directory gains.
    libdir = "/usr/lib/x86_64-linux-gnu/nvidia-driver"
    result = run(
        nvidia_dockerd,
        f"ls {libdir}; echo ===; ls /usr/bin; echo ===; "
        f"ls /lib/firmware/nvidia/{version}; echo ===; "
        f"for l in {libdir}/*; do [ -L $l ] && echo ${{l##*/}} $(readlink $l); done; "
        "echo ===; ls /dev; echo ===; ls /usr/lib/x86_64-linux-gnu",
        "NVIDIA_VISIBLE_DEVICES=1",
    )
    libs, bins, firmware, links, devs, parent = result.stdout.split("===")
    assert set(parent.split()) - image_libs == {"nvidia-driver"}
    by_name = {lib.name: lib for lib in DRIVER_LIBS}
    files = {f"{n}.so.{version}" for n in LEGACY_UTILITY_COMPUTE}
    sonames = {by_name[n].soname_for(version) for n in LEGACY_UTILITY_COMPUTE} - files
    # the binaries too: /usr/bin's are links there (inject.binaries = "links")
    assert set(libs.split()) == files | sonames | {"libcuda.so"} | set(LEGACY_BINARIES)
    assert {b for b in bins.split() if b.startswith("nvidia")} == set(LEGACY_BINARIES)
    assert set(firmware.split()) == {"gsp_ga10x.bin", "gsp_tu10x.bin"}
    pairs = dict(line.split() for line in links.strip().splitlines())
    assert pairs["libcuda.so"] == "libcuda.so.1"
    assert pairs["libcuda.so.1"] == f"libcuda.so.{version}"
    assert {d for d in devs.split() if d.startswith("nvidia")} == {
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia1",
    }


@pytest.fixture(scope="module")
def daemon_dockerd(
    dockerd_factory: DockerdFactory,
    nvct_config: Path,
    import_glibc_image: ImageImporter,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Dockerd]:
    """A dockerd whose runtime ``nvidia`` is the native launcher served by a shim daemon. The
    launcher's own Python shim is ``/bin/false``: a create the daemon did not prepare fails."""
    require(need_cc())
    work = tmp_path_factory.mktemp("shimd")
    sock = work / "shim.sock"
    launcher = work / "nvct-runtime"
    build_native(launcher, "/bin/false", str(nvct_config), str(sock))
    shimd = ShimDaemon([sys.executable, "-m", "nvct.runtime.launch.daemon"], sock, work / "d.log")
    shimd.start()
    try:
        dockerd = dockerd_factory({"runtimes": {"nvidia": {"path": str(launcher)}}})
        import_glibc_image(dockerd)
        yield dockerd
    finally:
        shimd.stop()


def test_shim_daemon_prepares_docker_containers(daemon_dockerd: Dockerd, sim_driver: Any) -> None:
    result = run(daemon_dockerd, "ls /dev; echo ===; nvidia-smi -L", "NVIDIA_VISIBLE_DEVICES=1")
    assert result.returncode == 0, result.stderr
    devs, smi = result.stdout.split("===")
    assert gpu_nodes(devs) == ["nvidia1"]
    assert smi_uuids(smi) == [sim_driver.spec.gpus[1].uuid]
    # A refusal reaches docker's user through containerd, as from the shim, and leaves nothing.
    before = daemon_dockerd.docker("ps", "-aq").stdout
    refused = run(daemon_dockerd, "true", "NVIDIA_VISIBLE_DEVICES=7")
    assert refused.returncode != 0
    assert "unknown device '7'" in refused.stderr
    assert daemon_dockerd.docker("ps", "-aq").stdout == before
