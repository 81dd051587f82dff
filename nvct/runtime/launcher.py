"""Install the POSIX-shell ``nvct-runtime`` launcher (see launcher.sh for why).

``python -m nvct.runtime.launcher --output PATH [--python-command CMD] [--config FILE]``
writes the launcher with CMD (default: this interpreter, isolated, running ``nvct.runtime``)
as its Python path, and FILE (default ``/etc/nvct/config.toml``) as the config it uses when
``NVCT_CONFIG`` is unset. A launcher per config serves an engine that registers several nvct
runtimes without ``runtimeArgs`` (dockerd wraps a runtime with arguments in one more shell
script, run on every runtime call).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from nvct.atomic import write_atomic
from nvct.defaults import DEFAULT_PATH


def render(python_command: str, config: str = DEFAULT_PATH) -> str:
    """The launcher script with ``python_command`` as the way to start the Python shim."""
    template = (Path(__file__).parent / "launcher.sh").read_text()
    return template.replace("@RUNTIME_PY@", python_command).replace(
        "@DEFAULT_CONFIG@", shlex.quote(config)
    )


def default_command() -> str:
    """This interpreter, isolated and without site (``-I -S``), told where nvct lives."""
    import nvct

    home = os.path.dirname(os.path.dirname(os.path.abspath(nvct.__file__)))
    code = (
        f"import sys; sys.path.insert(0, {home!r}); "
        "from nvct.runtime.__main__ import main; sys.exit(main())"
    )
    return f"{shlex.quote(sys.executable)} -I -S -c {shlex.quote(code)}"


def install(output: Path, python_command: str, config: str = DEFAULT_PATH) -> None:
    """Write the launcher atomically with mode 0755."""
    write_atomic(str(output), render(python_command, config).encode(), 0o755)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry."""
    parser = argparse.ArgumentParser(prog="python -m nvct.runtime.launcher")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--python-command", default=default_command())
    parser.add_argument(
        "--config", default=DEFAULT_PATH, help="config file when NVCT_CONFIG is unset"
    )
    args = parser.parse_args(argv)
    install(args.output, args.python_command, args.config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
