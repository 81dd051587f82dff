"""The shim daemon with the native launcher: a GPU create prepared by the daemon, the runtime
exec'd by the launcher; and every way the launcher must fall back to the shim or fail closed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.harness.bundles import minimal_gpu_bundle
from integration.harness.shimd import ShimDaemon
from integration.harness.skips import need_cc, require
from nvct.runtime.launch import build as launcher_mod
from nvct.runtime.launch.build import build_native, default_command

DAEMON = [sys.executable, "-m", "nvct.runtime.launch.daemon"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory) -> Iterator[ShimDaemon]:
    require(need_cc())  # every test of this daemon builds a native launcher
    work = tmp_path_factory.mktemp("shimd")
    shimd = ShimDaemon(DAEMON, work / "shim.sock", work / "shimd.log").start()
    yield shimd
    shimd.stop()


def tools(tmp_path: Path) -> Path:
    """``runc`` and ``fakepy`` that print their name, argv, working directory and config."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name in ("runc", "fakepy"):
        tool = bindir / name
        tool.write_text(
            f'#!/bin/sh\necho "{name.upper()} $* cwd=$(pwd) NVCT_CONFIG=${{NVCT_CONFIG:-}}"\n'
        )
        tool.chmod(0o755)
    return bindir


def gpu_config(sim, tmp_path: Path, bindir: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f'driver-root = "{sim.driver_root}"\ndev-root = "{sim.dev_root}"\n'
        f'proc-root = "{sim.proc_root}"\ncache-dir = "{tmp_path / "cache"}"\n'
        f'[log]\nfile = "{tmp_path / "nvct.log"}"\n'
        f'[runtime]\nlow-level = ["{bindir / "runc"}"]\n'
    )
    return path


def gpu_bundle(tmp_path: Path, devices: str = "0") -> Path:
    return minimal_gpu_bundle(tmp_path / "bundle", devices)


def native(tmp_path: Path, python: str, config: Path | None, sock: Path | str) -> Path:
    require(need_cc())
    out = tmp_path / "nvct-runtime"
    build_native(out, python, str(config) if config else "/etc/nvct/config.toml", str(sock))
    return out


def served_launcher(
    daemon: ShimDaemon, sim, tmp_path: Path, *, built_with_config: bool = True
) -> tuple[Path, Path]:
    """A native launcher asking ``daemon``, whose own shim is ``fakepy``; and a config of the
    simulated driver whose low-level runtime is the fake ``runc``."""
    bindir = tools(tmp_path)
    cfg = gpu_config(sim, tmp_path, bindir)
    fake = str(bindir / "fakepy")
    return native(tmp_path, fake, cfg if built_with_config else None, daemon.socket_path), cfg


def run(launcher: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [str(launcher), *args], capture_output=True, text=True, env=env, cwd=cwd, check=False
    )


def prepared(bundle: Path) -> tuple[list[str], int]:
    spec = json.loads((bundle / "config.json").read_text())
    devices = [d["path"] for d in spec["linux"].get("devices", [])]
    return devices, len(spec["mounts"])


def test_daemon_prepares_the_bundle_and_the_launcher_execs_the_runtime(
    daemon, h100x4, tmp_path
) -> None:
    launcher, cfg = served_launcher(daemon, h100x4, tmp_path)
    b = gpu_bundle(tmp_path)
    done = run(launcher, "--root", "/r", "create", "--bundle", str(b), "id", cwd=tmp_path)
    # The daemon did the shim's work (fakepy never ran) and named the runtime; the launcher
    # exec'd it with its own argv, working directory and environment.
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"RUNC --root /r create --bundle {b} id cwd={tmp_path} " + (
        f"NVCT_CONFIG={cfg}"
    )
    devices, mounts = prepared(b)
    assert "/dev/nvidia0" in devices and "/dev/nvidia1" not in devices
    # the library directory, 2 IPC sockets, the MPS directory, the firmware directory; the 5
    # binaries are links into the first
    assert mounts >= 5
    assert os.readlink(b / "rootfs/usr/bin/nvidia-smi").endswith("/nvidia-driver/nvidia-smi")
    event = json.loads((tmp_path / "nvct.log").read_text().splitlines()[-1])
    assert event["event"] == "container_prepared" and event["gpus"] == ["GPU 0"]
    assert event["via"] == "daemon"  # what the bench counts to tell the two paths apart


def test_working_directory_and_own_config_flag_reach_the_daemon(daemon, h100x4, tmp_path) -> None:
    launcher, cfg = served_launcher(daemon, h100x4, tmp_path, built_with_config=False)
    b = gpu_bundle(tmp_path, "1")
    done = run(launcher, "--nvct-config", str(cfg), "create", "id", cwd=b)  # bundle = cwd
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"RUNC create id cwd={b} NVCT_CONFIG={cfg}"
    assert "/dev/nvidia1" in prepared(b)[0]


def test_errors_reach_the_launchers_stderr_as_the_shim_writes_them(
    daemon, h100x4, tmp_path
) -> None:
    served, cfg = served_launcher(daemon, h100x4, tmp_path)
    alone = tmp_path / "alone"
    alone.mkdir()
    shim = native(alone, default_command(), cfg, "")  # the real Python shim, no daemon
    outputs = []
    for launcher in (served, shim):
        b = gpu_bundle(tmp_path / launcher.parent.name / "x", "7")  # 4 GPUs: no GPU 7
        before = (b / "config.json").read_bytes()
        done = run(launcher, "create", "--bundle", str(b), "id")
        assert done.returncode == 1
        assert done.stdout == ""  # neither runc nor fakepy ran
        assert (b / "config.json").read_bytes() == before
        outputs.append(done.stderr)
    assert outputs[0] == outputs[1]
    assert outputs[0].startswith("nvct-runtime: error: ") and "7" in outputs[0]
    assert outputs[0].count("\n") == 1


def test_no_daemon_or_a_stale_socket_runs_the_shim_itself(tmp_path) -> None:
    bindir = tools(tmp_path)
    b = gpu_bundle(tmp_path)
    missing = native(tmp_path, str(bindir / "fakepy"), None, tmp_path / "absent.sock")
    assert run(missing, "create", "--bundle", str(b), "id").stdout.startswith("FAKEPY create")
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(stale))  # bound, never listening: what a killed daemon leaves
    launcher = native(tmp_path, str(bindir / "fakepy"), None, stale)
    assert run(launcher, "create", "--bundle", str(b), "id").stdout.startswith("FAKEPY create")


def test_daemon_declines_a_launcher_built_from_other_code(
    daemon, h100x4, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(launcher_mod, "code_id", lambda: "0" * 32)
    launcher, _ = served_launcher(daemon, h100x4, tmp_path)
    b = gpu_bundle(tmp_path)
    before = (b / "config.json").read_bytes()
    assert run(launcher, "create", "--bundle", str(b), "id").stdout.startswith("FAKEPY create")
    assert (b / "config.json").read_bytes() == before


def test_daemon_declines_a_caller_in_another_mount_namespace(daemon, h100x4, tmp_path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    launcher, _ = served_launcher(daemon, h100x4, tmp_path)
    b = gpu_bundle(tmp_path)
    done = subprocess.run(
        ["unshare", "-m", str(launcher), "create", "--bundle", str(b), "id"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.startswith("FAKEPY create"), done.stderr


def test_launcher_fails_closed_when_the_daemon_ends_without_an_answer(tmp_path) -> None:
    bindir = tools(tmp_path)
    sock = tmp_path / "mute.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    server.listen()

    def hang_up() -> None:  # a daemon child that died after it read the whole request
        conn, _ = server.accept()
        while conn.recv(1 << 16):
            pass
        conn.close()

    thread = threading.Thread(target=hang_up)
    thread.start()
    launcher = native(tmp_path, str(bindir / "fakepy"), None, sock)
    b = gpu_bundle(tmp_path)
    done = run(launcher, "create", "--bundle", str(b), "id")
    thread.join()
    server.close()
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(
        f"nvct-runtime: error: the nvct shim daemon on {sock} ended without an answer (fix: "
    )


def waiting_workers(daemon_pid: int) -> list[int]:
    """The daemon's live children (its idle, pre-forked workers when nothing is served)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == daemon_pid and fields[0] != "Z":
                found.append(int(entry))
    return found


def test_daemon_socket_lifecycle(tmp_path) -> None:
    sock = tmp_path / "d.sock"
    first = ShimDaemon(DAEMON, sock, tmp_path / "first.log").start()
    try:
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        second = subprocess.run(
            [*DAEMON, "--socket", str(sock)], capture_output=True, text=True, check=False
        )
        assert second.returncode == 1
        assert second.stderr.strip() == (
            f"nvct-runtime-daemon: error: a daemon already listens on {sock} "
            "(fix: stop it first, or pass another --socket)"
        )
        assert first.proc is not None
        pid = first.proc.pid
        workers = waiting_workers(pid)
        assert len(workers) == 2  # forked ahead of the first request
        os.kill(workers[0], signal.SIGKILL)  # a worker lost while idle is replaced
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and workers[0] in waiting_workers(pid):
            time.sleep(0.05)
        while time.monotonic() < deadline and len(waiting_workers(pid)) < 2:
            time.sleep(0.05)
        assert len(waiting_workers(pid)) == 2 and workers[0] not in waiting_workers(pid)
        first.proc.send_signal(signal.SIGTERM)
        assert first.proc.wait(timeout=15) == 0
        assert not sock.exists()
        with pytest.raises(ProcessLookupError):  # no worker outlives the daemon
            os.killpg(pid, 0)
    finally:
        first.stop()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock))  # stale: nothing listens
    again = ShimDaemon(DAEMON, sock, tmp_path / "again.log").start()
    again.stop()
    assert not sock.exists()


def test_a_create_in_a_worker_imports_nothing(h100x4, tmp_path) -> None:
    """What the daemon preloads is all a create needs: a worker (a fork of the daemon) that
    prepares a container of a known kind imports no module, and a first one no nvct module."""
    bindir = tools(tmp_path)
    cfg = gpu_config(h100x4, tmp_path, bindir)
    first, second = gpu_bundle(tmp_path / "a"), gpu_bundle(tmp_path / "b")
    code = f"""
import os, sys
os.environ["NVCT_CONFIG"] = {str(cfg)!r}
from nvct.runtime.launch.daemon import preload
preload()
from nvct.runtime.__main__ import decide
for bundle in ({str(first)!r}, {str(second)!r}):
    before = set(sys.modules)
    rc, runtime, _ = decide("nvct-runtime", ["create", "--bundle", bundle, "id"])
    assert rc == 0 and runtime, (rc, runtime)
    print(" ".join(sorted(set(sys.modules) - before)))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    miss, hit = done.stdout.split("\n")[:2]
    assert not [m for m in miss.split() if m.startswith("nvct")], miss
    assert hit == ""
    events = [json.loads(line) for line in (tmp_path / "nvct.log").read_text().splitlines()]
    # decide() called as the Python shim calls it: its events say so (the daemon's, "daemon").
    assert [e["via"] for e in events if e["event"] == "container_prepared"] == ["shim", "shim"]
