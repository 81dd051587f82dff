"""Generate a gRPC API package's Python modules from its .proto (grpcio-tools), and check that
the checked-in ones are current: ``<name>_pb2.py``, ``<name>_pb2_grpc.py``, ``<name>_pb2.pyi``.

Each API package (``nvct/deviceplugin/api``, ``nvct/podresources/api``) has a ``generate.py``
that calls ``main`` with its own folder; its drift test runs that with ``--check``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def outputs(name: str) -> tuple[str, ...]:
    """The generated file names of ``<name>.proto``."""
    return (f"{name}_pb2.py", f"{name}_pb2_grpc.py", f"{name}_pb2.pyi")


def generate(here: Path, name: str, package: str, out: Path) -> None:
    """Write the modules of ``here/<name>.proto`` into ``out``; ``package`` is the Python
    package they live in.

    Raises:
        RuntimeError: protoc failed.
    """
    from grpc_tools import protoc

    code = protoc.main(
        [
            "protoc",
            f"-I{here}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(here / f"{name}.proto"),
        ]
    )
    if code != 0:
        raise RuntimeError(f"protoc failed (exit {code})")
    grpc_module = out / f"{name}_pb2_grpc.py"
    alias = name.replace("_", "__") + "__pb2"
    # Generated code imports its message module as a top-level one; here it is a package's.
    grpc_module.write_text(
        grpc_module.read_text().replace(
            f"import {name}_pb2 as {alias}", f"from {package} import {name}_pb2 as {alias}"
        )
    )


def main(here: Path, name: str, package: str, argv: list[str] | None = None) -> int:
    """Command-line entry of an API package's ``generate.py``; ``--check`` compares only
    (exit 1 when a checked-in module differs from what the .proto generates)."""
    parser = argparse.ArgumentParser(prog=f"python -m {package}.generate")
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    if not args.check:
        generate(here, name, package, here)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(here, name, package, Path(tmp))
        stale = [n for n in outputs(name) if (Path(tmp) / n).read_text() != (here / n).read_text()]
    if stale:
        print(f"stale generated modules: {', '.join(stale)} (fix: {parser.prog})", file=sys.stderr)
        return 1
    return 0
