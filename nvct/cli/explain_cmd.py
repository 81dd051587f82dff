"""``nvct-cli explain``: what nvct would inject into a container, and why."""

from __future__ import annotations

import json
from pathlib import Path

import click

from nvct.base.errors import SpecError
from nvct.base.oci import load_spec
from nvct.cli.main import CliContext
from nvct.host.arch import host_arch
from nvct.host.load import load_inventory
from nvct.plan import explain as explaining


@click.command("explain")
@click.option("--env", "-e", "env", multiple=True, metavar="K=V", help="Container env, repeatable.")
@click.option(
    "--unprivileged", is_flag=True, help="With --env: treat the container as unprivileged."
)
@click.option(
    "--bundle",
    type=click.Path(path_type=Path, file_okay=False),
    help="OCI bundle directory (reads its config.json and rootfs).",
)
@click.option("--container", metavar="ID", help="A docker container (via docker inspect).")
@click.option(
    "--docker-host", metavar="URL", help="dockerd for --container (default: DOCKER_HOST)."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def explain(
    obj: CliContext,
    env: tuple[str, ...],
    unprivileged: bool,
    bundle: Path | None,
    container: str | None,
    docker_host: str | None,
    as_json: bool,
) -> None:
    """Show the devices, mounts and symlinks nvct would inject, each with its reason, the
    requirements (PASS/FAIL with the values compared) and the policy decisions.

    Exit status 1 when a requirement fails or a device is unknown, as the hook would refuse.
    """
    inp = _input(env, unprivileged, bundle, container, docker_host)
    config = obj.config
    arch = host_arch()
    result = explaining.explain(
        inp, config, lambda: load_inventory(config, use_cache=obj.use_cache), arch
    )
    if as_json:
        click.echo(json.dumps(explaining.explanation_to_dict(result, arch), indent=2))
    else:
        click.echo("\n".join(explaining.explanation_to_text(result, arch)))
    if result.error:
        click.echo(f"nvct-cli: error: {result.error}", err=True)
    if not result.ok:
        raise SystemExit(1)  # click's Exit would be swallowed by main()'s standalone_mode=False


def _input(
    env: tuple[str, ...],
    unprivileged: bool,
    bundle: Path | None,
    container: str | None,
    docker_host: str | None,
) -> explaining.ContainerInput:
    given = [
        name for name, v in (("--env", env), ("--bundle", bundle), ("--container", container)) if v
    ]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --env (repeatable), --bundle or --container")
    if bundle is not None:
        return explaining.input_from_bundle(bundle.absolute(), load_spec(bundle.absolute()))
    if container is not None:
        from nvct.doctor.context import run_command

        return explaining.input_from_inspect(
            explaining.docker_inspect(container, run_command, docker_host)
        )
    if not env:
        raise SpecError("no --env given")
    return explaining.input_from_env(env, privileged=not unprivileged)
