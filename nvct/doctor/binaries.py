"""nvct's own programs: the runtime shim and the hook, runc/crun, ldconfig."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from nvct.base.errors import ApplyError
from nvct.container.ldconfig import open_host_ldconfig
from nvct.doctor.context import DoctorContext
from nvct.doctor.result import CheckResult, failed, passed

RUNTIME = "nvct-runtime"
HOOK = "nvct-hook"
LOW_LEVEL = "low-level-runtime"
LDCONFIG = "ldconfig"
INSTALL_FIX = "install nvct (the nvct package, or pip install nvct) so nvct-runtime is on PATH"


def interpreter_of(script: str) -> str | None:
    """The interpreter named by a script's ``#!`` line (console scripts of pip/flit)."""
    try:
        with open(script, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode(errors="replace").split()
    return parts[0] if parts else None


def check_runtime(ctx: DoctorContext) -> CheckResult:
    """nvct-runtime is on PATH (engines' configs name it by absolute path; see engines)."""
    path = ctx.which(RUNTIME)
    if path is None:
        return failed(RUNTIME, "nvct-runtime is not on PATH", INSTALL_FIX)
    return passed(RUNTIME, f"nvct-runtime is {path}")


def check_hook(ctx: DoctorContext) -> CheckResult:
    """nvct's prestart hook (docker --gpus, podman's hooks.d) can run."""
    hook_path = ctx.config.runtime.hook_path
    if hook_path:
        if os.path.isfile(hook_path) and os.access(hook_path, os.X_OK):
            return passed(HOOK, f"hook-path {hook_path} is executable")
        return failed(
            HOOK,
            f"hook-path {hook_path} (config.toml [runtime]) is missing or not executable",
            "point [runtime] hook-path at nvct-hook (command -v nvct-hook), or remove it to "
            "use the shim's own interpreter",
        )
    runtime = ctx.which(RUNTIME)
    python = (interpreter_of(runtime) if runtime else None) or sys.executable
    done = ctx.run([python, "-I", "-c", "import nvct.hook.__main__"])
    if done.returncode != 0:
        err = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return failed(
            HOOK,
            f"the hook would run as {python} -I -m nvct.hook, which fails: {err}",
            f"reinstall nvct for {python}, or set [runtime] hook-path to an nvct-hook",
        )
    return passed(HOOK, f"hook runs as {python} -I -m nvct.hook prestart")


def check_low_level(ctx: DoctorContext) -> CheckResult:
    """One of the configured low-level runtimes (runc, crun) exists."""
    tried = ctx.config.runtime.low_level
    for name in tried:
        path = name if name.startswith("/") else ctx.which(name)
        if path and os.access(path, os.X_OK):
            return passed(LOW_LEVEL, f"low-level runtime {path}")
    return failed(
        LOW_LEVEL,
        f"none of the low-level runtimes {', '.join(tried)} is installed",
        "install runc (or crun), or set [runtime] low-level in config.toml",
    )


def check_ldconfig(ctx: DoctorContext) -> CheckResult:
    """The host ldconfig nvct runs over containers' roots exists."""
    path = Path(ctx.config.ldconfig)
    if path.is_file() and os.access(path, os.X_OK):
        try:
            os.close(open_host_ldconfig(str(path)))
        except ApplyError as err:
            return failed(LDCONFIG, err.message, err.hint or "")
        if interpreter_of(str(path)) is not None:
            return passed(LDCONFIG, f"ldconfig {path} (a wrapper script: nvct runs {path}.real)")
        return passed(LDCONFIG, f"ldconfig {path}")
    return failed(
        LDCONFIG,
        f"ldconfig {path} (config.toml 'ldconfig') is missing or not executable",
        "set ldconfig in config.toml to the host's ldconfig (command -v ldconfig)",
    )
