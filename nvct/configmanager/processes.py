"""Find the plugin by name among the processes this container sees (the pod shares one PID
namespace: ``shareProcessNamespace: true``) and signal it, as NVIDIA's config-manager does."""

from __future__ import annotations

import os
from pathlib import Path

from nvct.base.errors import NvctError

# An interpreter runs a script: the name to match is the script's (a packaged nvct command is
# ``/usr/bin/python3 -IS /usr/bin/nvct-device-plugin``).
INTERPRETERS = ("python", "python3", "sh", "bash", "dash")


class SignalError(NvctError):
    """No process of that name, or it could not be signalled."""


def program(argv: list[str]) -> str:
    """The name a process runs under: argv[0]'s base name, or its script's after an
    interpreter and the interpreter's options."""
    if not argv:
        return ""
    name = os.path.basename(argv[0])
    if name.rstrip("0123456789.") in INTERPRETERS:
        for arg in argv[1:]:
            if not arg.startswith("-"):
                return os.path.basename(arg)
    return name


def find(name: str, proc: Path = Path("/proc")) -> list[int]:
    """Pids (not our own) whose program is ``name``."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            raw = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # exited meanwhile, or not ours to read
            continue
        argv = [a.decode(errors="replace") for a in raw if a]
        if argv and program(argv) == name:
            found.append(int(entry.name))
    return sorted(found)


def send(name: str, signum: int, proc: Path = Path("/proc")) -> list[int]:
    """Signal every process called ``name``; the pids signalled."""
    pids = find(name, proc)
    if not pids:
        raise SignalError(
            f"no process named {name!r} to signal",
            hint="run the plugin in the same pod with shareProcessNamespace: true, or set "
            "PROCESS_TO_SIGNAL to its name",
        )
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            continue
        except OSError as err:
            raise SignalError(
                f"cannot signal {name} (pid {pid}): {err.strerror}",
                hint="run the config-manager as the plugin's user or as root",
            ) from err
    return pids
