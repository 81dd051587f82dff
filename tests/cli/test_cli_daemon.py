"""``nvct-cli daemon start|status|stop``: the shim daemon without systemd, found by pidfile."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from nvct.cli.daemon_cmd import running_pid


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", "daemon", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_start_status_stop(tmp_path: Path) -> None:
    sock, pidfile, log = tmp_path / "run/shim.sock", tmp_path / "run/shim.pid", tmp_path / "d.log"
    where = ["--socket", str(sock), "--pidfile", str(pidfile)]
    assert cli("status", "--socket", str(sock), "--pidfile", str(pidfile)).returncode == 3
    started = cli("start", *where, "--log", str(log))
    assert started.returncode == 0, started.stderr
    pid = int(pidfile.read_text())
    try:
        assert f"running (pid {pid}) on {sock}" in started.stdout
        assert running_pid(str(pidfile)) == pid and sock.is_socket()
        status = cli("status", *where)
        assert status.returncode == 0 and f"{sock} answers (pid {pid})" in status.stdout
        again = cli("start", *where, "--log", str(log))
        assert again.returncode == 1
        assert f"already runs (pid {pid}" in again.stderr
    finally:
        stopped = cli("stop", "--pidfile", str(pidfile))
    assert stopped.returncode == 0 and f"stopped (pid {pid})" in stopped.stdout
    assert (
        not Path(f"/proc/{pid}").exists()
        or b"nvct" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    )
    assert not sock.exists() and not pidfile.exists()
    assert "not running" in cli("stop", "--pidfile", str(pidfile)).stdout


def test_a_stale_pidfile_never_signals_another_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "shim.pid"
    pidfile.write_text(f"{os.getpid()}\n")  # pytest itself: not a shim daemon
    assert running_pid(str(pidfile)) is None
    done = cli("stop", "--pidfile", str(pidfile))
    assert done.returncode == 0 and "names no daemon" in done.stdout
    assert not pidfile.exists()


def test_a_daemon_that_cannot_start_says_why(tmp_path: Path) -> None:
    """Something else already answers on the socket: start refuses in one line, and starts
    nothing."""
    sock = tmp_path / "shim.sock"
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(sock))
        other.listen(1)
        done = cli(
            "start", "--socket", str(sock), "--pidfile", str(tmp_path / "p"),
            "--log", str(tmp_path / "d.log"),
        )  # fmt: skip
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"nvct-cli: error: a process already answers on {sock}")
    assert not (tmp_path / "p").exists() and not (tmp_path / "d.log").exists()
