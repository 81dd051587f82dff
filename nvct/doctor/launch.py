"""How GPU creates reach nvct: the native launcher, and the shim daemon that serves it.

Neither is needed for containers to work; both are what keeps nvct's cost low. A Python
console script as ``nvct-runtime`` (a pip install built without a C compiler) starts an
interpreter on every runtime call (~27 ms; a container asking for no GPU starts ~1.3 x slower
than with runc). Without the shim daemon each GPU container's create starts the Python shim
(~+13 ms per GPU start, bench/bench.py's "no daemon" row).
"""

from __future__ import annotations

import contextlib
import socket

from nvct.doctor.binaries import RUNTIME, interpreter_of
from nvct.doctor.context import DoctorContext
from nvct.doctor.result import CheckResult, passed, skipped, warned

LAUNCHER = "runtime-launcher"
DAEMON = "shim-daemon"
DAEMON_FIX = (
    "systemctl enable --now nvct-runtime-daemon (the packages), or nvct-cli daemon start "
    "(pip, make venv, no systemd)"
)


def check_launcher(ctx: DoctorContext) -> CheckResult:
    """nvct-runtime is the native launcher (or the shell one), not a Python script."""
    path = ctx.which(RUNTIME)
    if path is None:
        return skipped(LAUNCHER, "nvct-runtime is not on PATH (see the nvct-runtime check)")
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as err:
        return warned(LAUNCHER, f"cannot read {path}: {err.strerror}")
    if head == b"\x7fELF":
        return passed(LAUNCHER, f"{path} is the native launcher")
    interpreter = interpreter_of(path) or ""
    if "python" not in interpreter.rsplit("/", 1)[-1]:
        return passed(LAUNCHER, f"{path} is the shell launcher (no C compiler at install)")
    return warned(
        LAUNCHER,
        f"{path} is a Python console script: every runtime call starts an interpreter "
        "(~27 ms; a container asking for no GPU starts ~1.3 x slower than with runc)",
        "install a C compiler (apt-get install gcc) and reinstall nvct "
        "(pip install --force-reinstall nvct), or use the .deb/.rpm",
    )


def check_daemon(ctx: DoctorContext) -> CheckResult:
    """The shim daemon answers on its socket."""
    path = str(ctx.shim_socket)
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(1.0)
        probe.connect(path)
        return passed(DAEMON, f"the shim daemon answers on {path}")
    return warned(
        DAEMON,
        f"no shim daemon answers on {path}: the first GPU container of each kind runs the "
        "Python hook (docker --gpus, hooks.d) or the Python shim (nvct-runtime), ~+13-28 ms "
        "per such start; later ones of a kind are done natively by nvct-hook and the launcher",
        DAEMON_FIX,
    )
