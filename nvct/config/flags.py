"""Command-line flags from a table's declarations (``nvct.config.declare``): every key declared
with ``flag=`` becomes ``--<its toml name>``, typed by its schema (one of an enum, a number's
range, a path, true/false as ``--x/--no-x``, a list of an enum as a comma list), its help
naming the key and its default. Flags override the file's values by field name. Section ``""``
is config.toml's top level (``--driver-root``...), without its tables.

For the frontends only (it imports click).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from nvct.base.errors import ConfigError
from nvct.config import SECTIONS, Config, with_settings
from nvct.config.declare import Key, declared

F = TypeVar("F", bound=Callable[..., Any])


def _keys(cls: type, where: str) -> list[tuple[str, str, Key, Any, str]]:
    """(field, toml name, declaration, default, table) of every key of ``cls`` with a flag
    (those of its nested tables too, except at the top level: each table has flags of its own)."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    out = []
    for attr, name, decl in declared(cls):
        if decl.table is not None:
            if where:
                out += _keys(decl.table, f"{where}.{name}")
        elif decl.flag:
            out.append((attr, name, decl, defaults[attr], where))
    return out


def _section_keys(section: str) -> list[tuple[str, str, Key, Any, str]]:
    return _keys(SECTIONS[section][1] if section else Config, section)


def _option(attr: str, name: str, decl: Key, default: Any, where: str) -> Callable[[F], F]:
    schema = decl.schema
    if isinstance(default, bool):
        shown = str(default).lower()  # as config.toml writes it
    else:
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
    table = f"[{where}] " if where else "config.toml "
    text = f"{decl.flag} {table}{name}; default {shown!s}." if shown != "" else decl.flag
    kind: Any = None
    if "enum" in schema:
        kind = click.Choice(schema["enum"])
    elif schema.get("type") == "array" and "enum" in schema.get("items", {}):
        text = f"{text} A comma list of {', '.join(schema['items']['enum'])}."
    elif schema.get("type") == "boolean":
        return click.option(f"--{name}/--no-{name}", attr, default=None, help=text)
    elif schema.get("type") == "number":
        kind = click.FloatRange(min=schema.get("minimum"), max=schema.get("maximum"))
    elif schema.get("type") == "integer":
        kind = click.IntRange(min=schema.get("minimum"), max=schema.get("maximum"))
    elif decl.path:
        kind = click.Path(file_okay=decl.path != "dir", dir_okay=decl.path != "file")
    return click.option(f"--{name}", attr, type=kind, default=None, help=text)


def flag_options(section: str, *, exclude: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Decorate a click command with the flags of the declared table ``section``."""
    keys = [k for k in _section_keys(section) if k[1] not in exclude]

    def decorate(command: F) -> F:
        for key in reversed(keys):
            command = _option(*key)(command)
        return command

    return decorate


def with_flags(config: Config, section: str, flags: Mapping[str, Any]) -> Config:
    """``config`` with the flags of ``section`` that were given (not None) set.

    Raises:
        ConfigError: a comma list names a value its key does not allow.
    """
    values: dict[str, Any] = {}
    for attr, name, decl, _, _ in _section_keys(section):
        value = flags.get(attr)
        if value is None:
            continue
        items = decl.schema.get("items", {})
        if decl.schema.get("type") == "array" and "enum" in items:
            value = tuple(s.strip() for s in value.split(",") if s.strip())
            if not value or any(s not in items["enum"] for s in value):
                raise ConfigError(
                    f"--{name} {flags[attr]!r}: use one or more of {', '.join(items['enum'])}"
                )
        elif decl.path:
            value = str(Path(value).absolute() if decl.absolute else Path(value))
        values[attr] = value if decl.load is None else decl.load(value)
    return with_settings(config, section, **values)


_TRUE = ("true", "1", "t")
_FALSE = ("false", "0", "f")


def bool_values(args: list[str], command: click.Command) -> list[str]:
    """``args`` with NVIDIA's (urfave/cli's) ``--flag=true|false`` for ``command``'s on/off
    flags rewritten as click takes them (``--flag``, ``--no-flag``, or nothing where the flag
    has no off form): ``--fail-on-init-error=false`` works as it does for NVIDIA's plugin.

    Raises:
        click.BadParameter: a value other than true or false (Go's spellings).
    """
    flags: dict[str, click.Option] = {}
    for param in command.params:
        if isinstance(param, click.Option) and param.is_flag:
            flags.update((name, param) for name in param.opts)
    out: list[str] = []
    for arg in args:
        name, eq, value = arg.partition("=")
        option = flags.get(name) if eq and arg.startswith("--") else None
        if option is None:
            out.append(arg)
            continue
        if value.lower() in _TRUE:
            out.append(name)
        elif value.lower() in _FALSE:
            out.extend(option.secondary_opts[:1])  # a flag without an off form: left out
        else:
            raise click.BadParameter(f"{arg!r}: use {name}=true or {name}=false")
    return out
