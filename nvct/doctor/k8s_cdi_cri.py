"""The device plugin's ``cdi-cri`` answer against the node's containerd: the kubelet hands the
CDI names to the engine in ``ContainerConfig.CDI_devices``, and only a containerd with CDI of
its own applies them (1.7 with ``enable_cdi = true``; on by default from 2.0). containerd 1.6
drops the field without a word (measured through its CRI: the container starts without a GPU),
so a pod given only that answer runs without its GPU."""

from __future__ import annotations

from nvct.base.release import parse_release
from nvct.doctor.context import DoctorContext
from nvct.doctor.result import CheckResult, failed, passed, skipped, warned
from nvct.doctor.tomlfiles import load_toml, table_at, with_imports

NAME = "device-plugin-cdi-cri"
CDI_SINCE = (1, 7)
CDI_DEFAULT_SINCE = (2, 0)


def containerd_release(ctx: DoctorContext) -> tuple[tuple[int, int], str] | None:
    """((major, minor), text) of ``containerd --version``; None when it does not answer."""
    if ctx.which("containerd") is None:
        return None
    done = ctx.run(["containerd", "--version"])
    return parse_release(done.stdout) if done.returncode == 0 else None


def enable_cdi(ctx: DoctorContext) -> bool | None:
    """``enable_cdi`` of containerd's CRI plugin as its config (and imports) set it; None: unset."""
    data, _ = load_toml(ctx.containerd_config)
    found = None
    for _, loaded in with_imports(ctx.containerd_config, data or {}) if data else []:
        for table in (table_at(loaded, ("plugins",)) or {}).values():
            if isinstance(table, dict) and isinstance(table.get("enable_cdi"), bool):
                found = table["enable_cdi"]
    return found


def check_cdi_cri(ctx: DoctorContext) -> CheckResult:
    """WARN (FAIL when it is the plugin's only strategy) where ``cdi-cri`` meets a containerd
    that does not apply CDI devices; SKIP without ``cdi-cri`` or without containerd."""
    strategies = list(ctx.config.device_plugin.device_list_strategy)
    if "cdi-cri" not in strategies:
        return skipped(NAME, f"device-list-strategy {','.join(strategies)}: no cdi-cri answer")
    release = containerd_release(ctx)
    if release is None:
        return skipped(NAME, "no containerd here (CRI-O applies CDI devices by default)")
    version, text = release
    cdi = enable_cdi(ctx)
    if version < CDI_SINCE:
        problem = f"containerd {text} has no CDI: it drops the kubelet's CDI devices"
        fix = (
            "upgrade containerd to 1.7 or later, then nvct-cli configure --runtime containerd --cdi"
        )
    elif cdi is False or (cdi is None and version < CDI_DEFAULT_SINCE):
        problem = f"containerd {text} has CDI off (enable_cdi) in {ctx.containerd_config}"
        fix = "nvct-cli configure --runtime containerd --cdi, then restart containerd"
    else:
        return passed(NAME, f"containerd {text} applies the cdi-cri answer's CDI devices")
    if "cdi-annotations" in strategies:
        return warned(
            NAME,
            f"{problem}; pods get their GPUs from the cdi-annotations answer only, which needs "
            "nvct-runtime as their runtime handler",
            fix,
        )
    return failed(
        NAME,
        f"{problem}: a pod given only the cdi-cri answer starts without its GPU",
        f"{fix}; or add cdi-annotations to [device-plugin] device-list-strategy",
    )
