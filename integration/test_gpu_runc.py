"""GPUs with ``runc run`` on a bundle, without docker: the shim, the hook alone, policy."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.harness.bundles import BundleFactory, run_runc
from integration.harness.nvct_config import NVCT_BIN, write_nvct_config
from integration.harness.shimd import HOOK_PATHS, expected_via, hook_via
from integration.harness.skips import need_binary, require

pytestmark = [pytest.mark.runc, pytest.mark.root]


def shim_env(config: Path) -> dict[str, str]:
    return {**os.environ, "NVCT_CONFIG": str(config)}


def smi_uuids(output: str) -> list[str]:
    return [ln.split("UUID: ")[1].rstrip(")") for ln in output.splitlines() if "UUID: GPU-" in ln]


def host_mounts() -> int:
    return len(Path("/proc/self/mountinfo").read_text().splitlines())


def gpus_hook(
    config: Path, hook: Path = NVCT_BIN / "nvidia-container-runtime-hook"
) -> dict[str, Any]:
    """nvct's prestart hook as dockerd writes it for ``--gpus`` (run by plain runc)."""
    return {
        "path": str(hook),
        "args": ["nvidia-container-runtime-hook", "prestart"],
        "env": [f"NVCT_CONFIG={config}"],
    }


def runc_list() -> str:
    return subprocess.run(
        ["runc", "list", "-q"], capture_output=True, text=True, check=False
    ).stdout


def test_shim_injects_one_gpu(
    runc_bundle_factory: BundleFactory, container_id: str, nvct_config: Path, sim_driver: Any
) -> None:
    mounts_before = host_mounts()
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", "ls /dev; nvidia-smi -L"], ["NVIDIA_VISIBLE_DEVICES=2"]
    )
    result = run_runc(
        bundle, container_id, runtime=str(NVCT_BIN / "nvct-runtime"), env=shim_env(nvct_config)
    )
    assert result.returncode == 0, result.stderr
    assert smi_uuids(result.stdout) == [sim_driver.spec.gpus[2].uuid]
    assert "nvidia2" in result.stdout.split() and "nvidia0" not in result.stdout.split()
    assert host_mounts() == mounts_before  # every mount was made in the container's namespace


def test_a_stale_native_entry_is_written_anew_when_the_order_is_cached(
    runc_bundle_factory: BundleFactory,
    sim_driver: Any,
    tmp_path: Path,
    native_hook_path: Path,
    python_hook_path: Path,
) -> None:
    """What the full suite once hit: the native hook wrote this kind's entry; the driver
    changed; a hook that writes no entry (a fixed-path one) planned the kind again under the
    new driver. The next start through the native hook finds an entry of the old driver and
    hands over ("the driver changed"); the Python hook's order is cached, and it must write the
    entry anew, not keep it: the start after that is native again."""
    config = write_nvct_config(tmp_path / "cfg" / "config.toml", sim_driver)
    log = config.parent / "nvct.log"
    extra = Path(sim_driver.dev_root) / "dev/nvidia-stale-entry-test"

    def start(i: int, hook: Path) -> list[dict[str, Any]]:
        cid = f"nvct-stale-entry-{os.getpid()}-{i}"
        bundle = runc_bundle_factory(
            ["/bin/true"], ["NVIDIA_VISIBLE_DEVICES=1"],
            extra={"hooks": {"prestart": [gpus_hook(config, hook)]}},
        )  # fmt: skip
        result = run_runc(bundle, cid)
        assert result.returncode == 0, result.stderr
        events = [json.loads(ln) for ln in log.read_text().splitlines()]
        return [e for e in events if e.get("container_id") == cid]

    assert [e["via"] for e in start(0, native_hook_path)] == ["hook"]  # writes the entry
    assert [e["via"] for e in start(1, native_hook_path)] == ["native"]
    extra.write_text("")
    try:
        assert [e["via"] for e in start(2, python_hook_path)] == ["hook"]  # plans, no entry
        (stale,) = start(3, native_hook_path)
        assert stale["via"] == "hook"
        assert stale["native_declined"] == "the driver changed since its native entry was written"
        assert [e["via"] for e in start(4, native_hook_path)] == ["native"]
    finally:
        extra.unlink()


@pytest.mark.parametrize("how", HOOK_PATHS)
def test_hook_alone_creates_nodes_and_grants_cgroup(
    runc_bundle_factory: BundleFactory,
    container_id: str,
    nvct_config: Path,
    sim_driver: Any,
    hook_path: Callable[[str], Path],
    how: str,
) -> None:
    """The --gpus path: plain runc, a prestart hook named nvidia-container-runtime-hook, which
    does the work itself or hands it to the shim daemon."""
    hook = gpus_hook(nvct_config, hook_path(how))
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", "ls /dev; nvidia-smi -L; cat /dev/nvidia0"],
        ["NVIDIA_VISIBLE_DEVICES=0"],
        extra={"hooks": {"prestart": [hook]}},
    )
    result = run_runc(bundle, container_id)
    assert smi_uuids(result.stdout) == [sim_driver.spec.gpus[0].uuid], result.stderr
    assert "No such device or address" in result.stderr  # granted by devices.allow
    log = [json.loads(ln) for ln in (nvct_config.parent / "nvct.log").read_text().splitlines()]
    configured = [e for e in log if e["event"] == "container_configured"]
    assert configured[-1]["ld_cache"] == "merged"  # the image's cache, no ldconfig run
    assert hook_via(nvct_config.parent / "nvct.log", container_id) == expected_via(how)


# What a --gpus container sees of its GPU: nodes, the cgroup grant (ENXIO from the simulated
# node's driverless major, never EPERM), nvidia-smi, /proc/driver/nvidia, the links, the
# ld.so.conf.d entry and cache, and the driver's mounts.
SEEN = (
    "ls /dev | grep nvidia; nvidia-smi -L; cat /dev/nvidia1 2>&1 | sed 's/^cat: //';"
    " cat /proc/driver/nvidia/params; ls -R /proc/driver/nvidia; readlink /usr/bin/nvidia-smi;"
    " cat /etc/ld.so.conf.d/000-nvidia-driver.conf; md5sum /etc/ld.so.cache;"
    " awk '$5 ~ /nvidia|firmware|mps|driver/ {print $5, $6}' /proc/self/mountinfo"
)


@pytest.mark.parametrize("first", ["python", "daemon"])
def test_the_second_gpus_container_of_a_kind_is_done_by_the_hook_alone(
    runc_bundle_factory: BundleFactory,
    sim_driver: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    first: str,
) -> None:
    """The --gpus path as installed: the first container of a kind through the Python hook
    (in the hook's process, or a daemon's worker), which writes the native entry; the next is
    the native hook's own work (nativehook.h), and its container sees the same."""
    name = "native_hook_path" if first == "python" else "served_native_hook_path"
    hook_exe: Path = request.getfixturevalue(name)
    config = write_nvct_config(tmp_path / "cfg" / "config.toml", sim_driver)
    log = config.parent / "nvct.log"
    mounts_before = host_mounts()
    seen, via = [], []
    for i in range(3):
        cid = f"nvct-native-hook-{os.getpid()}-{i}"
        bundle = runc_bundle_factory(
            ["/bin/sh", "-c", SEEN],
            ["NVIDIA_VISIBLE_DEVICES=1"],
            extra={"hooks": {"prestart": [gpus_hook(config, hook_exe)]}},
        )
        result = run_runc(bundle, cid)
        assert result.returncode == 0, result.stderr
        seen.append(result.stdout)
        via += hook_via(log, cid)
    assert via == [{"python": "hook", "daemon": "daemon"}[first], "native", "native"]
    assert seen[1] == seen[0] and seen[2] == seen[0]
    out = seen[0]
    assert smi_uuids(out) == [sim_driver.spec.gpus[1].uuid]
    assert "nvidia1" in out.split() and "nvidia0" not in out.split()
    assert "No such device or address" in out  # granted: never "Operation not permitted"
    assert "ModifyDeviceFiles: 0" in out
    configured = [json.loads(ln) for ln in log.read_text().splitlines()]
    native = [e for e in configured if e.get("via") == "native"]
    assert [e["event"] for e in native] == ["container_configured"] * 2
    # The first one's event says why the native hook left it (through the daemon too).
    (done_first,) = [e for e in configured if e.get("via") == via[0]]
    assert done_first["native_declined"] == (
        "the first container of its kind (no native entry for it yet)"
    )
    assert native[0]["ld_cache"] == "merged" and native[0]["nodes_created_by_hook"] == 4
    assert native[0]["gpus"] == [sim_driver.spec.gpus[1].uuid]
    assert host_mounts() == mounts_before  # every mount was made in the container's namespace


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=13.0"], "cuda>=13.0"),
        (["NVIDIA_VISIBLE_DEVICES=GPU-nope"], "unknown device 'GPU-nope'"),
        (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,warp"], "'warp'"),
    ],
    ids=["requirement", "unknown-device", "unknown-capability"],
)
def test_refusals_leave_no_container(
    runc_bundle_factory: BundleFactory,
    container_id: str,
    nvct_config: Path,
    env: list[str],
    message: str,
) -> None:
    bundle = runc_bundle_factory(["/bin/true"], env)
    result = run_runc(
        bundle, container_id, runtime=str(NVCT_BIN / "nvct-runtime"), env=shim_env(nvct_config)
    )
    assert result.returncode != 0
    assert message in result.stderr
    assert container_id not in runc_list()


def test_unprivileged_policy_and_device_plugin_mounts(
    runc_bundle_factory: BundleFactory, container_id: str, sim_driver: Any, tmp_path: Path
) -> None:
    config = write_nvct_config(
        tmp_path / "strict" / "config.toml",
        sim_driver,
        **{
            "request.accept-envvar-when-unprivileged": "false",
            "request.accept-volume-mounts": "true",
        },
    )
    shim = str(NVCT_BIN / "nvct-runtime")
    bundle = runc_bundle_factory(["/bin/sh", "-c", "ls /dev"], ["NVIDIA_VISIBLE_DEVICES=all"])
    result = run_runc(bundle, container_id, runtime=shim, env=shim_env(config))
    assert result.returncode == 0, result.stderr
    assert "nvidiactl" not in result.stdout  # env ignored: runc's default spec is unprivileged
    uuid = sim_driver.spec.gpus[3].uuid
    bundle = plugin_bundle(runc_bundle_factory, uuid)
    result = run_runc(bundle, container_id + "b", runtime=shim, env=shim_env(config))
    assert smi_uuids(result.stdout) == [uuid], result.stderr


def plugin_bundle(factory: BundleFactory, uuid: str) -> Path:
    """``nvidia-smi -L`` in an unprivileged container given GPU ``uuid`` by a device-plugin
    mount, while its environment asks for all of them."""
    from integration.harness.bundles import runc_spec

    mount = {
        "destination": f"/var/run/nvidia-container-devices/{uuid}",
        "source": "/dev/null",
        "type": "bind",
        "options": ["bind", "ro"],
    }
    return factory(
        ["/bin/sh", "-c", "nvidia-smi -L"],
        ["NVIDIA_VISIBLE_DEVICES=all"],
        extra={"mounts": [*runc_spec()["mounts"], mount]},
    )


def test_passthrough_subcommands(container_id: str, nvct_config: Path) -> None:
    shim = str(NVCT_BIN / "nvct-runtime")
    ours = subprocess.run(
        [shim, "state", container_id],
        capture_output=True,
        text=True,
        env=shim_env(nvct_config),
        check=False,
    )
    theirs = subprocess.run(
        ["runc", "state", container_id], capture_output=True, text=True, check=False
    )
    assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout)
    assert ours.stderr.replace(shim, "runc") == theirs.stderr or "does not exist" in ours.stderr
    version = subprocess.run([shim, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("runc version")


def test_work_order_cache_reused_and_invalidated(
    runc_bundle_factory: BundleFactory, sim_driver: Any, tmp_path: Path
) -> None:
    """Identical containers reuse the shim's cached work order; a driver change re-plans."""
    import json

    config = write_nvct_config(tmp_path / "wo" / "config.toml", sim_driver)
    shim = str(NVCT_BIN / "nvct-runtime")

    def start(name: str, env: list[str]) -> subprocess.CompletedProcess[str]:
        bundle = runc_bundle_factory(["/bin/sh", "-c", "nvidia-smi -L"], env)
        return run_runc(bundle, f"wo-{name}-{os.getpid()}", runtime=shim, env=shim_env(config))

    def cached_flags() -> list[bool]:
        log = (config.parent / "nvct.log").read_text().splitlines()
        return [e["cached"] for e in map(json.loads, log) if e["event"] == "container_prepared"]

    assert smi_uuids(start("a", ["NVIDIA_VISIBLE_DEVICES=1"]).stdout) == [
        sim_driver.spec.gpus[1].uuid
    ]
    assert smi_uuids(start("b", ["NVIDIA_VISIBLE_DEVICES=1"]).stdout) == [
        sim_driver.spec.gpus[1].uuid
    ]
    assert smi_uuids(start("c", ["NVIDIA_VISIBLE_DEVICES=2"]).stdout) == [
        sim_driver.spec.gpus[2].uuid
    ]
    assert cached_flags() == [False, True, False]
    # The cached order of a request must not outlive a driver change: bump ld.so.cache.
    cache_file = sim_driver.driver_root / "etc" / "ld.so.cache"
    st = cache_file.stat()
    os.utime(cache_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    start("d", ["NVIDIA_VISIBLE_DEVICES=1"])
    assert cached_flags()[-1] is False
    # A refused request is never cached as a success.
    refused = start("e", ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_CUDA=cuda>=99"])
    assert refused.returncode != 0 and "cuda>=99" in refused.stderr


def test_create_then_start_has_the_driver_in_its_ld_cache(
    runc_bundle_factory: BundleFactory, container_id: str, nvct_config: Path, sim_driver: Any
) -> None:
    """``create`` then ``start`` (what containerd calls; no hook runs in between): the
    container's ld.so.cache, rebuilt before runc ran, lists the driver's libraries."""
    shim = str(NVCT_BIN / "nvct-runtime")
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", "nvidia-smi -L; grep -q libnvidia-ml.so.1 /etc/ld.so.cache && echo I"],
        ["NVIDIA_VISIBLE_DEVICES=3"],
    )
    out, err = bundle / "out", bundle / "err"
    env = shim_env(nvct_config)
    try:
        # Files, not pipes: the created container holds its stdio until it runs.
        with out.open("w") as stdout, err.open("w") as stderr:
            created = subprocess.run(
                [shim, "create", "--bundle", str(bundle), container_id],
                stdout=stdout, stderr=stderr, env=env, timeout=60, check=False,
            )  # fmt: skip
        assert created.returncode == 0, err.read_text()
        assert container_id in runc_list().split()
        subprocess.run([shim, "start", container_id], env=env, check=True, timeout=30)
        for _ in range(100):  # the process runs detached: wait for its output
            if out.read_text().endswith("I\n"):
                break
            time.sleep(0.05)
        assert smi_uuids(out.read_text()) == [sim_driver.spec.gpus[3].uuid], err.read_text()
        assert out.read_text().endswith("I\n")  # its ld.so.cache lists the driver
    finally:
        subprocess.run(["runc", "delete", "--force", container_id], check=False)


@pytest.fixture
def image_without_ld_cache(glibc_rootfs_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the glibc image with no /etc/ld.so.cache: nothing to add the
    driver's entries to, so the shim runs ldconfig for it."""
    image = tmp_path / "image-without-ld-cache"
    shutil.copytree(glibc_rootfs_dir, image, symlinks=True)
    (image / "etc" / "ld.so.cache").unlink()
    return image


def test_failed_ldconfig_leaves_no_container(
    runc_bundle_factory: BundleFactory,
    image_without_ld_cache: Path,
    container_id: str,
    sim_driver: Any,
    tmp_path: Path,
) -> None:
    """ldconfig fails: runc is never run, so no container exists, and the caller gets one
    line saying why."""
    config = write_nvct_config(tmp_path / "bad" / "config.toml", sim_driver)
    config.write_text('ldconfig = "/bin/false"\n' + config.read_text())
    bundle = runc_bundle_factory(
        ["/bin/true"], ["NVIDIA_VISIBLE_DEVICES=0"], rootfs=image_without_ld_cache
    )
    shim = str(NVCT_BIN / "nvct-runtime")
    result = subprocess.run(
        [shim, "create", "--bundle", str(bundle), container_id],
        capture_output=True, text=True, env=shim_env(config), timeout=60, check=False,
    )  # fmt: skip
    try:
        assert result.returncode == 1
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("nvct-runtime: error: ldconfig"), lines
        assert container_id not in runc_list().split()
    finally:
        subprocess.run(["runc", "delete", "--force", container_id], check=False)


@contextlib.contextmanager
def overlay_rootfs(image: Path, scratch: Path) -> Iterator[Path]:
    """``image`` as the one lower layer of an overlay at ``scratch/merged``, as an engine's
    overlay snapshotter mounts a container's rootfs (``scratch/upper`` is kept)."""
    upper, work, merged = scratch / "upper", scratch / "work", scratch / "merged"
    for d in (upper, work, merged):
        d.mkdir(parents=True, exist_ok=True)
    options = f"lowerdir={image},upperdir={upper},workdir={work}"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(merged)], check=True)
    try:
        yield merged
    finally:
        subprocess.run(["umount", "-l", str(merged)], check=False)


def test_ld_cache_reused_for_fresh_overlays_of_one_image(
    runc_bundle_factory: BundleFactory,
    image_without_ld_cache: Path,
    container_id: str,
    sim_driver: Any,
    tmp_path: Path,
) -> None:
    """For an image whose ld.so.cache cannot be merged (it has none), the second fresh
    container of the image gets the ld.so.cache ldconfig made for the first (no ldconfig
    run); a container whose upper layer is not empty (restarted) gets ldconfig again. Each
    one finds the driver through its cache.

    Also a regression guard (not a timing test) on the real path: the second create loads
    neither ctypes nor any module tests/architecture/test_hot_path.py bans; the others, which run
    ldconfig, do load ctypes (so the check can fail). (The merged case: below.)"""
    from nvct.runtime.launch.build import default_command
    from tests.architecture.test_hot_path import READY_LD_CACHE

    config = write_nvct_config(tmp_path / "ov" / "config.toml", sim_driver)
    image = image_without_ld_cache
    traced = tmp_path / "nvct-runtime-importtime"  # the shim, its imports traced per call
    python, rest = default_command().split(" ", 1)
    trace = tmp_path / "imports-run.txt"
    traced.write_text(
        f'#!/bin/sh\nexec {python} -X importtime {rest} "$@" 2>>"{tmp_path}/imports-$1.txt"\n'
    )
    traced.chmod(0o755)
    loaded = []
    script = "nvidia-smi -L; grep -q libnvidia-ml.so.1 /etc/ld.so.cache && echo CACHED"
    for i, scratch in enumerate(("first", "second", "second")):  # the last: a restart
        with overlay_rootfs(image, tmp_path / scratch) as merged:
            bundle = runc_bundle_factory(
                ["/bin/sh", "-c", script], ["NVIDIA_VISIBLE_DEVICES=1"], rootfs=merged
            )
            result = run_runc(bundle, f"{container_id}-{i}", runtime=traced, env=shim_env(config))
        lines = trace.read_text().splitlines()
        trace.unlink()
        assert result.returncode == 0, "\n".join(lines)
        assert smi_uuids(result.stdout) == [sim_driver.spec.gpus[1].uuid]
        assert "CACHED" in result.stdout
        loaded.append({ln.split("|")[-1].strip() for ln in lines if ln.startswith("import time:")})
    log = [json.loads(ln) for ln in (config.parent / "nvct.log").read_text().splitlines()]
    how = [e["ld_cache"] for e in log if e["event"] == "container_prepared"]
    assert how == ["ldconfig", "reused", "ldconfig"]
    assert not (image / "etc" / "ld.so.cache").exists()  # the image layer is never written
    assert {"_ctypes", "nvct.base.linux"} <= loaded[0] & loaded[2]
    banned = {"nvct.base.linux", *READY_LD_CACHE} & loaded[1]
    assert not banned, f"the create with a reused ld.so.cache loads {sorted(banned)}"


def shim_over_overlay(
    factory: BundleFactory, container_id: str, config: Path, image: Path, script: str, env: str
) -> subprocess.CompletedProcess[str]:
    """``sh -c script`` run by runc through the shim, over a fresh overlay of ``image`` (so a
    write to the image layer would show), with ``env`` set."""
    with overlay_rootfs(image, image.parent / f"{image.name}-overlay") as merged:
        bundle = factory(["/bin/sh", "-c", script], [env], rootfs=merged)
        return run_runc(
            bundle, container_id, runtime=str(NVCT_BIN / "nvct-runtime"), env=shim_env(config)
        )


def test_image_ld_cache_merged_without_ldconfig(
    runc_bundle_factory: BundleFactory,
    glibc_rootfs_dir: Path,
    container_id: str,
    sim_driver: Any,
    tmp_path: Path,
) -> None:
    """An image with its own ld.so.cache gets it back with the driver's entries added, and
    no ldconfig runs: the container's loader finds libnvidia-ml.so.1 in that cache (not by
    searching directories), the image's own libraries are still there, and the image layer
    is never written."""
    config = write_nvct_config(tmp_path / "m" / "config.toml", sim_driver)
    image = tmp_path / "image"
    shutil.copytree(glibc_rootfs_dir, image, symlinks=True)
    before = (image / "etc" / "ld.so.cache").read_bytes()
    script = "LD_DEBUG=libs nvidia-smi -L 2>&1; grep -c libc.so.6 /etc/ld.so.cache"
    result = shim_over_overlay(
        runc_bundle_factory, container_id, config, image, script, "NVIDIA_VISIBLE_DEVICES=1"
    )
    assert result.returncode == 0, result.stderr
    assert smi_uuids(result.stdout) == [sim_driver.spec.gpus[1].uuid]
    lookup = result.stdout.split("find library=libnvidia-ml.so.1", 1)[1].split("calling", 1)[0]
    assert "search cache=/etc/ld.so.cache" in lookup
    # the driver's libraries, bound as one directory (inject.library-mounts = "directory")
    assert "trying file=/usr/lib/x86_64-linux-gnu/nvidia-driver/libnvidia-ml.so.1" in lookup
    assert "search path=" not in lookup  # found in the cache, not by a directory search
    assert result.stdout.strip().splitlines()[-1] != "0"  # the image's libc is still listed
    log = [json.loads(ln) for ln in (config.parent / "nvct.log").read_text().splitlines()]
    assert [e["ld_cache"] for e in log if e["event"] == "container_prepared"] == ["merged"]
    assert (image / "etc" / "ld.so.cache").read_bytes() == before


def test_a_later_ldconfig_in_the_container_keeps_the_driver(
    runc_bundle_factory: BundleFactory,
    glibc_rootfs_dir: Path,
    container_id: str,
    sim_driver: Any,
    tmp_path: Path,
) -> None:
    """The driver's library directory is listed in the container's /etc/ld.so.conf.d: an
    ldconfig the container runs itself (as a package install does) rebuilds its cache with
    the driver still in it, without failing on the read-only directory."""
    from integration.harness.images import copy_host_binary

    ldconfig = Path(shutil.which("ldconfig") or "/sbin/ldconfig")
    if b"ld-linux" in ldconfig.read_bytes()[:4096]:
        pytest.skip(f"{ldconfig} is not statically linked")
    config = write_nvct_config(tmp_path / "m" / "config.toml", sim_driver)
    image = tmp_path / "image"
    shutil.copytree(glibc_rootfs_dir, image, symlinks=True)
    inside = copy_host_binary(image, ldconfig, "/sbin/ldconfig")
    script = (
        f"cat /etc/ld.so.conf.d/000-nvidia-driver.conf; rm /etc/ld.so.cache; {inside}; "
        "echo rc=$?; LD_DEBUG=libs nvidia-smi -L 2>&1"
    )
    result = shim_over_overlay(
        runc_bundle_factory, container_id, config, image, script, "NVIDIA_VISIBLE_DEVICES=0"
    )
    assert result.returncode == 0, result.stderr
    assert "/usr/lib/x86_64-linux-gnu/nvidia-driver" in result.stdout.splitlines()
    assert "rc=0" in result.stdout.split()
    lookup = result.stdout.split("find library=libnvidia-ml.so.1", 1)[1].split("calling", 1)[0]
    assert "trying file=/usr/lib/x86_64-linux-gnu/nvidia-driver/libnvidia-ml.so.1" in lookup
    assert smi_uuids(result.stdout) == [sim_driver.spec.gpus[0].uuid]


def test_busybox_image_gets_a_fresh_ld_cache_without_ldconfig(
    runc_bundle_factory: BundleFactory, container_id: str, sim_driver: Any, tmp_path: Path
) -> None:
    """An image with no ld.so.cache and no library (static busybox) gets one holding the
    driver's libraries, written by nvct without an ldconfig run, and the image layer stays
    without one."""
    from integration.harness.images import busybox_rootfs

    config = write_nvct_config(tmp_path / "m" / "config.toml", sim_driver)
    image = busybox_rootfs(tmp_path / "image")
    script = "grep -c libnvidia-ml.so.1 /etc/ld.so.cache; ls /usr/lib64/nvidia-driver"
    result = shim_over_overlay(
        runc_bundle_factory, container_id, config, image, script, "NVIDIA_VISIBLE_DEVICES=0"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split()
    assert lines[0] != "0"  # the cache lists the driver's NVML
    assert "libnvidia-ml.so.1" in lines  # and its SONAME link is there
    log = [json.loads(ln) for ln in (config.parent / "nvct.log").read_text().splitlines()]
    assert [e["ld_cache"] for e in log if e["event"] == "container_prepared"] == ["fresh"]
    assert not (image / "etc" / "ld.so.cache").exists()


def test_busybox_image_gets_a_fresh_ld_cache_from_the_hook_alone(
    runc_bundle_factory: BundleFactory, container_id: str, sim_driver: Any, tmp_path: Path
) -> None:
    """The --gpus path: the hook checks the image once the library directory is mounted, and
    what that directory holds is the driver's, so no ldconfig runs there either."""
    from integration.harness.images import busybox_rootfs

    config = write_nvct_config(tmp_path / "m" / "config.toml", sim_driver)
    hook = gpus_hook(config)
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", "grep -c libnvidia-ml.so.1 /etc/ld.so.cache"],
        ["NVIDIA_VISIBLE_DEVICES=0"],
        extra={"hooks": {"prestart": [hook]}},
        rootfs=busybox_rootfs(tmp_path / "image"),
    )
    result = run_runc(bundle, container_id)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] != "0"  # the cache lists the driver's NVML
    log = [json.loads(ln) for ln in (config.parent / "nvct.log").read_text().splitlines()]
    assert [e["ld_cache"] for e in log if e["event"] == "container_configured"] == ["fresh"]


def unified_runc(tmp_path: Path, runtime: str = "runc") -> Path:
    """runc (or crun) in a mount namespace where /sys/fs/cgroup is this hybrid host's cgroup2
    hierarchy: the runtime then sees a unified (cgroup v2 only) host, puts the container in a
    v2 cgroup and attaches its deny-by-default device program there, as on current
    distributions."""
    unified = Path("/sys/fs/cgroup/unified")
    if not (unified / "cgroup.procs").exists():
        pytest.skip("needs this VM's hybrid cgroup2 mount at /sys/fs/cgroup/unified")
    wrapper = tmp_path / "runc-unified"
    wrapper.write_text(
        "#!/bin/sh\n"
        "exec unshare -m --propagation private sh -c "
        f'\'mount --bind {unified} /sys/fs/cgroup && exec runc "$@"\' runc "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


@pytest.mark.parametrize("how", HOOK_PATHS)
@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_hook_alone_on_cgroup_v2_grants_only_the_selected_gpu(
    runc_bundle_factory: BundleFactory,
    container_id: str,
    nvct_config: Path,
    sim_driver: Any,
    tmp_path: Path,
    hook_path: Callable[[str], Path],
    runtime: str,
    how: str,
) -> None:
    """``docker run --gpus device=1`` on plain runc, cgroup v2: /dev/nvidia1 opens (ENXIO from
    the simulated major, past the cgroup), /dev/nvidia0 is refused by the device program."""
    from integration.harness.bundles import runc_spec

    sim_dev = {
        "destination": "/simdev",
        "type": "bind",
        "source": str(sim_driver.dev_root / "dev"),
        "options": ["rbind", "ro"],
    }
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", "cat /proc/self/cgroup; cat /dev/nvidia1; cat /simdev/nvidia0"],
        ["NVIDIA_VISIBLE_DEVICES=1"],
        extra={
            "hooks": {"prestart": [gpus_hook(nvct_config, hook_path(how))]},
            "mounts": [*runc_spec()["mounts"], sim_dev],
        },
    )
    require(need_binary(runtime))
    result = run_runc(bundle, container_id, runtime=unified_runc(tmp_path, runtime))
    cgroups = dict(ln.split(":", 2)[1:] for ln in result.stdout.splitlines() if ln.count(":") >= 2)
    # In runc's v2 cgroup; the v1 devices controller (the root) allows all: only the BPF
    # programs decide.
    assert cgroups[""] == f"/{container_id}" and cgroups["devices"] == "/", result.stdout
    lines = result.stderr.splitlines()
    assert any("/dev/nvidia1" in ln and "No such device or address" in ln for ln in lines), lines
    assert any("/simdev/nvidia0" in ln and "Operation not permitted" in ln for ln in lines), lines
    assert not any("/dev/nvidia1" in ln and "not permitted" in ln for ln in lines), lines
    # The runtime runs in a mount namespace of its own (the wrapper's): the daemon declines a
    # hook whose paths name other files than its own, and the Python hook does the work.
    assert hook_via(nvct_config.parent / "nvct.log", container_id) == ["hook"]


def test_inputs_nvct_leaves_alone_are_logged_on_every_start(
    runc_bundle_factory: BundleFactory, container_id: str, sim_driver: Any, tmp_path: Path
) -> None:
    """Swarm's resource selects the GPU where configured (no NVIDIA_VISIBLE_DEVICES at all:
    the launcher must still hand the create to Python), and an unknown NVIDIA_* variable gets
    one log line per start, the cached second start included."""
    config = write_nvct_config(
        tmp_path / "swarm" / "config.toml",
        sim_driver,
        **{"request.swarm-resource": '["DOCKER_RESOURCE_GPU"]'},
    )
    gpu = sim_driver.spec.gpus[3]
    for n in range(2):
        bundle = runc_bundle_factory(
            ["/bin/sh", "-c", "nvidia-smi -L"],
            [f"DOCKER_RESOURCE_GPU={gpu.uuid}", "NVIDIA_FABULOUS=1"],
        )
        result = run_runc(
            bundle,
            f"{container_id}-{n}",
            runtime=str(NVCT_BIN / "nvct-runtime"),
            env=shim_env(config),
        )
        assert smi_uuids(result.stdout) == [gpu.uuid], result.stderr
    log = [json.loads(ln) for ln in (config.parent / "nvct.log").read_text().splitlines()]
    ignored = [e["why"] for e in log if e["event"] == "nvidia_input_ignored"]
    assert len(ignored) == 2 and all(w.startswith("NVIDIA_FABULOUS ignored") for w in ignored)
    prepared = [e for e in log if e["event"] == "container_prepared"]
    assert [e["cached"] for e in prepared] == [False, True]


def test_imported_nvidia_config_drives_the_shim(
    runc_bundle_factory: BundleFactory, container_id: str, sim_driver: Any, tmp_path: Path
) -> None:
    """An NVIDIA config.toml of a hardened cluster (driver under its own root, env refused from
    unprivileged containers, device plugin mounts accepted), imported: the shim follows it."""
    config = write_nvct_config(tmp_path / "nvct" / "config.toml", sim_driver)
    text = config.read_text()
    config.write_text(
        "\n".join(ln for ln in text.splitlines() if "-root" not in ln or "proc" in ln)
    )
    nvidia = tmp_path / "nvidia.toml"
    nvidia.write_text(
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
        "accept-nvidia-visible-devices-as-volume-mounts = true\n"
        f'[nvidia-container-cli]\nroot = "{sim_driver.driver_root}"\n'
    )
    done = subprocess.run(
        [
            str(NVCT_BIN / "nvct-cli"),
            "--config",
            str(config),
            "configure",
            "--import-nvidia-config",
            str(nvidia),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    shim = str(NVCT_BIN / "nvct-runtime")
    uuid = sim_driver.spec.gpus[1].uuid
    bundle = plugin_bundle(runc_bundle_factory, uuid)
    result = run_runc(bundle, container_id, runtime=shim, env=shim_env(config))
    assert smi_uuids(result.stdout) == [uuid], result.stderr


def run_through(
    path: str,
    factory: BundleFactory,
    container_id: str,
    config: Path,
    script: str,
    env: list[str],
    prepare: Any = None,
) -> subprocess.CompletedProcess[str]:
    """``sh -c script`` with GPUs through the shim (``path`` "shim") or the --gpus hook alone
    ("hook"); ``prepare(rootfs)`` changes the image first."""
    hooks = {} if path == "shim" else {"hooks": {"prestart": [gpus_hook(config)]}}
    bundle = factory(["/bin/sh", "-c", script], env, extra=hooks)
    if prepare is not None:
        prepare(bundle / "rootfs")
    if path == "shim":
        runtime = str(NVCT_BIN / "nvct-runtime")
        return run_runc(bundle, container_id, runtime=runtime, env=shim_env(config))
    return run_runc(bundle, container_id)


PROC_PROBE = (
    "ls /proc/driver/nvidia; ls /proc/driver/nvidia/gpus; ls /proc/driver/nvidia/capabilities;"
    " grep ModifyDeviceFiles /proc/driver/nvidia/params; touch /proc/driver/nvidia/x"
)


@pytest.mark.parametrize("path", ["shim", "hook"])
def test_proc_driver_shows_only_the_containers_gpus(
    runc_bundle_factory: BundleFactory,
    container_id: str,
    nvct_config: Path,
    sim_driver: Any,
    path: str,
    tmp_path: Path,
) -> None:
    """As libnvidia-container shows it: params with ModifyDeviceFiles: 0, version, registry,
    and gpus/<bus id> of the selected GPUs only, read-only (the shim through a createContainer
    hook with proc-driver = "always", the --gpus hook itself by default)."""
    gpus = [sim_driver.spec.gpus[i] for i in (1, 3)]
    env = [f"NVIDIA_VISIBLE_DEVICES={gpus[0].uuid},{gpus[1].uuid}"]
    config = nvct_config
    if path == "shim":
        config = write_nvct_config(
            tmp_path / "always" / "config.toml", sim_driver, **{"inject.proc-driver": '"always"'}
        )
    result = run_through(path, runc_bundle_factory, container_id, config, PROC_PROBE, env)
    out = result.stdout.split()
    host = Path(sim_driver.proc_root, "driver/nvidia/gpus")
    wanted = {p.name for p in host.iterdir() if any(p.name in g.pci_bus_id.lower() for g in gpus)}
    assert len(wanted) == 2 and len(list(host.iterdir())) == 4
    listed = {w for w in out if w.startswith("0000:")}
    assert listed == wanted, result.stdout + result.stderr
    assert {"params", "version", "registry", "gpus"} <= set(out)
    assert "ModifyDeviceFiles: 0" in result.stdout
    assert "Read-only file system" in result.stderr


def test_proc_driver_costs_the_shim_no_process_by_default(
    runc_bundle_factory: BundleFactory, container_id: str, nvct_config: Path, sim_driver: Any
) -> None:
    """proc-driver = "hook" (the default): nvct-runtime adds no createContainer hook (no
    process per start), and the container sees the host's /proc/driver/nvidia (none here)."""
    env = [f"NVIDIA_VISIBLE_DEVICES={sim_driver.spec.gpus[1].uuid}"]
    bundle = runc_bundle_factory(["/bin/sh", "-c", "ls /proc/driver/nvidia || true"], env)
    runtime = str(NVCT_BIN / "nvct-runtime")
    result = run_runc(bundle, container_id, runtime=runtime, env=shim_env(nvct_config))
    assert result.returncode == 0, result.stderr
    assert "params" not in result.stdout.split()
    prepared = json.loads((bundle / "config.json").read_text())
    assert not (prepared.get("hooks") or {}).get("createContainer")
    assert "/dev/nvidia1" in [d["path"] for d in prepared["linux"]["devices"]]


def _feature_config(tmp_path: Path, sim: Any) -> Path:
    """nvct's config on a copy of ``sim`` that has the optional features' nodes."""
    from tests.conftest import with_feature_nodes

    dev_root, proc_root = with_feature_nodes(sim, tmp_path)
    config = write_nvct_config(tmp_path / "feat" / "config.toml", sim)
    lines = [
        ln for ln in config.read_text().splitlines() if not ln.startswith(("dev-root", "proc-root"))
    ]
    config.write_text(f'dev-root = "{dev_root}"\nproc-root = "{proc_root}"\n' + "\n".join(lines))
    return config


def test_imex_channels_and_gated_features_reach_the_container(
    runc_bundle_factory: BundleFactory, container_id: str, sim_driver: Any, tmp_path: Path
) -> None:
    config = _feature_config(tmp_path, sim_driver)
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", "ls -l /dev/nvidia-caps-imex-channels /dev/gdrdrv /dev/nvidia-fs*"],
        ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=1,7", "NVIDIA_GDRCOPY=enabled"],
    )
    result = run_runc(
        bundle, container_id, runtime=str(NVCT_BIN / "nvct-runtime"), env=shim_env(config)
    )
    out = result.stdout
    assert re.search(r"^c.* 234, +1 .*channel1$", out, re.MULTILINE), out + result.stderr
    assert re.search(r"^c.* 234, +7 .*channel7$", out, re.MULTILINE), out  # made from the major
    assert re.search(r"^c.* 237, +0 .*/dev/gdrdrv$", out, re.MULTILINE), out
    assert "/dev/nvidia-fs*: No such file" in result.stderr  # GDS was not asked for


@pytest.mark.parametrize("privileged", [True, False])
def test_mig_management_caps_only_for_privileged_containers(
    runc_bundle_factory: BundleFactory, container_id: str, tmp_path: Path, privileged: bool
) -> None:
    from integration.simdriver import cached_driver, preset

    sim = cached_driver(preset("a100x8-570-mig"), Path("/tmp/nvct-test-simdrivers"))
    # the MIG capability's procfs file comes with /proc/driver/nvidia as NVIDIA shows it, which
    # nvct-runtime does with proc-driver = "always"
    config = write_nvct_config(
        tmp_path / "mig" / "config.toml", sim, **{"inject.proc-driver": '"always"'}
    )
    caps = ["CAP_SYS_ADMIN", "CAP_KILL"] if privileged else ["CAP_KILL"]
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", "ls /dev/nvidia-caps; cat /proc/driver/nvidia/capabilities/mig/config"],
        ["NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_MIG_CONFIG_DEVICES=all"],
        extra={
            "process": {"capabilities": {"bounding": caps, "effective": caps, "permitted": caps}}
        },
    )
    result = run_runc(
        bundle, container_id, runtime=str(NVCT_BIN / "nvct-runtime"), env=shim_env(config)
    )
    if privileged:
        assert result.returncode == 0, result.stderr
        assert "nvidia-cap1" in result.stdout.split()
        assert "DeviceFileMinor: 1" in result.stdout
    else:
        assert result.returncode != 0
        assert "NVIDIA_MIG_CONFIG_DEVICES is set in an unprivileged container" in result.stderr
        assert container_id not in runc_list()


PROBE_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    struct link_map *map = NULL;
    if (h == NULL || dlinfo(h, RTLD_DI_LINKMAP, &map) != 0) {
        printf("dlopen failed: %s\n", dlerror());
        return 1;
    }
    printf("loaded %s\n", map->l_name);
    return 0;
}
"""


def _compat_rootfs(rootfs: Path, tmp_path: Path, version: str) -> None:
    """An image with a forward-compatible libcuda.so.<version> and a dlopen probe."""
    compat = rootfs / "usr/local/cuda/compat"
    compat.mkdir(parents=True)
    (tmp_path / "stub.c").write_text("int cuInit(unsigned int f) { return f; }\n")
    (tmp_path / "probe.c").write_text(PROBE_C)
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            str(compat / f"libcuda.so.{version}"),
            str(tmp_path / "stub.c"),
        ],
        check=True,
    )
    (compat / "libcuda.so.1").symlink_to(f"libcuda.so.{version}")
    (rootfs / "sbin").mkdir(exist_ok=True)
    shutil.copy2("/sbin/ldconfig", rootfs / "sbin/ldconfig")  # static: runs in the image
    subprocess.run(
        ["gcc", "-o", str(rootfs / "usr/bin/cudaprobe"), str(tmp_path / "probe.c")], check=True
    )


@pytest.mark.parametrize(
    ("path", "version", "mode", "compat_first"),
    [
        ("shim", "999.1.2", "ldconfig", True),
        ("hook", "999.1.2", "ldconfig", True),
        ("shim", "999.1.2", "off", False),
        ("shim", "535.104.05", "ldconfig", False),
    ],
)
def test_forward_compat_libcuda_first_only_when_newer(
    runc_bundle_factory: BundleFactory,
    container_id: str,
    sim_driver: Any,
    tmp_path: Path,
    path: str,
    version: str,
    mode: str,
    compat_first: bool,
) -> None:
    """The loader (dlopen("libcuda.so.1") in the container) gets the image's compat libcuda
    when it is newer than the host's 550.54.15 on data-center GPUs, and the host's otherwise;
    an ldconfig the container runs later keeps that order."""
    require(need_binary("gcc"))
    config = write_nvct_config(
        tmp_path / "compat" / "config.toml", sim_driver, **{"inject.cuda-compat": f'"{mode}"'}
    )
    script = "cudaprobe; /sbin/ldconfig 2>/dev/null && cudaprobe; cat /etc/ld.so.conf.d/*"
    env = ["NVIDIA_VISIBLE_DEVICES=0"]
    result = run_through(
        path,
        runc_bundle_factory,
        container_id,
        config,
        script,
        env,
        prepare=lambda rootfs: _compat_rootfs(rootfs, tmp_path, version),
    )
    loaded = [ln.split()[1] for ln in result.stdout.splitlines() if ln.startswith("loaded ")]
    assert loaded, result.stdout + result.stderr
    compat = "/usr/local/cuda/compat/libcuda.so.1"
    if compat_first:
        # Twice: as nvct left the ld.so.cache, and after the container's own ldconfig.
        assert loaded == [compat, compat], result.stdout
    else:
        assert compat not in loaded and all(p.endswith("libcuda.so.1") for p in loaded), loaded
    log = [json.loads(ln) for ln in (config.parent / "nvct.log").read_text().splitlines()]
    done = [e for e in log if e["event"] in ("container_prepared", "container_configured")]
    said = compat[:-1] if compat_first else "off" if mode == "off" else "the host driver's"
    assert done[-1]["cuda_compat"].startswith(said), done


@pytest.mark.parametrize("target", ["/opt/fw/", "/opt/fw/.", "//opt//fw/"])
def test_the_native_hook_makes_what_a_dangling_link_names_as_python_does(
    runc_bundle_factory: BundleFactory,
    sim_driver: Any,
    tmp_path: Path,
    native_hook_path: Path,
    target: str,
) -> None:
    """An image whose /lib/firmware is a dangling link to a directory spelled with a trailing
    slash, a "." or doubled slashes: the native hook makes that directory inside the root, as
    the Python hook's Rootfs.makedirs does, and mounts the firmware through the link."""
    config = write_nvct_config(tmp_path / "cfg" / "config.toml", sim_driver)
    log = config.parent / "nvct.log"
    hook = {"hooks": {"prestart": [gpus_hook(config, native_hook_path)]}}
    env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"]
    script = "ls /lib/firmware/nvidia/*; ls -d /opt/fw/nvidia"
    outputs, via = [], []
    for i, dangling in enumerate([False, True]):
        cid = f"nvct-hook-dangling-{os.getpid()}-{i}"
        bundle = runc_bundle_factory(["/bin/sh", "-c", script], env, extra=hook)
        if dangling:
            assert not (bundle / "rootfs/lib").is_symlink()  # the rmtree stays in the image
            firmware = bundle / "rootfs/lib/firmware"
            if firmware.exists() and not firmware.is_symlink():
                shutil.rmtree(firmware)
            firmware.parent.mkdir(parents=True, exist_ok=True)
            firmware.symlink_to(target)
        result = run_runc(bundle, cid)
        outputs.append(result)
        via += hook_via(log, cid)
    assert via == ["hook", "native"]
    first, second = outputs
    assert "gsp" in first.stdout, first.stderr
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0] == first.stdout.splitlines()[0]  # the firmware's files
    assert "/opt/fw/nvidia" in second.stdout.split()


def test_the_native_hook_reads_the_image_as_the_container_has_it(
    runc_bundle_factory: BundleFactory,
    sim_driver: Any,
    tmp_path: Path,
    native_hook_path: Path,
) -> None:
    """A volume over /etc brings its own ld.so.cache (the image's, plus a library of the
    volume's). The native hook has an entry for this kind of container (written for the
    plain image), yet it reads the ld.so.cache the container sees, as the Python hook does:
    the driver's entries are merged into the volume's cache, whose own entry stays, and not
    into the image's, which the volume hides."""
    from nvct.base.ldcache_format import add_entries

    config = write_nvct_config(tmp_path / "cfg" / "config.toml", sim_driver)
    log = config.parent / "nvct.log"
    hook = {"hooks": {"prestart": [gpus_hook(config, native_hook_path)]}}
    env = ["NVIDIA_VISIBLE_DEVICES=0"]
    volume = tmp_path / "etc-volume"
    via = []
    for i in range(3):
        cid = f"nvct-hook-volume-{os.getpid()}-{i}"
        bundle = runc_bundle_factory(["/bin/sh", "-c", "nvidia-smi -L"], env, extra=hook)
        if i == 2:
            shutil.copytree(bundle / "rootfs/etc", volume, symlinks=True)
            theirs = add_entries(
                (volume / "ld.so.cache").read_bytes(),
                [("libvolume.so.1", "/opt/volume/libvolume.so.1", 0x303)],
            )
            assert theirs is not None
            (volume / "ld.so.cache").write_bytes(theirs)
            spec = json.loads((bundle / "config.json").read_text())
            spec["mounts"].append(
                {"destination": "/etc", "type": "bind", "source": str(volume), "options": ["rbind"]}
            )
            (bundle / "config.json").write_text(json.dumps(spec))
        result = run_runc(bundle, cid)
        assert result.returncode == 0, result.stderr
        assert smi_uuids(result.stdout) == [sim_driver.spec.gpus[0].uuid]
        via += hook_via(log, cid)
    assert via == ["hook", "native", "native"]
    merged = (volume / "ld.so.cache").read_bytes()
    assert b"libvolume.so.1" in merged and b"libcuda.so.1" in merged
    image_cache = (bundle / "rootfs/etc/ld.so.cache").read_bytes()
    assert b"libcuda.so.1" not in image_cache  # the image's, under the volume: untouched


@pytest.mark.parametrize("path", ["shim", "hook"])
def test_graphics_container_sees_its_gpus_drm_nodes_and_the_icd(
    runc_bundle_factory: BundleFactory,
    container_id: str,
    sim_driver: Any,
    tmp_path: Path,
    path: str,
) -> None:
    """/dev/dri nodes by bus id, the Vulkan ICD, and the EGL GBM platform library its JSON
    file names, in the container's ld.so.cache (read by a static ldconfig -p in the image)."""
    config = _feature_config(tmp_path, sim_driver)
    script = (
        "ls -l /dev/dri; cat /etc/vulkan/icd.d/nvidia_icd.json >/dev/null && echo icd-ok;"
        " grep -o 'libnvidia-egl-gbm.so.1' /usr/share/egl/egl_external_platform.d/*gbm*;"
        " /sbin/ldconfig -p"
    )
    env = ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=graphics"]

    def with_ldconfig(rootfs: Path) -> None:
        shutil.copy2("/sbin/ldconfig", rootfs / "sbin/ldconfig")

    result = run_through(
        path, runc_bundle_factory, container_id, config, script, env, prepare=with_ldconfig
    )
    out = result.stdout
    assert re.search(r"^c.* 226, +1 .*card1$", out, re.MULTILINE), out + result.stderr
    assert re.search(r"^c.* 226, +129 .*renderD129$", out, re.MULTILINE), out
    assert "icd-ok" in out
    assert re.search(r"^\s+libnvidia-egl-gbm\.so\.1 \(libc6[^)]*\) => /\S+", out, re.MULTILINE), out


@pytest.mark.parametrize("library_mounts", ["directory", "files"])
def test_gbm_backend_link_resolves_in_the_container(
    runc_bundle_factory: BundleFactory,
    container_id: str,
    sim_driver: Any,
    tmp_path: Path,
    library_mounts: str,
) -> None:
    """Mesa's libgbm finds NVIDIA's backend at <libdir>/gbm/nvidia-drm_gbm.so: a link to the
    allocator, wherever the driver's libraries are bound (one directory, or file by file)."""
    config = write_nvct_config(
        tmp_path / "gbm" / "config.toml",
        sim_driver,
        **{"inject.library-mounts": f'"{library_mounts}"'},
    )
    from nvct.host.arch import host_arch

    gbm = f"/usr/lib/{host_arch().multiarch64}/gbm/nvidia-drm_gbm.so"
    script = f"readlink {gbm}; test -f {gbm} && echo resolves"
    env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=graphics,compute"]
    result = run_through("shim", runc_bundle_factory, container_id, config, script, env)
    assert "resolves" in result.stdout, result.stdout + result.stderr
    assert result.stdout.splitlines()[0].endswith("/libnvidia-allocator.so.1")


def test_a_driver_under_its_own_prefix_and_an_ldconfig_wrapper_give_a_working_gpu(
    runc_bundle_factory: BundleFactory,
    glibc_rootfs_dir: Path,
    container_id: str,
    sim_driver: Any,
    tmp_path: Path,
) -> None:
    """The layout of the real GPU machine nvct was checked on: the driver under
    /usr/local/nvidia with wrapper scripts in /usr/bin, and Ubuntu's /sbin/ldconfig wrapping
    ldconfig.real. An image whose ld.so.cache cannot be merged makes nvct run ldconfig."""
    from integration.simdriver.layouts import own_prefix

    ldconfig = Path(os.path.realpath(shutil.which("ldconfig") or "/sbin/ldconfig"))
    if b"ld-linux" in ldconfig.read_bytes()[:4096]:
        pytest.skip(f"{ldconfig} is not statically linked")
    root = tmp_path / "driver"
    subprocess.run(["cp", "-a", str(sim_driver.driver_root), str(root)], check=True)
    own_prefix(root)
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    (sbin / "ldconfig").write_text('#!/bin/sh\nexec /sbin/ldconfig.real "$@"\n')
    (sbin / "ldconfig").chmod(0o755)
    shutil.copy(ldconfig, sbin / "ldconfig.real")
    config = tmp_path / "c" / "config.toml"
    config.parent.mkdir()
    config.write_text(
        f'driver-root = "{root}"\ndev-root = "{sim_driver.dev_root}"\n'
        f'proc-root = "{sim_driver.proc_root}"\nldconfig = "{sbin / "ldconfig"}"\n'
        f'cache-dir = "{tmp_path / "cache"}"\n[log]\nfile = "{tmp_path / "nvct.log"}"\n'
    )
    image = tmp_path / "image"
    shutil.copytree(glibc_rootfs_dir, image, symlinks=True)
    (image / "etc/ld.so.cache").write_bytes(b"not a cache")  # only ldconfig can decide
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", "nvidia-smi -L"], ["NVIDIA_VISIBLE_DEVICES=1"], rootfs=image
    )
    result = run_runc(
        bundle, container_id, runtime=str(NVCT_BIN / "nvct-runtime"), env=shim_env(config)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert smi_uuids(result.stdout) == [sim_driver.spec.gpus[1].uuid]
    prepared = [
        json.loads(line)
        for line in (tmp_path / "nvct.log").read_text().splitlines()
        if '"container_prepared"' in line
    ]
    assert prepared and prepared[-1]["ld_cache"] == "ldconfig", prepared


def test_the_second_container_of_a_kind_is_prepared_by_the_launcher_alone(
    runc_bundle_factory: BundleFactory, sim_driver: Any, tmp_path: Path
) -> None:
    """The first container of a kind through the Python shim, which writes the native entry;
    the second through the launcher's native create: the same GPU, device node, driver in the
    ld.so.cache and ld.so.conf.d entry, seen from inside a real runc container."""
    config = write_nvct_config(tmp_path / "native" / "config.toml", sim_driver)
    shim = str(NVCT_BIN / "nvct-runtime")
    script = (
        "nvidia-smi -L; ls /dev; grep -c libnvidia-ml.so.1 /etc/ld.so.cache; "
        "cat /etc/ld.so.conf.d/000-nvidia-driver.conf"
    )
    outputs = []
    for name in ("first", "second"):
        bundle = runc_bundle_factory(["/bin/sh", "-c", script], ["NVIDIA_VISIBLE_DEVICES=2"])
        result = run_runc(
            bundle, f"native-{name}-{os.getpid()}", runtime=shim, env=shim_env(config)
        )
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout)
    log = [json.loads(line) for line in (config.parent / "nvct.log").read_text().splitlines()]
    prepared = [e for e in log if e["event"] == "container_prepared"]
    assert [e["via"] for e in prepared] == ["shim", "native"]
    assert prepared[1]["ld_cache"] == "merged" and prepared[1]["gpus"] == ["GPU 2"]
    assert outputs[0] == outputs[1]
    assert smi_uuids(outputs[1]) == [sim_driver.spec.gpus[2].uuid]
    assert "nvidia2" in outputs[1].split() and "nvidia0" not in outputs[1].split()
    assert "nvidia-driver" in outputs[1]
