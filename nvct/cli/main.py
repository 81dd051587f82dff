"""Root of ``nvct-cli``: global options, lazy subcommands, one error handler."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any

import click

from nvct._version import __version__
from nvct.base.errors import NvctError
from nvct.config import Config, load_config
from nvct.config.flags import flag_options, with_flags

# name -> "module:attribute"; imported only when the subcommand runs (fast --help, fast list).
SUBCOMMANDS: dict[str, str] = {
    "info": "nvct.cli.inventory_cmds:info",
    "list": "nvct.cli.inventory_cmds:list_cmd",
    "configure": "nvct.cli.configure_cmd:configure",
    "cdi": "nvct.cli.cdi_cmd:cdi",
    "explain": "nvct.cli.explain_cmd:explain",
    "doctor": "nvct.cli.doctor_cmd:doctor",
    "daemon": "nvct.cli.daemon_cmd:daemon",
    "labels": "nvct.cli.labels_cmd:labels",
    "device-plugin-status": "nvct.cli.plugin_status_cmd:device_plugin_status",
    "device-plugin-health": "nvct.cli.plugin_health_cmd:device_plugin_health",
    "exporter": "nvct.cli.exporter_cmd:exporter",
    "mps-control": "nvct.cli.mps_cmd:mps_control",
    "node-label": "nvct.cli.node_label_cmd:node_label",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use (click docs' recipe)."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module, attr = self.lazy[cmd_name].split(":")
            command = getattr(importlib.import_module(module), attr)
            assert isinstance(command, click.Command)  # noqa: S101 - programming error
            return command
        return super().get_command(ctx, cmd_name)


@dataclass
class CliContext:
    """What every subcommand gets: the config file choice and the top-level keys' flags."""

    config_file: str | None
    flags: dict[str, Any]  # by field name; None: not given
    use_cache: bool
    _config: Config | None = None
    _logger: Any = None

    @property
    def config(self) -> Config:
        """The effective config, loaded once (errors surface as NvctError)."""
        if self._config is None:
            self._config = with_flags(load_config(self.config_file), "", self.flags)
        return self._config

    def event(self, name: str, **fields: Any) -> None:
        """Record a change nvct made to the host in its JSON log (structlog, lazily set up)."""
        if self._logger is None:
            from nvct.base.log import configure_structlog

            try:
                config = self.config
            except NvctError:  # an invalid config must not stop configure from being logged
                config = Config()
            self._logger = configure_structlog(config.log.file, config.log.level)
        self._logger.info(name, **fields)


@click.group(
    cls=LazyGroup, lazy=SUBCOMMANDS, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(__version__, prog_name="nvct-cli")
@click.option(
    "--config",
    "config_file",
    metavar="PATH",
    help="nvct config.toml (default: $NVCT_CONFIG or /etc/nvct/config.toml).",
)
@flag_options("")  # the top-level keys declared with a flag: --driver-root, --dev-root...
@click.option(
    "--no-cache", is_flag=True, help="Rediscover the driver instead of using the inventory cache."
)
@click.pass_context
def cli(ctx: click.Context, /, config_file: str | None, no_cache: bool, **flags: Any) -> None:
    """Inspect, configure and diagnose GPU injection into containers."""
    ctx.obj = CliContext(config_file, flags, not no_cache)


def main(argv: list[str] | None = None) -> int:
    """Entry point: NvctError becomes one line on stderr and exit 1."""
    try:
        rc = cli.main(args=argv, prog_name="nvct-cli", standalone_mode=False)
    except NvctError as err:
        click.echo(f"nvct-cli: error: {err.one_line()}", err=True)
        return err.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 1
    except click.ClickException as err:
        err.show()
        return err.exit_code
    except click.exceptions.Exit as err:
        return err.exit_code
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
