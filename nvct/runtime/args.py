"""runc's command line, as far as the shim needs it (subcommand, bundle, log file).

Mirrors runc's urfave/cli flags: global flags before the subcommand, ``--flag value``,
``--flag=value`` and single-dash long forms all accepted; the last ``--bundle`` wins.
"""

from __future__ import annotations

GLOBAL_VALUE_FLAGS = frozenset({"log", "log-format", "root", "criu", "rootless"})
BUNDLE_FLAGS = frozenset({"bundle", "b"})
SUB_VALUE_FLAGS = BUNDLE_FLAGS | {"console-socket", "pid-file", "preserve-fds"}
OWN_CONFIG_FLAG = "--nvct-config"


class RuncArgs:
    """What the shim reads from runc's argv (a slotted class: no dataclasses on this path)."""

    __slots__ = ("bundle", "container_id", "log_file", "log_format", "subcommand")

    def __init__(
        self, *, subcommand: str, bundle: str, container_id: str, log_file: str, log_format: str
    ) -> None:
        self.subcommand = subcommand
        self.bundle = bundle  # "" = the working directory
        self.container_id = container_id
        self.log_file = log_file
        self.log_format = log_format

    def __repr__(self) -> str:
        return (
            f"RuncArgs(subcommand={self.subcommand!r}, bundle={self.bundle!r}, "
            f"container_id={self.container_id!r})"
        )


def strip_own_flags(argv: list[str]) -> tuple[str | None, list[str]]:
    """Remove ``--nvct-config PATH`` (set via docker's runtimeArgs); runc must not see it."""
    out: list[str] = []
    config = None
    it = iter(argv)
    for arg in it:
        if arg == OWN_CONFIG_FLAG:
            config = next(it, None)
        elif arg.startswith(OWN_CONFIG_FLAG + "="):
            config = arg.split("=", 1)[1]
        else:
            out.append(arg)
    return config, out


def parse_runc_args(argv: list[str]) -> RuncArgs:
    """Find the subcommand and the flags the shim cares about in runc's argv (without argv[0])."""
    subcommand = ""
    bundle = ""
    container_id = ""
    values: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            if subcommand and not container_id and i < len(argv):
                container_id = argv[i]
            break
        if arg.startswith("-") and arg != "-":
            name, eq, value = arg.lstrip("-").partition("=")
            takes_value = name in (SUB_VALUE_FLAGS if subcommand else GLOBAL_VALUE_FLAGS)
            if takes_value and not eq:
                value = argv[i] if i < len(argv) else ""
                i += 1
            if takes_value:
                values[name] = value
                if subcommand and name in BUNDLE_FLAGS:
                    bundle = value
            continue
        if not subcommand:
            subcommand = arg
        elif not container_id:
            container_id = arg
    return RuncArgs(
        subcommand=subcommand,
        bundle=bundle,
        container_id=container_id,
        log_file=values.get("log", ""),
        log_format=values.get("log-format", "text"),
    )
