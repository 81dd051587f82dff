"""A generated CDI spec used by the real podman: ``--device nvidia.com/gpu=1`` sees GPU 1.

podman 4.3 reads specs only from /etc/cdi and /var/run/cdi, so the spec goes to
/var/run/cdi under a name unique to the test and is removed afterwards. Podman's storage is
private (``--root``/``--runroot`` under the test's tmp dir); the glibc rootfs is imported.
runc is used (crun refuses the hybrid cgroup layout of some CI hosts).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from integration.harness.podman import CDI_DIR, RUN_FLAGS, TAG, podman_run, spec_in_cdi_dir
from nvct.base.ldcache_format import Entry, read_entries
from nvct.base.oci import CDI_LD_CACHE_ENV

pytestmark = [pytest.mark.podman, pytest.mark.root]


@contextmanager
def generated_spec(
    cli: list[str],
    sim_driver: Any,
    nvct_config: Path,
    suffix: str = ".json",
    options: Sequence[str] = (),
) -> Iterator[Path]:
    """A spec in /var/run/cdi written by ``cli`` (an nvct-cli command line, with ``cdi
    generate``'s ``options``) for the simulated driver; removed afterwards."""
    roots = [
        "--config", str(nvct_config), "--driver-root", str(sim_driver.driver_root),
        "--dev-root", str(sim_driver.dev_root), "--proc-root", str(sim_driver.proc_root),
    ]  # fmt: skip
    with spec_in_cdi_dir(suffix) as path:
        done = subprocess.run(
            [*cli, *roots, "cdi", "generate", "-o", str(path), *options],
            capture_output=True, text=True, timeout=120, check=False, env={"PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        yield path


@pytest.fixture
def spec_file(sim_driver: Any, nvct_config: Path) -> Iterator[Path]:
    with generated_spec([sys.executable, "-m", "nvct.cli.main"], sim_driver, nvct_config) as path:
        yield path


def assert_only_gpu_1(smi: str, devs: str, sim_driver: Any) -> None:
    """``nvidia-smi -L`` shows GPU 1 only, and ``ls /dev`` only its /dev/nvidia1."""
    uuids = [line.split("UUID: ")[1].rstrip(")") for line in smi.splitlines() if "UUID:" in line]
    assert uuids == [sim_driver.spec.gpus[1].uuid]
    assert sorted(d for d in devs.split() if d[6:].isdigit() and d.startswith("nvidia")) == [
        "nvidia1"
    ]


def test_device_1_sees_exactly_gpu_1(podman: list[str], spec_file: Path, sim_driver: Any) -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", "cdi", "list", "--spec-dir", str(CDI_DIR)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert {"nvidia.com/gpu=1", "nvidia.com/gpu=all"} <= set(listed)
    script = "nvidia-smi -L; echo ===; ls /dev; echo ===; env"
    result = podman_run(podman, ["nvidia.com/gpu=1"], script)
    assert result.returncode == 0, result.stderr
    smi, devs, env = result.stdout.split("===")
    assert_only_gpu_1(smi, devs, sim_driver)
    assert "NVIDIA_VISIBLE_DEVICES=void" in env.split()
    assert f"NVCT_CDI_DRIVER_VERSION={sim_driver.spec.driver_version}" in env.split()


def hooked_start(podman: list[str], device: str, sim_driver: Any) -> str:
    """Start a container given ``device``; check the CDI hook's libcuda.so.1 link and the
    ld.so.cache it made; return what ``nvidia-smi -L`` printed there."""
    script = (
        "nvidia-smi -L; echo ===; readlink /usr/lib/x86_64-linux-gnu/libcuda.so.1; "
        "grep -a -c libcuda.so.1 /etc/ld.so.cache"
    )
    result = podman_run(podman, [device], script)
    assert result.returncode == 0, result.stderr
    smi, rest = result.stdout.split("===")
    link, cached = rest.split()
    assert link == f"libcuda.so.{sim_driver.spec.driver_version}"  # the CDI hook's symlink
    assert int(cached) >= 1  # and the ld.so.cache it made
    return smi


def test_all_gpus_and_the_hooks_work(podman: list[str], spec_file: Path, sim_driver: Any) -> None:
    smi = hooked_start(podman, "nvidia.com/gpu=all", sim_driver)
    assert smi.count("UUID: GPU-") == len(sim_driver.spec.gpus)
    spec = json.loads(spec_file.read_text())
    assert spec["containerEdits"]["hooks"][0]["hookName"] == "createContainer"


def _container_ld_cache(podman: list[str], device: str) -> tuple[int, list[Entry]]:
    """The ld.so.cache a container given CDI ``device`` sees, as (flags, entries)."""
    done = subprocess.run(
        [*podman, "run", "--rm", *RUN_FLAGS, "--device", device, TAG, "cat", "/etc/ld.so.cache"],
        capture_output=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return read_entries(done.stdout)


def test_the_hooks_merged_ld_cache_is_what_ldconfig_makes(
    podman: list[str], spec_file: Path, sim_driver: Any
) -> None:
    """The hook adds the planner's entries to the image's own ld.so.cache, with no ldconfig
    (the copy's ldconfig does not exist): the same entries, in the same order, as ldconfig
    makes when the spec has no entries to merge (a spec written before them)."""
    spec = json.loads(spec_file.read_text())
    (hook,) = spec["containerEdits"]["hooks"]
    assert any(e.startswith(f"{CDI_LD_CACHE_ENV}=") for e in hook["env"])
    merged, ldconfig = copy.deepcopy(spec), copy.deepcopy(spec)
    merged["kind"], ldconfig["kind"] = "nvct-test.example.com/merged", "nvct-test.example.com/ld"
    (merged_hook,), (ldconfig_hook,) = (s["containerEdits"]["hooks"] for s in (merged, ldconfig))
    at = merged_hook["args"].index("--ldconfig")
    merged_hook["args"][at + 1] = "/nonexistent/ldconfig"
    ldconfig_hook["env"] = [e for e in hook["env"] if not e.startswith(f"{CDI_LD_CACHE_ENV}=")]
    with spec_in_cdi_dir() as merged_path, spec_in_cdi_dir() as ldconfig_path:
        merged_path.write_text(json.dumps(merged))
        ldconfig_path.write_text(json.dumps(ldconfig))
        by_merge = _container_ld_cache(podman, "nvct-test.example.com/merged=0")
        by_ldconfig = _container_ld_cache(podman, "nvct-test.example.com/ld=0")
    assert by_merge == by_ldconfig
    keys = {e[1] for e in by_merge[1]}  # the image's own libraries and the driver's
    assert {b"libc.so.6", b"libcuda.so.1", b"libnvidia-ml.so.1"} <= keys


def test_a_directory_spec_gives_the_same_driver_through_one_mount(
    podman: list[str], sim_driver: Any, nvct_config: Path, tmp_path: Path
) -> None:
    """``--library-mounts directory``: the container sees the driver's libraries in
    <libdir>/nvidia-driver (one bind of hard links, not a mount per file in its layer),
    finds them through its ld.so.cache (nvidia-smi loads libnvidia-ml by SONAME), and its
    ld.so.conf.d lists the directory for an ldconfig it runs later."""
    options = ["--library-mounts", "directory", "--library-dir", str(tmp_path / "cdi")]
    cli = [sys.executable, "-m", "nvct.cli.main"]
    with generated_spec(cli, sim_driver, nvct_config, options=options) as path:
        spec = json.loads(path.read_text())
        lib = "/usr/lib/x86_64-linux-gnu"
        script = (
            f"nvidia-smi -L; echo ===; ls {lib}/nvidia-driver; echo ===; "
            f"cat /etc/ld.so.conf.d/000-nvidia-driver.conf; echo ===; ls {lib}; echo ===; "
            "grep -a -o '[a-z0-9/_-]*nvidia-driver/libcuda.so.1' /etc/ld.so.cache; "
            "cat /proc/self/mountinfo"
        )
        result = podman_run(podman, ["nvidia.com/gpu=1"], script)
    assert result.returncode == 0, result.stderr
    smi, in_dir, conf, in_lib, rest = result.stdout.split("===")
    assert_only_gpu_1(smi, "nvidia1", sim_driver)
    version = sim_driver.spec.driver_version
    assert {f"libcuda.so.{version}", "libcuda.so.1", "libnvidia-ml.so.1"} <= set(in_dir.split())
    assert f"{lib}/nvidia-driver" in conf.split()
    assert not any(name.startswith(("libcuda", "libnvidia")) for name in in_lib.split())
    cached, *mountinfo = rest.lstrip("\n").split("\n", 1)
    assert cached.strip() == f"{lib}/nvidia-driver/libcuda.so.1"
    points = [line.split()[4] for line in "".join(mountinfo).splitlines()]
    # one bind for the 64-bit libraries, none per file (vdpau/ keeps its own: found by path)
    assert [p for p in points if p.rpartition("/")[0] == lib] == [f"{lib}/nvidia-driver"]
    in_lib_dirs = [
        m["containerPath"]
        for m in spec["containerEdits"]["mounts"]
        if m["containerPath"].rpartition("/")[0] in (lib, "/usr/lib/i386-linux-gnu")
    ]
    assert in_lib_dirs == [f"{lib}/nvidia-driver", "/usr/lib/i386-linux-gnu/nvidia-driver"]


def test_the_native_hook_alone_makes_the_links_and_the_cache(
    podman: list[str], spec_file: Path, sim_driver: Any, tmp_path: Path
) -> None:
    """runc runs the native nvct-cdi-hook in the container's mount namespace before
    pivot_root: it finds the root, makes the links and merges the cache without its Python
    half (here one that fails the start), and the container's nvidia-smi finds the driver."""
    from integration.harness.skips import need_cc, require
    from nvct.runtime.launch.build import build_native

    require(need_cc())
    hook = tmp_path / "native-only-cdi-hook"
    build_native(hook, "/bin/sh -c 'echo python hook ran >&2; exit 99' x", program="cdi-hook")
    spec = json.loads(spec_file.read_text())
    spec["kind"] = "nvct-test.example.com/native"
    spec["containerEdits"]["hooks"][0]["path"] = str(hook)
    with spec_in_cdi_dir() as path:
        path.write_text(json.dumps(spec))
        smi = hooked_start(podman, "nvct-test.example.com/native=1", sim_driver)
    assert_only_gpu_1(smi, "nvidia1", sim_driver)


def test_a_compute_and_utility_spec_gives_cuda_and_nvidia_smi_and_nothing_else(
    podman: list[str], sim_driver: Any, nvct_config: Path, tmp_path: Path
) -> None:
    """``--driver-capabilities compute,utility``: the container runs nvidia-smi and finds
    libcuda through its ld.so.cache (the native hook alone: its Python half here fails the
    start), has no graphics, Vulkan or 32-bit driver files and no nvidia-modeset, and its env
    says what the spec holds."""
    from integration.harness.skips import need_cc, require
    from nvct.runtime.launch.build import build_native

    require(need_cc())
    hook = tmp_path / "native-only-cdi-hook"
    build_native(hook, "/bin/sh -c 'echo python hook ran >&2; exit 99' x", program="cdi-hook")
    options = [
        "--driver-capabilities", "compute,utility", "--hook-path", str(hook),
        "--library-mounts", "directory", "--library-dir", str(tmp_path / "cdi"),
    ]  # fmt: skip
    cli = [sys.executable, "-m", "nvct.cli.main"]
    with generated_spec(cli, sim_driver, nvct_config, options=options):
        script = (
            "nvidia-smi -L; echo ===; grep -a -o '[a-z0-9/_-]*/libcuda.so.1' /etc/ld.so.cache; "
            "echo ===; ls /dev /etc/vulkan/icd.d /usr/share/glvnd/egl_vendor.d "
            "/usr/lib/i386-linux-gnu/nvidia-driver 2>&1; echo ===; env"
        )
        result = podman_run(podman, ["nvidia.com/gpu=1"], script)
    assert result.returncode == 0, result.stderr
    smi, cached, listed, env = result.stdout.split("===")
    assert_only_gpu_1(smi, listed, sim_driver)
    assert cached.split() == ["/usr/lib/x86_64-linux-gnu/nvidia-driver/libcuda.so.1"]
    assert "nvidia-modeset" not in listed.split()
    for gone in ("vulkan/icd.d", "egl_vendor.d", "i386-linux-gnu/nvidia-driver"):
        assert f"{gone}: No such file or directory" in listed  # busybox ls
    assert "NVCT_CDI_DRIVER_CAPABILITIES=utility,compute" in env.split()
