"""containerd: a runtime handler with ``BinaryName`` = nvct-runtime, visible in
``containerd config dump`` (so drop-ins are imported), and a daemon started after it changed."""

from __future__ import annotations

import sys
from pathlib import Path

from nvct.doctor.containerd_annotations import check_annotations
from nvct.doctor.context import DoctorContext
from nvct.doctor.processes import ProcessInfo, find_processes
from nvct.doctor.result import PASS, CheckResult, failed, passed, skipped, warned
from nvct.doctor.tomlfiles import (
    entry_check,
    load_toml,
    nvct_entries,
    restart_check,
    with_imports,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

CONFIG = "containerd-config"
DUMP = "containerd-dump"
RESTART = "containerd-restart"
CONFIGURE = "nvct-cli configure --runtime containerd"
RESTART_FIX = "restart containerd: systemctl restart containerd"
DEFAULT_CONFIG = Path("/etc/containerd/config.toml")


def find_containerd(ctx: DoctorContext) -> ProcessInfo | None:
    """The containerd daemon that reads ``ctx.containerd_config`` (not docker's managed one)."""
    for proc in find_processes(ctx.host_proc, "containerd"):
        flag = proc.option("--config", "-c")
        if Path(flag or DEFAULT_CONFIG) == ctx.containerd_config:
            return proc
    return None


def check_containerd(ctx: DoctorContext) -> list[CheckResult]:
    """Config, config dump and restart checks, or one SKIP when containerd is absent."""
    path = ctx.containerd_config
    if not (ctx.which("containerd") or path.exists()):
        return [skipped("containerd", "containerd is not installed")]
    daemon = find_containerd(ctx)
    if not path.exists() and daemon is None:
        return [skipped("containerd", f"no {path} and no containerd reading it (docker's own?)")]
    data, error = load_toml(path)
    if data is None:
        return [failed(CONFIG, error, f"{CONFIGURE} --config {path}")]
    loaded = with_imports(path, data)
    files = [f for f, _ in loaded]
    config = entry_check(
        CONFIG,
        "BinaryName",
        loaded,
        f"no runtime handler with BinaryName = .../nvct-runtime in {path} or its imports",
        f"{CONFIGURE}, then {RESTART_FIX}",
        running=daemon is not None,
    )
    results = [config]
    if config.status == PASS:
        results.append(_check_dump(ctx))
    annotations = check_annotations(loaded)
    if annotations is not None:
        results.append(annotations)
    results.append(restart_check(RESTART, "containerd", daemon, files, RESTART_FIX))
    return results


def _check_dump(ctx: DoctorContext) -> CheckResult:
    done = ctx.run(["containerd", "--config", str(ctx.containerd_config), "config", "dump"])
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return warned(
            DUMP, f"containerd config dump failed: {last}", "check that containerd is installed"
        )
    try:
        merged = tomllib.loads(done.stdout)
    except (tomllib.TOMLDecodeError, RecursionError) as err:
        return warned(DUMP, f"containerd config dump printed invalid TOML ({err})")
    entries = nvct_entries(merged, "BinaryName")
    if entries:
        return passed(
            DUMP, f"containerd config dump: [{entries[0][0]}] BinaryName = {entries[0][1]}"
        )
    return failed(
        DUMP,
        "containerd config dump does not show the nvct runtime handler: the file that has it "
        f"is not imported by {ctx.containerd_config} (or uses another config version)",
        f"{CONFIGURE} (it adds the drop-in to imports), then {RESTART_FIX}",
    )
