"""``nvct-cli daemon start|stop|status``: the shim daemon where no systemd runs it.

The packages install ``nvct-runtime-daemon.service``; a pip or ``make venv`` install, or a host
without systemd (a container image, a minimal VM), starts the daemon with this command instead.
Without a daemon every GPU container's create starts the Python shim (``doctor`` says what that
costs). The pidfile is how ``stop`` finds the process: it is checked to be nvct's daemon before
it is signalled, so a stale pidfile naming a reused pid never kills anything else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import click

from nvct.base._site import module_argv
from nvct.base.atomic import write_atomic
from nvct.base.defaults import DEFAULT_SOCKET
from nvct.base.errors import NvctError

DAEMON_MODULE = "nvct.runtime.launch.daemon"
DEFAULT_PIDFILE = "/run/nvct/shim.pid"
DEFAULT_LOG = "/var/log/nvct-runtime-daemon.log"
WAIT_S = 15.0


class DaemonError(NvctError):
    """The daemon could not be started or stopped."""


def answers(path: str) -> bool:
    """Whether something accepts connections on the unix socket ``path``."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(1.0)
        probe.connect(path)
        return True
    return False


def running_pid(pidfile: str) -> int | None:
    """The pid in ``pidfile`` when that process is nvct's shim daemon, else None."""
    try:
        pid = int(Path(pidfile).read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if DAEMON_MODULE.encode() in cmdline else None


@click.group("daemon")
def daemon() -> None:
    """Run the shim daemon without systemd (GPU creates without a Python start each)."""


_socket = click.option("--socket", "sock", default=DEFAULT_SOCKET, show_default=True)
_pidfile = click.option("--pidfile", default=DEFAULT_PIDFILE, show_default=True)


@daemon.command("start")
@_socket
@_pidfile
@click.option("--log", "log_file", default=DEFAULT_LOG, show_default=True)
def start(sock: str, pidfile: str, log_file: str) -> None:
    """Start the daemon in the background; return once it answers on its socket."""
    pid = running_pid(pidfile)
    if pid is not None:
        raise DaemonError(f"the shim daemon already runs (pid {pid}, {pidfile})")
    if answers(sock):
        raise DaemonError(
            f"a process already answers on {sock}",
            hint="nvct-cli daemon status; stop that daemon first, or pass another --socket",
        )
    try:
        for path in (sock, pidfile, log_file):
            os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
        log = open(log_file, "ab")  # noqa: SIM115 - handed to the child, closed below
    except OSError as err:
        raise DaemonError(f"cannot prepare {err.filename}: {err.strerror}") from err
    with log:
        proc = subprocess.Popen(
            [*module_argv(DAEMON_MODULE), "--socket", sock],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives this command and its terminal
        )
    deadline = time.monotonic() + WAIT_S
    while not answers(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            tail = Path(log_file).read_text(errors="replace").strip().splitlines()[-1:]
            raise DaemonError(
                f"the shim daemon did not start on {sock}: {' '.join(tail) or 'no output'}",
                hint=f"see {log_file}",
            )
        time.sleep(0.05)
    write_atomic(pidfile, f"{proc.pid}\n".encode(), 0o644)
    click.echo(f"nvct shim daemon running (pid {proc.pid}) on {sock}; log: {log_file}")


@daemon.command("stop")
@_pidfile
def stop(pidfile: str) -> None:
    """Stop the daemon the pidfile names (SIGTERM: creates in flight finish first)."""
    pid = running_pid(pidfile)
    if pid is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pidfile)
        click.echo(f"nvct shim daemon not running ({pidfile} names no daemon)")
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + WAIT_S
    while running_pid(pidfile) == pid:
        if time.monotonic() > deadline:
            raise DaemonError(
                f"the shim daemon (pid {pid}) did not stop within {WAIT_S:.0f} s",
                hint=f"kill -9 {pid}",
            )
        time.sleep(0.05)
    os.unlink(pidfile)
    click.echo(f"nvct shim daemon stopped (pid {pid})")


@daemon.command("status")
@_socket
@_pidfile
def status(sock: str, pidfile: str) -> None:
    """Whether the daemon runs and answers; exit status 3 when it does not (as LSB's)."""
    pid = running_pid(pidfile)
    if answers(sock):
        click.echo(f"running: {sock} answers" + (f" (pid {pid})" if pid else ""))
        return
    click.echo(f"not running: nothing answers on {sock}")
    raise click.exceptions.Exit(3)
