"""``nvct-cli cdi generate`` and ``nvct-cli cdi list``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from nvct.base.defaults import CDI_LIBRARY_DIR, CDI_SPEC_DIRS
from nvct.base.errors import EngineConfigError
from nvct.cli.main import CliContext


@click.group()
def cdi() -> None:
    """CDI specs for the host's GPUs (podman, containerd, CRI-O, docker >= 25)."""


def spec_text(spec: dict[str, object], fmt: str) -> str:
    """The spec rendered in ``fmt`` (json or yaml)."""
    from nvct.plan.cdi_spec import to_json, to_yaml

    return to_yaml(spec) if fmt == "yaml" else to_json(spec)


def output_format(output: Path | None, fmt: str | None) -> str:
    """The explicit format, else the one the output file's suffix names, else JSON."""
    if fmt:
        return fmt
    if output is not None and output.suffix in (".yaml", ".yml"):
        return "yaml"
    return "json"


@cdi.command()
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the spec here (atomically; e.g. /etc/cdi/nvct.json). Default: stdout.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "yaml"]),
    help="Output format (default: from the --output suffix, else json).",
)
@click.option(
    "--device-name-strategy",
    type=click.Choice(["index", "uuid", "both"]),
    default="both",
    show_default=True,
    help="Name devices by index (0, 0:1), by UUID (GPU-..., MIG-...), or both (as NVIDIA's).",
)
@click.option(
    "--vendor",
    "--cdi-vendor",
    default=None,
    help="The kind's vendor (default nvidia.com; management.nvidia.com with --mode management).",
)
@click.option(
    "--class", "--cdi-class", "cls", default="gpu", show_default=True, help="The kind's class."
)
@click.option(
    "--device-id",
    "device_ids",
    multiple=True,
    help="Only these GPUs / MIG devices, by index (0, 0:1) or UUID (repeatable or a comma list; "
    "default: all).",
)
@click.option(
    "--mode",
    type=click.Choice(["nvml", "management"]),
    default="nvml",
    show_default=True,
    help="nvml: a device per GPU; management: one 'all' device with every NVIDIA device node "
    "(for monitoring and operator containers).",
)
@click.option(
    "--hook-path",
    metavar="PATH",
    help="The nvct-cdi-hook the spec runs (default: this installation's, beside nvct-cli).",
)
@click.option(
    "--kind",
    type=click.Choice(["gpu", "imex-channel"]),
    default="gpu",
    show_default=True,
    help="nvidia.com/gpu (the GPUs and the driver), or nvidia.com/imex-channel (one device per "
    "IMEX channel node of the host).",
)
@click.option(
    "--library-mounts",
    type=click.Choice(["files", "directory"]),
    default="files",
    show_default=True,
    help="files: one mount per driver library (as NVIDIA's specs); directory: one mount of a "
    "directory of hard links of them made under --library-dir (faster starts; the libraries "
    "and that directory must share a filesystem, else the spec keeps one mount per library).",
)
@click.option(
    "--library-dir",
    metavar="DIR",
    default=CDI_LIBRARY_DIR,
    show_default=True,
    help="Where --library-mounts directory makes the directory the spec names (not a cache: "
    "the spec needs it for as long as it is used).",
)
@click.option(
    "--driver-capabilities",
    metavar="LIST",
    default="",
    help="Only the driver files these capabilities need (NVIDIA_DRIVER_CAPABILITIES's names, "
    "a comma list: compute,utility for CUDA and nvidia-smi; fewer mounts, faster starts). "
    "Default: every capability the host can serve, as NVIDIA's spec.",
)
@click.pass_obj
def generate(
    obj: CliContext,
    output: Path | None,
    fmt: str | None,
    device_name_strategy: str,
    vendor: str | None,
    cls: str,
    device_ids: tuple[str, ...],
    mode: str,
    hook_path: str | None,
    kind: str,
    library_mounts: str,
    library_dir: str,
    driver_capabilities: str,
) -> None:
    """Generate a CDI spec (kind nvidia.com/gpu, or nvidia.com/imex-channel) from the host."""
    from nvct.engines.files import FileChange, apply_change, read_config
    from nvct.host.arch import host_arch
    from nvct.host.load import load_inventory
    from nvct.plan.cdi_spec import SpecOptions, build_spec, hook_program, library_dir_mounts

    ids = tuple(i.strip() for item in device_ids for i in item.split(",") if i.strip())
    if ids and mode == "management":
        raise EngineConfigError(
            "--device-id selects GPUs, and a management spec has one device with every node",
            hint="drop --device-id, or generate with --mode nvml",
        )
    if library_mounts == "directory" and not library_dir.startswith("/"):
        raise EngineConfigError(
            f"--library-dir {library_dir!r} is not absolute", hint="give an absolute path"
        )
    root = library_dir if library_mounts == "directory" else ""
    caps = tuple(c.strip() for c in driver_capabilities.split(",") if c.strip())
    if "all" in caps:  # as in NVIDIA_DRIVER_CAPABILITIES
        caps = ()
    options = SpecOptions(device_name_strategy, vendor, cls, ids, mode, root, caps)
    problems: list[str] = []
    inventory = load_inventory(obj.config, use_cache=obj.use_cache)
    if kind == "imex-channel":
        from nvct.plan.cdi_imex import build_imex_spec

        spec = build_imex_spec(inventory)
    else:
        hook = hook_program(hook_path)
        spec = build_spec(
            inventory, obj.config, host_arch(), options=options, hook=hook, problems=problems
        )
    for problem in problems:
        obj.event("cdi_library_dir_failed", problem=problem)
        click.echo(f"warning: --library-mounts directory: {problem}", err=True)
    text = spec_text(spec, output_format(output, fmt))
    if output is None:
        click.echo(text, nl=False)
        return
    output = output.absolute()
    if output.suffix not in (".json", ".yaml", ".yml"):
        raise EngineConfigError(
            f"{output}: CDI registries only read *.json and *.yaml files",
            hint="name the output file with a .json or .yaml suffix",
        )
    applied = apply_change(FileChange(output, read_config(output), text))
    devices = len(spec["devices"])
    state = "unchanged" if applied.action == "unchanged" else "written"
    if state == "written":
        obj.event(
            "cdi_spec_written",
            file=str(output),
            devices=devices,
            driver_version=inventory.driver_version,
        )
    libdirs = library_dir_mounts(spec.get("containerEdits", {}), root)
    shape = ""
    if libdirs:
        count = "one directory" if len(libdirs) == 1 else f"{len(libdirs)} directories"
        shape = f", the libraries as {count} under {root}"
    click.echo(f"{output}: {state} ({devices} devices, driver {inventory.driver_version}{shape})")


@cdi.command("list")
@click.option(
    "--spec-dir",
    "spec_dirs",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False),
    help=f"Directory of CDI specs (repeatable; default {' and '.join(CDI_SPEC_DIRS)}).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_cmd(spec_dirs: tuple[Path, ...], as_json: bool) -> None:
    """Print the CDI device names (nvidia.com/gpu=0 ...) the spec directories define."""
    from nvct.cdi.registry import SPEC_DIRS, list_devices

    listing = list_devices(spec_dirs or SPEC_DIRS)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "devices": [{"name": n, "spec": str(p)} for n, p in listing.devices],
                    "problems": list(listing.problems),
                },
                indent=2,
            )
        )
        return
    for name, _ in listing.devices:
        click.echo(name)
    for problem in listing.problems:
        click.echo(f"warning: {problem}", err=True)
