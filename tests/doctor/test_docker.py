"""doctor's docker checks against a fake dockerd in a temporary /proc and fake ``docker info``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nvct.doctor import FAIL, PASS, SKIP, WARN, CheckResult, Completed, DoctorContext, docker
from tests.doctor.conftest import (
    DAEMON_START,
    FakeCommands,
    by_name,
    context,
    docker_info,
    executable,
    fake_process,
    nvct_runtime_json,
    set_mtime,
)


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


def test_no_daemon_behind_a_cli_that_exits_0_warns_and_claims_no_runtimes(tmp_path) -> None:
    # docker 20.10's CLI (Debian 12's docker.io) with no daemon at its socket: exit status 0
    server_errors = {
        "ServerErrors": [
            "Cannot connect to the Docker daemon at unix:///x.sock. Is the docker daemon running?"
        ],
        "ClientInfo": {"Debug": False, "Context": "default", "Plugins": [], "Warnings": None},
    }
    down = Completed(0, json.dumps(server_errors) + "\n", "")
    ctx, _ = docker_setup(tmp_path, nvct_runtime_json(tmp_path), info=down)
    daemon = by_name(run_docker(ctx), docker.DAEMON)
    assert daemon.status == WARN
    assert daemon.message == (
        "cannot query the docker daemon: Cannot connect to the Docker daemon at "
        "unix:///x.sock. Is the docker daemon running?"
    )


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
