"""Which entry of the mounted ConfigMap a label value names: NVIDIA's rules.

A set label must name an entry. An unset (or empty) label takes ``default`` when given (which
must exist), else the fallback strategies in order: ``named`` (an entry called ``default``),
``single`` (the only entry), ``empty`` (no config: the plugin's defaults)."""

from __future__ import annotations

from pathlib import Path

from nvct.base.errors import NvctError

FALLBACKS = ("named", "single", "empty")
NAMED_FALLBACK = "default"
# The empty config: the plugin runs on its defaults (NVIDIA links its config to /dev/null).
EMPTY = ""


class SelectError(NvctError):
    """No entry can be chosen for the label's value."""


def entries(srcdir: Path) -> list[str]:
    """The entries of a ConfigMap mounted at ``srcdir``: its files, without the kubelet's
    ``..data``-style bookkeeping names."""
    try:
        names = [p.name for p in srcdir.iterdir() if not p.name.startswith("..") and p.is_file()]
    except OSError as err:
        raise SelectError(
            f"cannot read the config directory {srcdir}: {err.strerror}",
            hint="mount the ConfigMap there (CONFIG_FILE_SRCDIR)",
        ) from err
    return sorted(names)


def check_fallbacks(fallbacks: tuple[str, ...]) -> None:
    unknown = [f for f in fallbacks if f not in FALLBACKS]
    if unknown:
        raise SelectError(
            f"unknown fallback strategy {unknown[0]!r} in FALLBACK_STRATEGIES",
            hint=f"use a comma-separated list of {', '.join(FALLBACKS)}",
        )


def choose(label: str, available: list[str], default: str, fallbacks: tuple[str, ...]) -> str:
    """The entry to use (``EMPTY`` for none); SelectError when the rules find none."""
    if not available:
        raise SelectError(
            "the config directory holds no configuration",
            hint="add entries to the ConfigMap (one key per named config)",
        )
    if label:
        if label not in available:
            raise SelectError(
                f"the node label names config {label!r}, which the ConfigMap does not have "
                f"(it has {', '.join(available)})",
                hint="set the label to one of them, or add that entry to the ConfigMap",
            )
        return label
    if default:
        if default not in available:
            raise SelectError(
                f"the default config {default!r} is not in the ConfigMap "
                f"(it has {', '.join(available)})",
                hint="set DEFAULT_CONFIG (the chart's config.default) to one of them",
            )
        return default
    for fallback in fallbacks:
        if fallback == "named" and NAMED_FALLBACK in available:
            return NAMED_FALLBACK
        if fallback == "single" and len(available) == 1:
            return available[0]
        if fallback == "empty":
            return EMPTY
    raise SelectError(
        f"no config was set, no default was given, and every fallback failed "
        f"(strategies: {', '.join(fallbacks) or 'none'}; entries: {', '.join(available)})",
        hint="label the node, set DEFAULT_CONFIG, or add 'empty' to FALLBACK_STRATEGIES",
    )
