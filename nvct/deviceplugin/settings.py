"""The plugin's settings from all its inputs, in NVIDIA's precedence (flag > environment >
file > default): nvct's config.toml, then NVIDIA's config file (``--config-file`` /
``CONFIG_FILE``), then NVIDIA's environment names (NVIDIA's own flags arrive as their
environment names), then nvct's flags. Read again, from the same inputs, on a reload.

Every NVIDIA setting nvct cannot honour is one log line naming it and why.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from nvct.config import Config, load_config, with_settings
from nvct.config.flags import with_flags
from nvct.config.nvidia_plugin import Mapped, apply, environment, read_plugin_config
from nvct.node.guard import FIX as GUARD_FIX
from nvct.node.guard import envvar_without_guard_pass, node_guard

log = structlog.get_logger("nvct-device-plugin")


@dataclass(frozen=True)
class Inputs:
    """What the plugin was started with."""

    config_file: str | None = None  # nvct's config.toml (--config)
    env: Mapping[str, str] = field(default_factory=dict)  # NVIDIA's flags as their env names
    flags: Mapping[str, Any] = field(default_factory=dict)  # nvct's flags (None: not given)

    @property
    def nvidia_file(self) -> str | None:
        """NVIDIA's config file: ``--config-file``, else ``CONFIG_FILE``."""
        return self.env.get("CONFIG_FILE") or None


@dataclass(frozen=True)
class Settled:
    """The effective config, and the NVIDIA inputs it came from (file first)."""

    config: Config
    mapped: tuple[Mapped, ...]

    def nvidia_chose(self, nvct_key: str) -> bool:
        """Whether an NVIDIA input set ``nvct_key`` (and no nvct flag overrode it)."""
        return any(k == nvct_key for m in self.mapped for _, k, _ in m.settings)


def settle(inputs: Inputs) -> Settled:
    """The effective config.

    Raises:
        ConfigError: any input is invalid (the message names it, its key and the fix).
    """
    config = load_config(inputs.config_file)
    mapped: list[Mapped] = []
    if inputs.nvidia_file:
        mapped.append(read_plugin_config(Path(inputs.nvidia_file)))
        config = apply(config, mapped[-1])
    mapped.append(environment(inputs.env, ignored_xids=config.device_plugin.ignored_xids))
    config = apply(config, mapped[-1])
    config = with_flags(with_flags(config, "", inputs.flags), "device-plugin", inputs.flags)
    flagged = {
        f"device-plugin.{k.replace('_', '-')}" for k, v in inputs.flags.items() if v is not None
    }
    kept = tuple(_without(m, flagged) for m in mapped)
    return Settled(config, kept)


def _without(mapped: Mapped, keys: set[str]) -> Mapped:
    settings = tuple(s for s in mapped.settings if s[1] not in keys)
    return dataclasses.replace(mapped, settings=settings)


def say(settled: Settled) -> None:
    """One log line per NVIDIA setting taken, and per one nvct cannot honour."""
    for mapped in settled.mapped:
        for key, nvct_key, value in mapped.settings:
            log.info("nvidia_setting", source=mapped.source, key=key, nvct=nvct_key, value=value)
        for key, value, why in mapped.unmapped:
            log.warning("nvidia_setting_ignored", source=mapped.source, key=key, value=value,
                        why=why)  # fmt: skip


def check_guard(settled: Settled, own_file: str) -> Config:
    """Say, at start, when the node's leak guard drops every answer this plugin gives; the
    config to run with.

    An ``envvar``-only answer chosen by NVIDIA's settings (the GPU operator's default) gets
    ``cdi-annotations`` added, which the guard lets through: the operator offers no other form
    without CDI, and the pods would get no GPU. Chosen in nvct's own config, it is kept and
    called an error: a form the operator did not choose would hide the mistake.

    Raises:
        ConfigError: runtime-config names an invalid config.
    """
    config = settled.config
    guarded, where = node_guard(config, own_file)
    strategies = config.device_plugin.device_list_strategy
    problem = envvar_without_guard_pass(strategies, guarded, where)
    if problem is None:
        return config
    if settled.nvidia_chose("device-plugin.device-list-strategy"):
        log.warning(
            "envvar_guarded_node",
            problem=problem,
            done="answering cdi-annotations too (nvct-runtime resolves them; the guard passes "
            "them)",
        )
        return with_settings(config, "device-plugin", device_list_strategy=(
            *strategies, "cdi-annotations"))  # fmt: skip
    log.error("envvar_ignored_by_guard", problem=problem, fix=GUARD_FIX)
    print(f"nvct-device-plugin: error: {problem} (fix: {GUARD_FIX})", file=sys.stderr)
    return config
