"""CRI-O: a ``[crio.runtime.runtimes.<name>]`` with runtime_path = nvct-runtime, in crio.conf or
a drop-in, and a crio started after those files changed."""

from __future__ import annotations

import contextlib
from pathlib import Path

from nvct.doctor.context import DoctorContext
from nvct.doctor.processes import find_processes
from nvct.doctor.result import CheckResult, failed, skipped
from nvct.doctor.tomlfiles import entry_check, load_toml, restart_check

CONFIG = "crio-config"
RESTART = "crio-restart"
RESTART_FIX = "restart CRI-O: systemctl restart crio"


def crio_files(ctx: DoctorContext) -> list[Path]:
    """crio.conf, then its drop-ins in name order (as CRI-O merges them)."""
    files = [ctx.crio_config] if ctx.crio_config.exists() else []
    with contextlib.suppress(OSError):
        files += sorted(p for p in ctx.crio_dropin_dir.iterdir() if p.suffix == ".conf")
    return files


def check_crio(ctx: DoctorContext) -> list[CheckResult]:
    """Config and restart checks, or one SKIP when CRI-O is absent."""
    files = crio_files(ctx)
    if not (ctx.which("crio") or files):
        return [skipped("crio", "CRI-O is not installed")]
    daemons = find_processes(ctx.host_proc, "crio")
    daemon = daemons[0] if daemons else None
    loaded = []
    for file in files:
        data, error = load_toml(file)
        if data is None:
            return [failed(CONFIG, error, f"fix the syntax of {file}")]
        loaded.append((file, data))
    results = [
        entry_check(
            CONFIG,
            "runtime_path",
            loaded,
            f"no CRI-O runtime with runtime_path = .../nvct-runtime in {ctx.crio_config} or "
            f"{ctx.crio_dropin_dir}/*.conf",
            f"nvct-cli configure --runtime crio, then {RESTART_FIX}",
            running=daemon is not None,
        )
    ]
    results.append(restart_check(RESTART, "crio", daemon, files, RESTART_FIX))
    return results
