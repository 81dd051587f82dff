"""``nvct-cli doctor``: check the driver, device nodes, nvct and the engines; exit 1 on FAIL."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nvct.base.defaults import CDI_SPEC_DIRS
from nvct.cli.main import CliContext
from nvct.config import Config
from nvct.doctor import DoctorContext, run_doctor
from nvct.doctor.config_check import check_config
from nvct.doctor.context import DEFAULT_CDI_DIRS, InventoryLoader, SpecGenerator

if TYPE_CHECKING:
    from nvct.host.inventory import Inventory

_PATH = click.Path(path_type=Path)


def inventory_loader(config: Config) -> InventoryLoader:
    """The driver's inventory, discovered once (no cache) on first use; None when the driver
    cannot be discovered (the nvml check says why)."""

    @functools.cache
    def load() -> Inventory | None:
        from nvct.base.errors import NvctError
        from nvct.host.load import load_inventory

        try:
            return load_inventory(config, use_cache=False)
        except NvctError:
            return None

    return load


def cdi_generator(config: Config, inventory: InventoryLoader) -> SpecGenerator:
    """What ``cdi generate`` would write now for a spec on disk (its kind, names and hook),
    from a fresh inventory; None when the driver cannot be discovered."""

    def generate(on_disk: Mapping[str, Any]) -> dict[str, Any] | None:
        from nvct.base.errors import NvctError
        from nvct.host.arch import host_arch
        from nvct.plan.cdi_spec import build_spec, hook_program, options_like

        options, hook = options_like(on_disk)
        found = inventory()
        if found is None:
            return None
        try:
            return build_spec(  # doctor makes no library directory: it says one is missing
                found,
                config,
                host_arch(),
                options=options,
                hook=hook or hook_program(),
                create=False,
            )
        except NvctError:
            return None

    return generate


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option(
    "--fix-dev-char", is_flag=True, help="Create missing /dev/char links for NVIDIA device nodes."
)
@click.option("--docker-config", type=_PATH, help="daemon.json to check (default: the daemon's).")
@click.option("--docker-host", metavar="URL", help="dockerd to ask (default: $DOCKER_HOST).")
@click.option(
    "--docker-pidfile", type=_PATH, default=Path("/var/run/docker.pid"), show_default=True
)
@click.option(
    "--containerd-config",
    type=_PATH,
    default=Path("/etc/containerd/config.toml"),
    show_default=True,
)
@click.option("--crio-config", type=_PATH, default=Path("/etc/crio/crio.conf"), show_default=True)
@click.option(
    "--crio-dropin-dir", type=_PATH, default=Path("/etc/crio/crio.conf.d"), show_default=True
)
@click.option(
    "--cdi-dir",
    "cdi_dirs",
    type=_PATH,
    multiple=True,
    help=f"CDI spec directory, repeatable (default: {' and '.join(CDI_SPEC_DIRS)}).",
)
@click.option("--sysfs-root", type=_PATH, default=Path("/sys"), show_default=True)
@click.option(
    "--host-proc",
    type=_PATH,
    default=Path("/proc"),
    show_default=True,
    help="procfs for daemon processes (--proc-root is the driver's).",
)
@click.option("--snap-dir", type=_PATH, default=Path("/snap"), show_default=True)
@click.option(
    "--kubernetes/--no-kubernetes",
    default=None,
    help="Run the Kubernetes node checks (default: when the kubelet's device-plugins dir exists).",
)
@click.option(
    "--plugin-dir",
    type=_PATH,
    help="The kubelet's device-plugins dir (default: [device-plugin] plugin-dir).",
)
@click.pass_obj
def doctor(
    obj: CliContext,
    as_json: bool,
    fix_dev_char: bool,
    docker_config: Path | None,
    docker_host: str | None,
    docker_pidfile: Path,
    containerd_config: Path,
    crio_config: Path,
    crio_dropin_dir: Path,
    cdi_dirs: tuple[Path, ...],
    sysfs_root: Path,
    host_proc: Path,
    snap_dir: Path,
    kubernetes: bool | None,
    plugin_dir: Path | None,
) -> None:
    """Check everything GPU containers depend on: PASS / WARN / FAIL, each FAIL with its fix.

    Always rediscovers the driver (no inventory cache) and validates the config file in full.
    """
    config, config_result = check_config(obj.config_file, obj.flags)
    inventory = inventory_loader(config)
    ctx = DoctorContext(
        config=config,
        config_file=obj.config_file,
        docker_config=docker_config,
        docker_host=docker_host,
        docker_pidfile=docker_pidfile,
        containerd_config=containerd_config,
        crio_config=crio_config,
        crio_dropin_dir=crio_dropin_dir,
        cdi_dirs=cdi_dirs or DEFAULT_CDI_DIRS,
        sysfs_root=sysfs_root,
        host_proc=host_proc,
        snap_dir=snap_dir,
        cdi_generate=cdi_generator(config, inventory),
        inventory=inventory,
        kubernetes=kubernetes,
        plugin_dir=plugin_dir,
    )
    report = run_doctor(ctx, (config_result,), fix_dev_char=fix_dev_char)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo("\n".join(report.to_text()))
    if report.failed:
        raise SystemExit(1)  # click's Exit would be swallowed by main()'s standalone_mode=False
