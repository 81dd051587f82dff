"""Why grpc cannot be imported, in one line with the fix.

The .deb and .rpm install grpcio (compiled for one CPython: the target's) and protobuf into
``/usr/lib/nvct/grpc``, which only the launchers of nvct-device-plugin and nvct-cli append to
``sys.path``. After the system Python is upgraded past the one the package was built for, the
compiled ``grpc._cython.cygrpc`` no longer loads: the grpcio wheel's own ``WHEEL`` tag says which
Python it was built for, so the message can name both versions and the fix.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

FIX = "reinstall the nvct package built for Python {running}, or run nvct's container image"


def grpc_built_for() -> tuple[str, str] | None:
    """(directory, ``X.Y``) of the first grpcio on ``sys.path``, from its wheel's ``cpXY`` tag;
    None when there is none or it carries no such tag."""
    for entry in sys.path:
        for info in sorted(Path(entry or ".").glob("grpcio-*.dist-info")):
            try:
                text = (info / "WHEEL").read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(":")
                python = value.strip().split("-", 1)[0]
                if key.strip() == "Tag" and python.startswith("cp") and python[2:].isdigit():
                    return entry, f"{python[2]}.{python[3:]}"
    return None


def grpc_unimportable(err: ImportError) -> str:
    """One line: why ``import grpc`` (or protobuf) failed, and the fix."""
    running = "{}.{}".format(*sys.version_info[:2])
    fix = FIX.format(running=running)
    found = grpc_built_for()
    if found is None:
        return (
            f"grpc is not installed for {sys.executable} ({err}): install grpcio and protobuf "
            "(pip install nvct installs them), or use nvct's .deb, .rpm or container image"
        )
    where, built = found
    if built != running:
        return (
            f"the grpc in {where} is built for Python {built}, but this is Python {running} "
            f"({sys.executable}): {fix}"
        )
    return f"cannot import {err.name or 'grpc'} from {where} ({err}): {fix}"


def require_grpc(program: str) -> None:
    """Exit 1 with one line on stderr when grpcio or protobuf cannot be imported."""
    try:
        for module in ("grpc", "google.protobuf"):
            importlib.import_module(module)
    except ImportError as err:
        print(f"{program}: error: {grpc_unimportable(err)}", file=sys.stderr)
        raise SystemExit(1) from None
