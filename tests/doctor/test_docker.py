"""nvct-cli doctor: each checked condition broken on purpose, on the simulated driver and on
temporary trees standing for /etc, /proc, /sys and /snap, with fake docker/containerd CLIs."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from nvct.doctor import (
    FAIL,
    PASS,
    SKIP,
    WARN,
    CheckResult,
    Completed,
    DoctorContext,
    binaries,
    cdi,
    cgroup,
    containerd,
    crio,
    devices,
    docker,
    driver,
    libdir,
    run_doctor,
)
from tests.conftest import sim_config
from tests.test_cli import cli, roots

NOW = time.time()
BTIME = int(NOW) - 1000
DAEMON_START = BTIME + 500  # the fake daemons started 500 s before the tests


# ---------------------------------------------------------------------------- helpers


class FakeCommands:
    """Answers for ``docker info`` / ``containerd config dump`` / the hook import check."""

    def __init__(self, answers: dict[str, Completed] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> Completed:
        self.calls.append(list(argv))
        for key, answer in self.answers.items():
            if key in " ".join(argv):
                return answer
        if "-c" in argv and "import nvct.hook.__main__" in argv:
            return Completed(0, "", "")
        return Completed(127, "", f"{argv[0]}: not found")


def docker_info(**fields: Any) -> Completed:
    info = {
        "Runtimes": {"runc": {"path": "runc"}},
        "DefaultRuntime": "runc",
        "CgroupDriver": "systemd",
        "CgroupVersion": "2",
        "SecurityOptions": ["name=seccomp,profile=builtin", "name=cgroupns"],
    }
    info.update(fields)
    return Completed(0, json.dumps(info), "")


def fake_process(
    proc: Path,
    pid: int,
    name: str,
    argv: Sequence[str],
    *,
    uid: int = 0,
    exe: str | None = None,
    start: float = DAEMON_START,
) -> None:
    """A /proc/<pid> entry as doctor reads it (stat, status, cmdline, comm, exe)."""
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "stat").write_text(f"cpu  1 2 3 4\nbtime {BTIME}\n")
    base = proc / str(pid)
    base.mkdir(parents=True)
    ticks = round((start - BTIME) * os.sysconf("SC_CLK_TCK"))
    fields = ["S", *["0"] * 18, str(ticks), "0"]
    (base / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    (base / "status").write_text(f"Name:\t{name}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (base / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (base / "comm").write_text(name + "\n")
    (base / "exe").symlink_to(exe or argv[0])


def set_mtime(path: Path, when: float) -> None:
    os.utime(path, (when, when))


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def context(tmp: Path, config: Any = None, **kw: Any) -> DoctorContext:
    """A context whose every host path is under ``tmp`` (and nothing is installed)."""
    (tmp / "proc").mkdir(parents=True, exist_ok=True)
    values: dict[str, Any] = {
        "config": config,
        "docker_pidfile": tmp / "docker.pid",
        "containerd_config": tmp / "containerd/config.toml",
        "crio_config": tmp / "crio/crio.conf",
        "crio_dropin_dir": tmp / "crio/crio.conf.d",
        "cdi_dirs": (tmp / "cdi",),
        "sysfs_root": tmp / "sys",
        "host_proc": tmp / "proc",
        "snap_dir": tmp / "snap",
        "env": {},
        "run": FakeCommands(),
        "which": lambda name: None,
    }
    values.update(kw)
    if values["config"] is None:
        from nvct.config import Config

        values["config"] = Config()
    return DoctorContext(**values)


def by_name(results: Sequence[CheckResult], name: str) -> CheckResult:
    found = [r for r in results if r.name == name]
    assert len(found) == 1, results
    return found[0]


def healthy_dev_root(sim: Any, tmp: Path, **kw: Any) -> Path:
    from integration.simdriver import make_dev_nodes

    root = tmp / "devroot"
    make_dev_nodes(sim.spec, root, **kw)
    devices.fix_dev_char_links(root)
    return root


def sim_ctx(sim: Any, tmp: Path, **kw: Any) -> DoctorContext:
    overrides = {k: kw.pop(k) for k in ("dev_root", "proc_root", "driver_root") if k in kw}
    return context(tmp, sim_config(sim, tmp, **overrides), **kw)


def facts_of(ctx: DoctorContext) -> driver.DriverFacts:
    facts, result = driver.probe_nvml(ctx)
    assert result.status == PASS, result
    return facts


# ---------------------------------------------------------------------------- driver


@pytest.mark.root
def test_nvml_reports_the_driver_always_rediscovered(h100x4, tmp_path) -> None:
    ctx = sim_ctx(h100x4, tmp_path)
    facts, result = driver.probe_nvml(ctx)
    assert result.status == PASS
    assert "reports driver 550.54.15, CUDA 12.4, 4 GPU(s)" in result.message
    assert facts.driver_version == "550.54.15" and len(facts.gpus) == 4
    assert not (tmp_path / "cache").exists()  # doctor never reads or writes the cache
    assert driver.check_kernel_module(ctx, facts).status == PASS


def test_no_driver_root_fails_nvml_and_ldcache(tmp_path) -> None:
    root = tmp_path / "empty-driver"
    (root / "etc").mkdir(parents=True)
    (root / "etc/ld.so.conf").write_text("")
    subprocess.run(["ldconfig", "-X", "-r", str(root)], check=True)
    ctx = context(tmp_path, sim_config_like(root, tmp_path))
    facts, nvml = driver.probe_nvml(ctx)
    assert nvml.status == FAIL and "lists no 64-bit libnvidia-ml.so.1" in nvml.message
    assert "driver-root" in nvml.fix
    ldcache = driver.check_ldcache(ctx, facts)
    assert ldcache.status == FAIL
    assert "no libnvidia-ml.so.1; no libcuda.so.1" in ldcache.message
    assert ldcache.fix.startswith(f"run ldconfig -r {root}")


def sim_config_like(root: Path, tmp: Path) -> Any:
    from nvct.config import Config

    return Config(driver_root=root, dev_root=root, proc_root=root / "proc", cache_dir=str(tmp))


@pytest.mark.root
def test_ldcache_without_libcuda_fails(h100x4, tmp_path) -> None:
    copy = tmp_path / "driver"
    shutil.copytree(
        h100x4.driver_root,
        copy,
        symlinks=True,
        ignore=lambda d, names: (
            [n for n in names if n in ("dev", "proc", "var", "tmp")]
            if Path(d) == h100x4.driver_root
            else []
        ),
    )
    for lib in copy.rglob("libcuda.so*"):
        lib.unlink()
    subprocess.run(["ldconfig", "-X", "-r", str(copy)], check=True)
    ctx = sim_ctx(h100x4, tmp_path, driver_root=copy)
    facts = facts_of(ctx)  # NVML is still there
    result = driver.check_ldcache(ctx, facts)
    assert result.status == FAIL
    assert "lists no libcuda.so.1 of driver 550.54.15" in result.message
    assert result.fix.startswith(f"run ldconfig -r {copy}")


@pytest.mark.root
def test_ldcache_warns_about_an_old_drivers_libcuda_listed_first(h100x4, tmp_path) -> None:
    ctx = sim_ctx(h100x4, tmp_path)
    result = driver.check_ldcache(ctx, facts_of(ctx))
    assert result.status == WARN
    assert "libcuda.so.1 resolves first to /usr/lib/nvidia-535/libcuda.so.1" in result.message
    assert "remove the old driver's libraries" in result.fix


@pytest.mark.root
def test_kernel_module_mismatch_fails_with_reboot(h100x4, tmp_path) -> None:
    proc = tmp_path / "driver-proc"
    shutil.copytree(h100x4.proc_root, proc)
    version = proc / "driver/nvidia/version"
    version.chmod(0o644)
    version.write_text(version.read_text().replace("550.54.15", "545.23.08"))
    ctx = sim_ctx(h100x4, tmp_path, proc_root=proc)
    result = driver.check_kernel_module(ctx, facts_of(ctx))
    assert result.status == FAIL
    assert "kernel module 545.23.08, user-space driver (NVML) 550.54.15" in result.message
    assert "reboot" in result.fix


@pytest.mark.root
def test_persistence_off_on_four_gpus_warns(h100x4, a100mig, tmp_path) -> None:
    ctx = sim_ctx(h100x4, tmp_path)
    result = driver.check_persistence(ctx, facts_of(ctx))
    assert result.status == WARN
    assert "persistence mode is off on 4 of 4 GPUs" in result.message
    assert "nvidia-smi -pm 1" in result.fix and "nvidia-persistenced" in result.fix
    relaxed = sim_ctx(h100x4, tmp_path, many_gpus=8)
    assert driver.check_persistence(relaxed, facts_of(relaxed)).status == PASS
    eight = sim_ctx(a100mig, tmp_path / "a")
    assert "off on 8 of 8 GPUs" in driver.check_persistence(eight, facts_of(eight)).message


# ---------------------------------------------------------------------------- library dir


@pytest.mark.root
def test_library_dir_needs_a_root_only_cache_dir_on_the_libraries_filesystem(
    h100x4, tmp_path
) -> None:
    def check(**config: Any) -> CheckResult:
        return libdir.check_library_dir(context(tmp_path, sim_config(h100x4, tmp_path, **config)))

    ok = check()
    assert ok.status == PASS and "bound as one directory" in ok.message
    assert check(library_mounts="files").status == PASS
    assert check(cache_dir="").status == WARN
    shared = tmp_path / "shared-cache"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    writable = check(cache_dir=str(shared))
    assert writable.status == FAIL and "writable by others than root" in writable.message
    assert writable.fix == f"chown root:root {shared} && chmod go-w {shared}"
    shm = Path("/dev/shm")
    if shm.is_dir() and shm.stat().st_dev != Path(h100x4.driver_root).stat().st_dev:
        other = shm / f"nvct-doctor-test-{os.getpid()}"
        other.mkdir(mode=0o755)
        try:
            elsewhere = check(cache_dir=str(other))
        finally:
            other.rmdir()
        assert elsewhere.status == WARN and "another filesystem" in elsewhere.message


# ---------------------------------------------------------------------------- device nodes


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


# ---------------------------------------------------------------------------- nvct programs


def test_programs_missing(tmp_path) -> None:
    from nvct.config import Config

    config = Config(
        hook_path=str(tmp_path / "nope/nvct-hook"),
        low_level_runtimes=("runc-none", str(tmp_path / "crun")),
        ldconfig=tmp_path / "ldconfig",
    )
    ctx = context(tmp_path, config)
    runtime = binaries.check_runtime(ctx)
    assert runtime.status == FAIL and "nvct-runtime is not on PATH" in runtime.message
    hook = binaries.check_hook(ctx)
    assert hook.status == FAIL and "hook-path" in hook.message
    low = binaries.check_low_level(ctx)
    assert low.status == FAIL and "install runc" in low.fix
    ldconfig = binaries.check_ldconfig(ctx)
    assert ldconfig.status == FAIL and "command -v ldconfig" in ldconfig.fix


def test_hook_runs_with_the_runtimes_interpreter(tmp_path) -> None:
    python = executable(tmp_path / "venv/bin/python3")
    runtime = tmp_path / "venv/bin/nvct-runtime"
    runtime.write_text(f"#!{python}\nimport sys\n")
    runtime.chmod(0o755)
    broken = FakeCommands(
        {"import nvct.hook": Completed(1, "", "ModuleNotFoundError: No module named 'nvct'\n")}
    )
    which = {"nvct-runtime": str(runtime)}.get
    ctx = context(tmp_path, run=broken, which=which)
    assert binaries.check_runtime(ctx).status == PASS
    result = binaries.check_hook(ctx)
    assert result.status == FAIL and f"{python} -I -m nvct.hook" in result.message
    assert "No module named 'nvct'" in result.message
    assert broken.calls[-1][0] == str(python)
    ok = context(tmp_path, which=which)
    assert binaries.check_hook(ok).status == PASS


# ---------------------------------------------------------------------------- docker


def docker_setup(
    tmp: Path,
    daemon_json: dict[str, Any] | None,
    *,
    argv_extra: Sequence[str] = (),
    uid: int = 0,
    exe: str = "/usr/bin/dockerd",
    info: Completed | None = None,
    config_mtime: float = DAEMON_START - 60,
    **kw: Any,
) -> tuple[DoctorContext, Path]:
    config = tmp / "etc/docker/daemon.json"
    if daemon_json is not None:
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(daemon_json))
        set_mtime(config, config_mtime)
    proc = tmp / "proc"
    fake_process(
        proc, 4242, "dockerd", [exe, f"--config-file={config}", *argv_extra], uid=uid, exe=exe
    )
    (tmp / "docker.pid").write_text("4242\n")
    run = FakeCommands({"info --format": info or docker_info()})
    return context(tmp, run=run, **kw), config


def nvct_runtime_json(tmp: Path) -> dict[str, Any]:
    runtime = executable(tmp / "usr/bin/nvct-runtime")
    return {"runtimes": {"nvidia": {"path": str(runtime), "args": []}}, "log-level": "warn"}


def run_docker(ctx: DoctorContext) -> list[CheckResult]:
    return docker.check_docker(ctx, docker.gather(ctx))


def test_docker_absent_is_skipped(tmp_path) -> None:
    assert [r.status for r in run_docker(context(tmp_path))] == [SKIP]


def test_daemon_json_without_nvct_fails(tmp_path) -> None:
    ctx, config = docker_setup(
        tmp_path, {"log-level": "warn", "runtimes": {"crun": {"path": "/usr/bin/crun"}}}
    )
    results = run_docker(ctx)
    result = by_name(results, docker.CONFIG)
    assert result.status == FAIL
    assert (
        f"{config} registers no runtime whose path is nvct-runtime (runtimes: crun)"
        in result.message
    )
    assert result.fix == (
        f"nvct-cli configure --runtime docker --config {config}, then restart dockerd: "
        "systemctl restart docker"
    )
    daemon = by_name(results, docker.DAEMON)
    assert daemon.status == FAIL and "its runtimes: runc" in daemon.message


def test_daemon_json_found_from_the_running_daemons_flag(tmp_path) -> None:
    info = docker_info(Runtimes={"runc": {"path": "runc"}, "nvidia": {"path": "/x/nvct-runtime"}})
    ctx, config = docker_setup(tmp_path, nvct_runtime_json(tmp_path), info=info)
    results = run_docker(ctx)
    assert [r.status for r in results] == [PASS] * 5, results
    assert f"{config} (--config-file of dockerd (pid 4242))" in results[0].message
    assert "running dockerd knows runtime 'nvidia' -> /x/nvct-runtime" in results[1].message


def test_config_names_a_missing_runtime_binary(tmp_path) -> None:
    ctx, _ = docker_setup(tmp_path, {"runtimes": {"nvidia": {"path": "/gone/nvct-runtime"}}})
    result = by_name(run_docker(ctx), docker.CONFIG)
    assert result.status == FAIL and "points at /gone/nvct-runtime" in result.message


def test_other_daemon_json_than_the_daemon_reads(tmp_path) -> None:
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps(nvct_runtime_json(tmp_path)))
    ctx, config = docker_setup(tmp_path, {}, docker_config=mine)
    result = by_name(run_docker(ctx), docker.CONFIG)
    assert result.status == FAIL
    assert f"dockerd (pid 4242) reads {config}, not {mine}" in result.message
    assert f"--config {config}" in result.fix


def test_config_changed_after_daemon_start_needs_restart(tmp_path) -> None:
    ctx, config = docker_setup(
        tmp_path, nvct_runtime_json(tmp_path), config_mtime=DAEMON_START + 120
    )
    results = run_docker(ctx)
    daemon = by_name(results, docker.DAEMON)
    assert daemon.status == FAIL
    assert "unknown or invalid runtime name" in daemon.message
    assert daemon.fix.startswith("restart dockerd: systemctl restart docker")
    restart = by_name(results, docker.RESTART)
    assert restart.status == FAIL and restart.message.startswith(
        f"restart needed: {config} changed"
    )
    assert "after dockerd (pid 4242) started" in restart.message
    assert restart.fix == "restart dockerd: systemctl restart docker"


def test_config_changed_but_daemon_reloaded_is_a_warning(tmp_path) -> None:
    info = docker_info(Runtimes={"nvidia": {"path": "/usr/bin/nvct-runtime"}})
    ctx, _ = docker_setup(
        tmp_path, nvct_runtime_json(tmp_path), config_mtime=DAEMON_START + 120, info=info
    )
    assert by_name(run_docker(ctx), docker.RESTART).status == WARN


def test_unreachable_daemon_warns(tmp_path) -> None:
    down = Completed(1, "", "Cannot connect to the Docker daemon at unix:///x.sock.\n")
    ctx, _ = docker_setup(tmp_path, nvct_runtime_json(tmp_path), info=down)
    daemon = by_name(run_docker(ctx), docker.DAEMON)
    assert daemon.status == WARN and "Cannot connect to the Docker daemon" in daemon.message


def test_snap_docker_warns(tmp_path) -> None:
    exe = "/snap/docker/2915/bin/dockerd"
    ctx, _ = docker_setup(tmp_path, None, exe=exe)
    # Without --config-file the snap's own daemon.json is the one that matters.
    (tmp_path / "proc/4242/cmdline").write_bytes(exe.encode() + b"\0")
    state = docker.gather(ctx)
    assert state is not None and state.config_path == docker.SNAP_CONFIG
    result = docker.check_snap(ctx, state)
    assert result.status == WARN and exe in result.message
    assert "snap remove docker" in result.fix
    only_bin = context(tmp_path / "b", which={"docker": "/snap/bin/docker"}.get)
    executable(tmp_path / "b/snap/bin/docker")
    assert by_name(run_docker(only_bin), docker.SNAP).status == WARN


def test_rootless_daemon_warns(tmp_path) -> None:
    ctx, _ = docker_setup(tmp_path, nvct_runtime_json(tmp_path), uid=1000)
    result = by_name(run_docker(ctx), docker.ROOTLESS)
    assert result.status == WARN and "dockerd (pid 4242) runs as uid 1000" in result.message
    assert "--device nvidia.com/gpu=all" in result.fix
    by_info = docker_info(SecurityOptions=["name=seccomp", "name=rootless"])
    ctx, _ = docker_setup(tmp_path / "i", nvct_runtime_json(tmp_path), info=by_info)
    assert "name=rootless" in by_name(run_docker(ctx), docker.ROOTLESS).message
    host = context(
        tmp_path / "h",
        which={"docker": "/usr/bin/docker"}.get,
        env={"DOCKER_HOST": "unix:///run/user/1000/docker.sock"},
        run=FakeCommands({"info --format": docker_info()}),
    )
    result = by_name(run_docker(host), docker.ROOTLESS)
    assert "DOCKER_HOST is a user socket" in result.message
    assert host.run.calls[0][:3] == ["docker", "-H", "unix:///run/user/1000/docker.sock"]  # type: ignore[attr-defined]


def test_rootless_config_location(tmp_path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    fake_process(proc, 77, "dockerd", ["/usr/bin/dockerd"], uid=0)
    ctx = context(tmp_path)
    daemon = docker.find_dockerd(ctx)
    assert daemon is not None and daemon.pid == 77
    assert docker.config_location(ctx, daemon) == (docker.DEFAULT_CONFIG, "default")


# ---------------------------------------------------------------------------- containerd, CRI-O


def containerd_files(tmp: Path, *, imported: bool, relative: bool = True) -> Path:
    root = tmp / "containerd/config.toml"
    root.parent.mkdir(parents=True)
    pattern = "conf.d/*.toml" if relative else f"{root.parent}/conf.d/*.toml"
    imports = f'imports = ["/nowhere/*.toml", "{pattern}"]\n' if imported else ""
    root.write_text(f"version = 2\n{imports}\n[plugins]\n")
    drop = tmp / "containerd/conf.d/99-nvct.toml"
    drop.parent.mkdir()
    drop.write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        'BinaryName = "/usr/bin/nvct-runtime"\n'
    )
    return root


DUMP_WITH = Completed(
    0,
    'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
    'runtime_type = "io.containerd.runc.v2"\n'
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
    'BinaryName = "/usr/bin/nvct-runtime"\n',
    "",
)
DUMP_WITHOUT = Completed(0, "version = 2\n[plugins]\n", "")


def test_containerd_drop_in_and_dump(tmp_path) -> None:
    root = containerd_files(tmp_path, imported=True)
    ctx = context(tmp_path, run=FakeCommands({"config dump": DUMP_WITH}))
    results = containerd.check_containerd(ctx)
    assert by_name(results, containerd.CONFIG).status == PASS
    assert "99-nvct.toml" in by_name(results, containerd.CONFIG).message
    assert by_name(results, containerd.DUMP).status == PASS
    assert ctx.run.calls[0] == ["containerd", "--config", str(root), "config", "dump"]  # type: ignore[attr-defined]


def test_containerd_dump_without_the_handler_fails(tmp_path) -> None:
    containerd_files(tmp_path, imported=True)
    ctx = context(tmp_path, run=FakeCommands({"config dump": DUMP_WITHOUT}))
    result = by_name(containerd.check_containerd(ctx), containerd.DUMP)
    assert result.status == FAIL and "is not imported by" in result.message


def test_containerd_drop_in_not_imported_fails(tmp_path) -> None:
    root = containerd_files(tmp_path, imported=False)
    idle = by_name(containerd.check_containerd(context(tmp_path)), containerd.CONFIG)
    assert idle.status == WARN and "(no running daemon reads it)" in idle.message
    fake_process(tmp_path / "proc", 98, "containerd", ["/usr/bin/containerd"])  # another file
    assert containerd.find_containerd(context(tmp_path)) is None
    fake_process(tmp_path / "proc", 99, "containerd", ["/usr/bin/containerd", "-c", str(root)])
    ctx = context(tmp_path)
    result = by_name(containerd.check_containerd(ctx), containerd.CONFIG)
    assert result.status == FAIL and str(root) in result.message
    assert result.fix.startswith("nvct-cli configure --runtime containerd")


def test_containerd_restart_needed(tmp_path) -> None:
    root = containerd_files(tmp_path, imported=True)
    fake_process(
        tmp_path / "proc", 99, "containerd", ["/usr/bin/containerd", "--config", str(root)]
    )
    set_mtime(root, DAEMON_START - 10)
    set_mtime(tmp_path / "containerd/conf.d/99-nvct.toml", DAEMON_START + 10)
    ctx = context(tmp_path, run=FakeCommands({"config dump": DUMP_WITH}))
    result = by_name(containerd.check_containerd(ctx), containerd.RESTART)
    assert result.status == WARN and "99-nvct.toml changed" in result.message
    assert result.fix == "restart containerd: systemctl restart containerd"


def test_crio_drop_in(tmp_path) -> None:
    dropins = tmp_path / "crio/crio.conf.d"
    dropins.mkdir(parents=True)
    (dropins / "10-base.conf").write_text("[crio.runtime]\nlog_level = 'info'\n")
    ctx = context(tmp_path)
    assert by_name(crio.check_crio(ctx), crio.CONFIG).status == WARN  # no crio running
    fake_process(tmp_path / "proc", 55, "crio", ["/usr/bin/crio"])
    result = by_name(crio.check_crio(ctx), crio.CONFIG)
    assert result.status == FAIL and "nvct-cli configure --runtime crio" in result.fix
    (dropins / "99-nvidia.conf").write_text(
        '[crio.runtime.runtimes.nvidia]\nruntime_path = "/usr/bin/nvct-runtime"\n'
        'runtime_type = "oci"\n'
    )
    results = crio.check_crio(ctx)
    assert by_name(results, crio.CONFIG).status == PASS
    restart = by_name(results, crio.RESTART)  # the drop-in was written after crio started
    assert restart.status == WARN and "99-nvidia.conf changed" in restart.message


# ---------------------------------------------------------------------------- cgroup, CDI


def test_cgroup_version_and_docker_driver(tmp_path) -> None:
    ctx = context(tmp_path)
    assert cgroup.check_cgroup(ctx, None).status == WARN
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cgroup.controllers").write_text("cpu io memory\n")
    info = json.loads(docker_info().stdout)
    result = cgroup.check_cgroup(ctx, info)
    assert result.status == PASS
    assert result.message.startswith("cgroup v2; docker: cgroup driver systemd, cgroup v2")
    v1 = cgroup.check_cgroup(ctx, {**info, "CgroupVersion": "1"})
    assert v1.status == WARN and "disagree" in v1.message


def write_cdi(directory: Path, name: str, version: str | None, *, annotation: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    spec: dict[str, Any] = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": []}
    if version and annotation:
        spec["annotations"] = {"nvct.driver-version": version}
    elif version:
        spec["containerEdits"] = {"env": [f"NVCT_CDI_DRIVER_VERSION={version}"]}
    path = directory / name
    path.write_text(json.dumps(spec))
    return path


def test_cdi_spec_missing_old_and_current(tmp_path) -> None:
    ctx = context(tmp_path, cdi_dirs=(tmp_path / "etc-cdi", tmp_path / "run-cdi"))
    [none] = cdi.check_cdi(ctx, "550.54.15")
    assert none.status == WARN and "no CDI spec for nvidia.com/gpu" in none.message
    assert none.fix == "nvct-cli cdi generate --output /etc/cdi/nvidia.yaml"
    old = write_cdi(tmp_path / "etc-cdi", "nvidia.json", "535.104.05")
    write_cdi(tmp_path / "run-cdi", "other.json", None)  # another kind is ignored...
    other = json.loads((tmp_path / "run-cdi/other.json").read_text())
    (tmp_path / "run-cdi/other.json").write_text(json.dumps({**other, "kind": "vendor.com/x"}))
    [stale] = cdi.check_cdi(ctx, "550.54.15")
    assert stale.status == FAIL
    assert f"{old} was generated for driver 535.104.05, the driver is 550.54.15" in stale.message
    assert stale.fix == f"nvct-cli cdi generate --output {old}"
    current = write_cdi(tmp_path / "run-cdi", "nvct.json", "550.54.15", annotation=False)
    results = cdi.check_cdi(ctx, "550.54.15")
    assert [r.status for r in results] == [FAIL, PASS]
    assert str(current) in results[1].message
    (tmp_path / "run-cdi/broken.json").write_text("{")
    assert any("unreadable CDI spec" in r.message for r in cdi.check_cdi(ctx, "550.54.15"))


def test_cdi_yaml_without_pyyaml_is_read_by_regex(tmp_path, monkeypatch) -> None:
    import sys

    spec = tmp_path / "cdi/nvidia.yaml"
    spec.parent.mkdir()
    spec.write_text(
        '---\ncdiVersion: "0.5.0"\nkind: "nvidia.com/gpu"\ncontainerEdits:\n  env:\n'
        '  - "NVIDIA_VISIBLE_DEVICES=void"\n  - "NVCT_CDI_DRIVER_VERSION=550.54.15"\n'
    )
    monkeypatch.setitem(sys.modules, "yaml", None)
    specs, errors = cdi.find_specs((tmp_path / "cdi",))
    assert not errors and specs == [cdi.CdiSpec(spec, "550.54.15")]


@pytest.mark.root
def test_cdi_spec_from_nvct_cdi_generate_is_current(h100x4, tmp_path) -> None:
    out = tmp_path / "cdi/nvidia.yaml"
    out.parent.mkdir()
    cli(*roots(h100x4, tmp_path), "cdi", "generate", "--output", str(out))
    ctx = context(tmp_path, cdi_dirs=(out.parent,))
    [result] = cdi.check_cdi(ctx, "550.54.15")
    assert result.status == PASS, result
    [stale] = cdi.check_cdi(ctx, "570.86.15")
    assert stale.status == FAIL


# ---------------------------------------------------------------------------- whole command


def test_invalid_config_fails_and_the_rest_still_runs(tmp_path) -> None:
    bad = tmp_path / "config.toml"
    bad.write_text("[request]\naccept-envvar-when-unprivilged = false\n")
    result = cli(
        "--config",
        str(bad),
        "--driver-root",
        str(tmp_path),
        "doctor",
        "--json",
        "--cdi-dir",
        str(tmp_path / "cdi"),
        check=False,
    )
    assert result.returncode == 1
    data = json.loads(result.stdout)
    first = data["checks"][0]
    assert first["name"] == "config" and first["status"] == FAIL
    assert "unknown key [request] 'accept-envvar-when-unprivilged'" in first["message"]
    assert "accept-envvar-when-unprivileged" in first["fix"]
    assert [c["name"] for c in data["checks"]][1] == "nvml"


@pytest.mark.root
def test_doctor_cli_text_json_and_fix_dev_char(h100x4, tmp_path) -> None:
    from integration.simdriver import make_dev_nodes

    dev = tmp_path / "devroot"
    make_dev_nodes(h100x4.spec, dev)
    args = [*roots(h100x4, tmp_path)]
    args[args.index("--dev-root") + 1] = str(dev)
    cdi_dir = tmp_path / "cdi"
    write_cdi(cdi_dir, "nvidia.json", "550.54.15")
    daemon_json = tmp_path / "daemon.json"
    daemon_json.write_text(json.dumps(nvct_runtime_json(tmp_path)))
    common = [
        "--cdi-dir", str(cdi_dir),
        "--docker-config", str(daemon_json),
        "--docker-pidfile", str(tmp_path / "none.pid"),
        "--docker-host", f"unix://{tmp_path}/none.sock",
        "--containerd-config", str(tmp_path / "containerd.toml"),
        "--crio-config", str(tmp_path / "crio.conf"),
        "--crio-dropin-dir", str(tmp_path / "crio.d"),
        "--host-proc", str(tmp_path / "proc"),
        "--sysfs-root", str(tmp_path / "sys"),
        "--snap-dir", str(tmp_path / "snap"),
    ]  # fmt: skip
    (tmp_path / "proc").mkdir()
    text = cli(*args, "doctor", *common, check=False)
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    fail = next(i for i, x in enumerate(lines) if x.startswith("FAIL dev-char-links:"))
    assert lines[fail + 1].startswith("     fix: nvct-cli doctor --fix-dev-char")
    assert "PASS nvml: NVML" in text.stdout and "PASS cdi-spec:" in text.stdout
    assert "WARN persistence:" in text.stdout and lines[-1].startswith("FAILED:")
    fixed = cli(*args, "doctor", "--fix-dev-char", "--json", *common, check=False)
    data = json.loads(fixed.stdout)
    statuses = {c["name"]: c["status"] for c in data["checks"]}
    assert statuses["dev-char-fix"] == PASS and statuses["dev-char-links"] == PASS
    assert statuses["device-nodes"] == PASS and statuses["docker-config"] == PASS
    assert statuses["docker-daemon"] == WARN  # no daemon at that socket
    assert statuses["containerd"] == SKIP and statuses["crio"] == SKIP
    assert os.readlink(dev / "dev/char/195:3") == "../nvidia3"
    assert data["ok"] is (fixed.returncode == 0)
    assert all(c["fix"] for c in data["checks"] if c["status"] == FAIL)


def test_report_exit_status_follows_fails() -> None:
    from nvct.doctor.report import DoctorReport

    ok = DoctorReport((CheckResult("a", PASS, "x"), CheckResult("b", WARN, "y", "do z")))
    assert not ok.failed and ok.to_text()[-1] == "OK: 1 PASS, 1 WARN"
    assert ok.to_text()[1:3] == ["WARN b: y", "     fix: do z"]
    bad = DoctorReport((CheckResult("c", FAIL, "broken", "fix it"),))
    assert bad.failed and bad.to_dict()["ok"] is False


@pytest.mark.root
def test_run_doctor_end_to_end_in_process(h100x4, tmp_path) -> None:
    dev = healthy_dev_root(h100x4, tmp_path)
    ctx = sim_ctx(h100x4, tmp_path, dev_root=dev)
    report = run_doctor(ctx)
    names = [r.name for r in report.results]
    assert names[:6] == [
        "nvml",
        "kernel-module",
        "ldcache",
        "device-nodes",
        "dev-char-links",
        "persistence",
    ]
    assert by_name(report.results, "docker").status == SKIP
    assert by_name(report.results, "cdi-spec").status == WARN
