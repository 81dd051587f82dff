"""Smoke tests of the integration harness itself, against real dockerd and runc."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from integration.harness.bundles import BundleFactory, run_runc
from integration.harness.dockerd import Dockerd, DockerdError, DockerdFactory
from integration.harness.images import (
    ImageImporter,
    copy_host_binary,
    docker_import,
    is_static_busybox,
    rootfs_tar,
)
from integration.harness.processes import process_alive
from integration.harness.skips import need_binary, need_docker, need_root, require

HOST_ENV = Path("/usr/bin/env")  # coreutils env: dynamically linked, needs only libc


def _mounts_mentioning(root: Path) -> list[str]:
    return [
        line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(root) in line
    ]


def test_skip_reasons_say_how_to_fix() -> None:
    reason = need_binary("surely-not-installed-anywhere")
    assert reason == (
        "needs surely-not-installed-anywhere: apt-get install surely-not-installed-anywhere"
    )
    assert need_binary("sh") is None
    assert need_root() in (None, "needs root (run as root or in CI via .ci/run)")


def test_rootfs_tar_is_owned_by_root(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "x").write_text("x")
    (tmp_path / "bin" / "y").symlink_to("x")
    with tarfile.open(fileobj=io.BytesIO(rootfs_tar(tmp_path))) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert {"./bin/x", "./bin/y"} <= set(members)
    assert all(m.uid == 0 and m.gid == 0 and m.uname == "" for m in members.values())
    assert members["./bin/y"].issym()
    assert members["./bin/y"].linkname == "x"


@pytest.mark.root
def test_glibc_rootfs_layout(glibc_rootfs_dir: Path) -> None:
    root = glibc_rootfs_dir
    assert is_static_busybox(root / "bin" / "busybox")
    assert (root / "bin" / "sh").readlink() == Path("busybox")
    libc = root / "lib" / "x86_64-linux-gnu" / "libc.so.6"
    assert libc.is_file()
    assert not libc.is_symlink()
    assert (root / "lib64" / "ld-linux-x86-64.so.2").readlink() == Path(
        "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    )
    assert (root / "etc" / "debian_version").is_file()
    assert (root / "usr" / "lib" / "x86_64-linux-gnu").is_dir()
    assert b"/lib/x86_64-linux-gnu/libc.so.6" in (root / "etc" / "ld.so.cache").read_bytes()
    assert oct((root / "tmp").stat().st_mode & 0o7777) == oct(0o1777)


@pytest.mark.root
@pytest.mark.docker
def test_docker_run_echo(plain_dockerd: Dockerd, glibc_image: str) -> None:
    done = plain_dockerd.docker(
        "run", "--rm", "--network", "none", glibc_image, "/bin/sh", "-c", "echo hello"
    )
    assert done.stdout == "hello\n"


@pytest.mark.root
@pytest.mark.docker
def test_dynamic_program_runs_in_glibc_image(
    plain_dockerd: Dockerd, glibc_rootfs_dir: Path, tmp_path: Path
) -> None:
    rootfs = tmp_path / "rootfs"
    shutil.copytree(glibc_rootfs_dir, rootfs, symlinks=True)
    env = copy_host_binary(rootfs, HOST_ENV)
    image = "nvct-glibc-env:test"
    docker_import(plain_dockerd, rootfs, image)
    script = f"{env} --version; {env} -i FOO=bar {env}; /lib64/ld-linux-x86-64.so.2 --list {env}"
    try:
        out = plain_dockerd.docker(
            "run", "--rm", "--network", "none", image, "/bin/sh", "-ec", script
        ).stdout
        assert "GNU coreutils" in out  # the host's binary ran, not busybox's applet
        assert "\nFOO=bar\n" in out
        assert "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6" in out  # found via ld.so.cache
    finally:
        plain_dockerd.docker("rmi", image)


@pytest.mark.root
@pytest.mark.runc
def test_runc_run_busybox_echo(runc_bundle_factory: BundleFactory, container_id: str) -> None:
    bundle = runc_bundle_factory(["/bin/sh", "-c", 'echo "hello $WHO"'], ["WHO=runc"])
    done = run_runc(bundle, container_id)
    assert (done.returncode, done.stdout, done.stderr) == (0, "hello runc\n", "")
    state = subprocess.run(
        ["runc", "state", container_id], capture_output=True, text=True, check=False
    )
    assert state.returncode != 0  # deleted afterwards


@pytest.mark.root
@pytest.mark.runc
def test_runc_failure_is_reported(runc_bundle_factory: BundleFactory, container_id: str) -> None:
    done = run_runc(runc_bundle_factory(["/no/such/program"]), container_id)
    assert done.returncode != 0
    assert "no such file" in done.stderr.lower()


@pytest.mark.root
@pytest.mark.docker
def test_restart_applies_new_daemon_json(
    dockerd_factory: DockerdFactory, import_glibc_image: ImageImporter
) -> None:
    dockerd = dockerd_factory({})
    image = import_glibc_image(dockerd)
    assert "test" not in dockerd.info()["Runtimes"]
    first_pid = dockerd.pid
    dockerd.restart({"runtimes": {"test": {"path": "/usr/bin/runc", "runtimeArgs": []}}})
    info = dockerd.info()
    assert info["Runtimes"]["test"]["path"] == "/usr/bin/runc"
    assert first_pid is not None
    assert dockerd.pid != first_pid
    assert not process_alive(first_pid)
    # Images survive the restart, and the new runtime runs containers.
    done = dockerd.docker(
        "run", "--rm", "--network", "none", "--runtime", "test", image, "/bin/echo", "via test"
    )
    assert done.stdout == "via test\n"
    dockerd.stop()


@pytest.mark.root
@pytest.mark.docker
def test_stop_leaves_no_process_mount_or_directory(
    dockerd_factory: DockerdFactory, import_glibc_image: ImageImporter
) -> None:
    dockerd = dockerd_factory({})
    image = import_glibc_image(dockerd)
    container = dockerd.docker(
        "run", "-d", "--network", "none", image, "/bin/sleep", "600"
    ).stdout.strip()
    sleep_pid = int(dockerd.docker("inspect", "-f", "{{.State.Pid}}", container).stdout)
    pids = dockerd.process_ids()
    assert dockerd.pid in pids
    assert len(pids) >= 3  # dockerd, its containerd, the container's shim
    root = dockerd.root
    dockerd.stop()
    assert [pid for pid in [*pids, sleep_pid] if process_alive(pid)] == []
    assert dockerd.process_ids() == []
    assert not root.exists()
    assert _mounts_mentioning(root) == []
    dockerd.stop()  # idempotent


@pytest.mark.root
@pytest.mark.docker
def test_startup_failure_shows_the_log() -> None:
    require(need_docker())
    dockerd = Dockerd({"no-such-directive": True}, start_timeout=30)
    try:
        with pytest.raises(DockerdError, match="no-such-directive"):
            dockerd.start()
        assert dockerd.process_ids() == []
    finally:
        dockerd.stop()
    assert not dockerd.root.exists()
