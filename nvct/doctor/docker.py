"""Docker: daemon.json names nvct-runtime, the running dockerd knows it, and the ways it
goes wrong for users (config changed after the daemon started, snap, rootless)."""

from __future__ import annotations

import datetime as dt
import json
import os
import posixpath
import pwd
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvct.doctor.context import DoctorContext
from nvct.doctor.processes import (
    START_TIME_SLACK,
    ProcessInfo,
    find_processes,
    pid_from_file,
    process_info,
)
from nvct.doctor.result import CheckResult, failed, passed, skipped, warned

CONFIG = "docker-config"
DAEMON = "docker-daemon"
RESTART = "docker-restart"
SNAP = "docker-snap"
ROOTLESS = "docker-rootless"
DEFAULT_CONFIG = Path("/etc/docker/daemon.json")
SNAP_CONFIG = Path("/var/snap/docker/current/config/daemon.json")
RUNTIME_BASENAME = "nvct-runtime"
CONFIGURE = "nvct-cli configure --runtime docker"
RESTART_FIX = "restart dockerd: systemctl restart docker"
_USER_SOCKET = re.compile(r"^unix:///run/user/[0-9]+/docker\.sock$")


@dataclass(frozen=True, slots=True)
class DockerState:
    """What doctor found out about docker, shared by its checks and the cgroup check."""

    daemon: ProcessInfo | None
    config_path: Path
    config_source: str
    info: dict[str, Any] | None
    info_error: str


def find_dockerd(ctx: DoctorContext) -> ProcessInfo | None:
    """The dockerd doctor looks at: the pidfile's, else the one serving DOCKER_HOST, else any."""
    pid = pid_from_file(ctx.docker_pidfile)
    if pid is not None:
        info = process_info(ctx.host_proc, pid)
        if info is not None and info.name == "dockerd":
            return info
    procs = find_processes(ctx.host_proc, "dockerd")
    host = ctx.docker_host or ctx.env.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        serving = [p for p in procs if any(host[7:] in a for a in p.argv)]
        if serving:
            return serving[0]
    default = [p for p in procs if p.option("-H", "--host") is None]
    candidates = default or procs
    return candidates[0] if candidates else None


def config_location(ctx: DoctorContext, daemon: ProcessInfo | None) -> tuple[Path, str]:
    """Which daemon.json matters, and why: explicit, the daemon's own flag, snap, rootless."""
    if ctx.docker_config is not None:
        return ctx.docker_config, "--docker-config"
    if daemon is not None:
        flag = daemon.option("--config-file")
        if flag:
            return Path(flag), f"--config-file of dockerd (pid {daemon.pid})"
        if daemon.exe.startswith("/snap/"):
            return SNAP_CONFIG, "snap docker"
        if daemon.uid != 0:
            try:
                home = pwd.getpwuid(daemon.uid).pw_dir
            except KeyError:
                home = f"~{daemon.uid}"
            return Path(home) / ".config/docker/daemon.json", "rootless dockerd"
    return DEFAULT_CONFIG, "default"


def docker_installed(ctx: DoctorContext, daemon: ProcessInfo | None) -> bool:
    """Any sign of docker: a daemon, its binaries, its config or a snap."""
    return bool(
        daemon
        or ctx.which("dockerd")
        or ctx.which("docker")
        or (ctx.docker_config and ctx.docker_config.exists())
        or (ctx.snap_dir / "bin/docker").exists()
    )


def query_info(ctx: DoctorContext) -> tuple[dict[str, Any] | None, str]:
    """``docker info`` as a dict, or the reason it failed."""
    done = ctx.run(ctx.docker_cli("info", "--format", "{{json .}}"))
    if done.returncode != 0:
        return None, (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    try:
        data = json.loads(done.stdout)
    except ValueError:
        return None, "docker info did not print JSON"
    if not isinstance(data, dict):
        return None, "docker info did not print a JSON object"
    # docker 20.10's CLI exits 0 with no daemon to ask, naming the failure in ServerErrors
    errors = data.get("ServerErrors")
    if errors:
        return None, str(errors[0] if isinstance(errors, list) else errors)
    return data, ""


def gather(ctx: DoctorContext) -> DockerState | None:
    """Docker's state, or None when docker is not installed."""
    daemon = find_dockerd(ctx)
    if not docker_installed(ctx, daemon):
        return None
    path, source = config_location(ctx, daemon)
    info, error = query_info(ctx)
    return DockerState(daemon, path, source, info, error)


def nvct_runtimes(runtimes: Any) -> dict[str, str]:
    """``{name: path}`` of the runtimes (daemon.json or docker info) whose path is nvct's."""
    if not isinstance(runtimes, dict):
        return {}
    out = {}
    for name, entry in runtimes.items():
        path = entry.get("path") if isinstance(entry, dict) else None
        if isinstance(path, str) and posixpath.basename(path) == RUNTIME_BASENAME:
            out[str(name)] = path
    return out


def _read_config(path: Path) -> tuple[dict[str, Any] | None, str]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None, f"{path} does not exist"
    except OSError as err:
        return None, f"cannot read {path}: {err.strerror}"
    except ValueError as err:
        return None, f"{path} is not valid JSON ({err})"
    if not isinstance(data, dict):
        return None, f"{path} is not a JSON object"
    return data, ""


def check_config(ctx: DoctorContext, state: DockerState) -> CheckResult:
    """daemon.json registers nvct-runtime (and it is the file the daemon reads)."""
    path = state.config_path
    daemon = state.daemon
    if daemon is not None and ctx.docker_config is not None:
        flag = daemon.option("--config-file")
        in_use = Path(flag) if flag else DEFAULT_CONFIG
        if in_use != path:
            return failed(
                CONFIG,
                f"dockerd (pid {daemon.pid}) reads {in_use}, not {path}",
                f"{CONFIGURE} --config {in_use}, then {RESTART_FIX}",
            )
    data, error = _read_config(path)
    if data is None:
        fix = f"{CONFIGURE} --config {path}, then {RESTART_FIX}"
        if daemon is None and not path.exists():
            return warned(CONFIG, f"docker is installed but not running, and {error}", fix)
        return failed(CONFIG, error, fix)
    ours = nvct_runtimes(data.get("runtimes"))
    if not ours:
        names = ", ".join(sorted(data.get("runtimes") or {})) or "none"
        return failed(
            CONFIG,
            f"{path} registers no runtime whose path is nvct-runtime (runtimes: {names})",
            f"{CONFIGURE} --config {path}, then {RESTART_FIX}",
        )
    broken = {n: p for n, p in ours.items() if not os.access(p, os.X_OK)}
    if broken:
        name, bad = next(iter(broken.items()))
        return failed(
            CONFIG,
            f"{path}: runtime {name!r} points at {bad}, which is missing or not executable",
            f"{CONFIGURE} --config {path} (it writes the absolute path of nvct-runtime)",
        )
    default = data.get("default-runtime")
    shown = ", ".join(f"{n!r} -> {p}" for n, p in ours.items())
    extra = f"; default-runtime {default!r}" if default else ""
    return passed(CONFIG, f"{path} ({state.config_source}): runtime {shown}{extra}")


def check_daemon(ctx: DoctorContext, state: DockerState) -> CheckResult:
    """The running dockerd knows the nvct runtime (``docker info`` Runtimes)."""
    if state.info is None:
        return warned(
            DAEMON,
            f"cannot query the docker daemon: {state.info_error}",
            "start dockerd (systemctl start docker), or point --docker-host / DOCKER_HOST at it",
        )
    ours = nvct_runtimes(state.info.get("Runtimes"))
    if ours:
        shown = ", ".join(f"{n!r} -> {p}" for n, p in ours.items())
        default = state.info.get("DefaultRuntime", "")
        return passed(DAEMON, f"running dockerd knows runtime {shown} (default: {default})")
    known = ", ".join(sorted(state.info.get("Runtimes") or {})) or "none"
    configured, _ = _read_config(state.config_path)
    if configured is not None and nvct_runtimes(configured.get("runtimes")):
        fix = f"{RESTART_FIX} (it has not read {state.config_path} since nvct was added)"
    else:
        fix = f"{CONFIGURE} --config {state.config_path}, then {RESTART_FIX}"
    return failed(
        DAEMON,
        f"the running dockerd does not know nvct-runtime (its runtimes: {known}); "
        "'docker run --runtime=nvidia' fails with 'unknown or invalid runtime name'",
        fix,
    )


def _when(stamp: float) -> str:
    return dt.datetime.fromtimestamp(stamp, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def check_restart(ctx: DoctorContext, state: DockerState, daemon_ok: bool) -> CheckResult:
    """dockerd started after daemon.json last changed (FAIL when it also lacks the runtime)."""
    daemon = state.daemon
    if daemon is None:
        return skipped(RESTART, "no running dockerd found")
    try:
        mtime = state.config_path.stat().st_mtime
    except OSError:
        return skipped(RESTART, f"{state.config_path} does not exist")
    if mtime <= daemon.start_time + START_TIME_SLACK:
        return passed(
            RESTART, f"dockerd (pid {daemon.pid}) started after {state.config_path} changed"
        )
    message = (
        f"restart needed: {state.config_path} changed at {_when(mtime)}, after dockerd "
        f"(pid {daemon.pid}) started at {_when(daemon.start_time)}"
    )
    if daemon_ok:
        return warned(RESTART, message, RESTART_FIX)
    return failed(RESTART, message, RESTART_FIX)


def check_snap(ctx: DoctorContext, state: DockerState) -> CheckResult:
    """docker from the snap store: its own daemon.json, confinement, no host runtimes."""
    snap_bin = ctx.snap_dir / "bin/docker"
    daemon_snap = state.daemon is not None and state.daemon.exe.startswith("/snap/")
    if daemon_snap or snap_bin.exists():
        where = state.daemon.exe if daemon_snap and state.daemon else str(snap_bin)
        return warned(
            SNAP,
            f"docker is installed as a snap ({where}): it reads {SNAP_CONFIG} and its "
            "confinement keeps it from running host runtimes ('could not select device driver')",
            "install Docker from Docker's or your distribution's packages (snap remove docker), "
            f"or configure {SNAP_CONFIG} and run: snap restart docker",
        )
    return passed(SNAP, "docker is not a snap")


def check_rootless(ctx: DoctorContext, state: DockerState) -> CheckResult:
    """A rootless dockerd reads another daemon.json and cannot grant device cgroups."""
    reasons = []
    if state.daemon is not None and state.daemon.uid != 0:
        reasons.append(f"dockerd (pid {state.daemon.pid}) runs as uid {state.daemon.uid}")
    options = (state.info or {}).get("SecurityOptions") or []
    if any("name=rootless" in str(o) for o in options):
        reasons.append("docker info reports name=rootless")
    host = ctx.docker_host or ctx.env.get("DOCKER_HOST", "")
    if _USER_SOCKET.match(host):
        reasons.append(f"DOCKER_HOST is a user socket ({host})")
    if not reasons and state.daemon is None and state.info is None:
        return skipped(ROOTLESS, "no running dockerd found")
    if not reasons:
        return passed(ROOTLESS, "dockerd runs as root")
    return warned(
        ROOTLESS,
        f"rootless docker ({'; '.join(reasons)}): it reads ~/.config/docker/daemon.json, "
        "cannot write device cgroups and does not read /var/run/cdi",
        f"{CONFIGURE} --config ~/.config/docker/daemon.json and systemctl --user restart docker; "
        "or use CDI: nvct-cli cdi generate --output /etc/cdi/nvidia.yaml and "
        "docker run --device nvidia.com/gpu=all",
    )


def check_docker(ctx: DoctorContext, state: DockerState | None) -> list[CheckResult]:
    """Every docker check, or one SKIP when docker is not installed."""
    if state is None:
        return [skipped("docker", "docker is not installed")]
    daemon = check_daemon(ctx, state)
    return [
        check_config(ctx, state),
        daemon,
        check_restart(ctx, state, daemon.status != "FAIL"),
        check_snap(ctx, state),
        check_rootless(ctx, state),
    ]
