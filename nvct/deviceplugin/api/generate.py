"""Generate ``v1beta1_pb2.py`` and ``v1beta1_pb2_grpc.py`` from ``v1beta1.proto`` (grpcio-tools).

``python -m nvct.deviceplugin.api.generate [--check]``: ``--check`` exits 1 when the checked-in
modules differ from what the .proto generates (tests/deviceplugin/test_api.py runs it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTPUTS = ("v1beta1_pb2.py", "v1beta1_pb2_grpc.py", "v1beta1_pb2.pyi")


def generate(out: Path) -> None:
    """Write the generated modules into ``out``.

    Raises:
        RuntimeError: protoc failed.
    """
    from grpc_tools import protoc

    code = protoc.main(
        [
            "protoc",
            f"-I{HERE}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(HERE / "v1beta1.proto"),
        ]
    )
    if code != 0:
        raise RuntimeError(f"protoc failed (exit {code})")
    grpc_module = out / "v1beta1_pb2_grpc.py"
    # Generated code imports its message module as a top-level one; here it is a package's.
    grpc_module.write_text(
        grpc_module.read_text().replace(
            "import v1beta1_pb2 as v1beta1__pb2",
            "from nvct.deviceplugin.api import v1beta1_pb2 as v1beta1__pb2",
        )
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry."""
    parser = argparse.ArgumentParser(prog="python -m nvct.deviceplugin.api.generate")
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    if not args.check:
        generate(HERE)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        stale = [n for n in OUTPUTS if (Path(tmp) / n).read_text() != (HERE / n).read_text()]
    if stale:
        print(f"stale generated modules: {', '.join(stale)} (fix: {parser.prog})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
