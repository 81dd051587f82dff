"""Install the ``nvct-runtime`` launcher: native (launcher.c) or POSIX shell (launcher.sh).

``python -m nvct.runtime.launch.build --output PATH [--native [--socket SOCK]]
[--python-command CMD] [--config FILE]`` writes the launcher with CMD (default: this
interpreter, isolated, running ``nvct.runtime``) as the way to start the Python shim, and
FILE (default ``/etc/nvct/config.toml``) as the config it uses when ``NVCT_CONFIG`` is unset.
A launcher per config serves an engine that registers several nvct runtimes without
``runtimeArgs`` (dockerd wraps a runtime with arguments in one more shell script, run on
every runtime call).

Both launchers exec runc for every call but a GPU container's create without starting an
interpreter. The native one (built with the C compiler ``$CC``, default ``cc``, and
``$CPPFLAGS $CFLAGS $LDFLAGS``) costs less per call, and it hands a GPU container's create to
the shim daemon listening on SOCK (default ``/run/nvct/shim.sock``, ``--socket ''``: none),
which prepares the bundle with warm modules instead of a fresh interpreter.

``--native --hook`` builds the native prestart hook (``hook.c``: ``nvct-hook``,
``nvidia-container-runtime-hook``) instead, whose Python fallback is CMD (default: this
interpreter running ``nvct.hook.__main__``); it asks the same daemon. ``--native --cdi-hook``
builds the native createContainer hook of CDI specs (``cdihook.c``: ``nvct-cdi-hook``), whose
Python fallback is CMD (default: this interpreter running ``nvct.hook.cdi``); it asks no daemon.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from nvct.base._site import module_argv
from nvct.base.atomic import write_atomic
from nvct.base.defaults import DEFAULT_PATH, DEFAULT_SOCKET
from nvct.runtime.launch import tables
from nvct.runtime.launch.code_id import code_id

SOURCE = Path(__file__).parent / "launcher.c"
# The native prestart hook (nvct-hook, nvidia-container-runtime-hook): asks the same daemon.
HOOK_SOURCE = Path(__file__).parent / "hook.c"
# The native createContainer hook of nvct's CDI specs (nvct-cdi-hook).
CDI_HOOK_SOURCE = Path(__file__).parent / "cdihook.c"
SOURCES = {"runtime": SOURCE, "hook": HOOK_SOURCE, "cdi-hook": CDI_HOOK_SOURCE}


class BuildError(Exception):
    """The native launcher could not be compiled."""


def render(python_command: str, config: str = DEFAULT_PATH) -> str:
    """The launcher script with ``python_command`` as the way to start the Python shim."""
    template = (Path(__file__).parent / "launcher.sh").read_text()
    values = {
        "@GLOBAL_VALUE_FLAGS@": _shell_flags(tables.global_value_flags()),
        "@BUNDLE_FLAGS_WITH_VALUE@": _shell_flags(tables.bundle_flags(), "=*"),
        "@BUNDLE_FLAGS@": _shell_flags(tables.bundle_flags()),
        "@SUB_VALUE_FLAGS@": _shell_flags(tables.sub_value_flags()),
        "@MARKERS@": " ".join(f"-e {shlex.quote(m)}" for m in tables.gpu_markers()),
        "@RUNTIMES@": " ".join(shlex.quote(r) for r in tables.runtimes()),
        "@SEARCH_DIRS@": " ".join(shlex.quote(d) for d in tables.search_dirs()),
        "@DEFAULT_CONFIG@": shlex.quote(config),
        "@RUNTIME_PY@": python_command,
    }
    for name, value in values.items():
        template = template.replace(name, value)
    return template


def _shell_flags(flags: tuple[str, ...], suffix: str = "") -> str:
    """A ``case`` pattern matching each ``--flag`` and its ``-flag`` form (runc takes both)."""
    return " | ".join(f"{form}{suffix}" for flag in flags for form in (flag, flag[1:]))


def default_command() -> str:
    """This interpreter, isolated and without site (``-I -S``), told where nvct lives."""
    return shlex.join(module_argv("nvct.runtime.__main__"))


def install(output: Path, python_command: str, config: str = DEFAULT_PATH) -> None:
    """Write the shell launcher atomically with mode 0755."""
    write_atomic(str(output), render(python_command, config).encode(), 0o755)


def c_string(text: str) -> str:
    """``text`` as a C string literal (octal escapes for all but plain printable ASCII)."""
    out = []
    for byte in os.fsencode(text):
        char = chr(byte)
        if 0x20 <= byte < 0x7F and char not in '"\\?':
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def c_array(name: str, items: tuple[str, ...]) -> str:
    """A NULL-terminated ``static const char *const`` array."""
    return f"static const char *const {name}[] = {{{', '.join(map(c_string, items))}, 0}};\n"


def header(python_command: str, config: str, socket: str, *, program: str = "runtime") -> str:
    """The generated configuration header ``SOURCES[program]`` includes."""
    argv = shlex.split(python_command)
    if not argv or ("/" in argv[0] and not argv[0].startswith("/")):
        raise BuildError(
            f"--python-command {python_command!r} must start with an absolute path, or an "
            "interpreter's bare name (found beside the launcher, else on PATH)"
        )
    items = ", ".join(c_string(a) for a in argv)
    common = (
        "/* generated by nvct.runtime.launch.build */\n"
        f"static const char *const NVCT_PYTHON[] = {{{items}, 0}};\n"
        f"#define NVCT_DEFAULT_CONFIG {c_string(config)}\n"
        f"#define NVCT_SOCKET {c_string(socket)}\n"
        f"#define NVCT_CODE_ID {c_string(code_id())}\n"
    )
    from nvct.base.defaults import DEFAULT_CACHE_DIR, NATIVE_ENV
    from nvct.base.oci import HOOK_MARK
    from nvct.request.inputs import CDI_ANNOTATION_PREFIX, DEVICE_MOUNT_DIR

    # What a native entry's reader (native.h: the launcher's create, the prestart hook) needs.
    native = (
        f"#define NVCT_NATIVE_ENV {c_string(NATIVE_ENV)}\n"
        f"#define NVCT_CACHE_DIR {c_string(DEFAULT_CACHE_DIR)}\n"
        f"#define NVCT_DEVICE_MOUNT_DIR {c_string(DEVICE_MOUNT_DIR)}\n"
        f"#define NVCT_CDI_ANNOTATION_PREFIX {c_string(CDI_ANNOTATION_PREFIX)}\n"
        f"#define NVCT_HOOK_MARK {c_string(HOOK_MARK)}\n"
        + c_array("NVCT_REPLACED_HOOKS", tables.replaced_hooks())
        + c_array("NVCT_IPC_PATHS", tables.ipc_paths())
    )
    if program != "runtime":  # the hooks read no runc command line: only the request's markers
        hooks = common + c_array("NVCT_MARKERS", tables.request_markers())
        if program == "hook":
            hooks += native
        if program == "cdi-hook":
            from nvct.base.oci import CDI_LD_CACHE_ENV

            hooks += f"#define NVCT_LD_CACHE_ENV {c_string(CDI_LD_CACHE_ENV)}\n"
        return hooks
    return (
        common
        + native
        + c_array("NVCT_MARKERS", tables.gpu_markers())
        + c_array("NVCT_GLOBAL_VALUE_FLAGS", tables.global_value_flags())
        + c_array("NVCT_BUNDLE_FLAGS", tables.bundle_flags())
        + c_array("NVCT_SUB_VALUE_FLAGS", tables.sub_value_flags())
        + c_array("NVCT_SEARCH_DIRS", tables.search_dirs())
        + c_array("NVCT_RUNTIMES", tables.runtimes())
    )


def hook_command() -> str:
    """The Python hook (``nvct.hook.__main__``) as the native hook's fallback runs it."""
    return shlex.join(module_argv("nvct.hook.__main__"))


def cdi_hook_command() -> str:
    """The Python CDI hook (``nvct.hook.cdi``) as the native CDI hook's fallback runs it."""
    return shlex.join(module_argv("nvct.hook.cdi"))


def build_native(
    output: Path,
    python_command: str,
    config: str = DEFAULT_PATH,
    socket: str = DEFAULT_SOCKET,
    *,
    hook: bool = False,
    program: str | None = None,
    native: bool = True,
) -> None:
    """Compile the native launcher (``hook``, or ``program`` "hook": the native prestart hook;
    ``program`` "cdi-hook": the native CDI hook; each falls back to ``python_command``) into
    ``output`` (replaced atomically, mode 0755). ``native`` False: a prestart hook that never
    does the work from a native entry, nor asks for one (it always hands the work on: the
    tests' and benches' Python and daemon paths)."""
    program = program or ("hook" if hook else "runtime")
    cc = shlex.split(os.environ.get("CC", "cc"))
    flags = [f for var in ("CPPFLAGS", "CFLAGS") for f in shlex.split(os.environ.get(var, ""))]
    ldflags = shlex.split(os.environ.get("LDFLAGS", ""))
    with tempfile.TemporaryDirectory(prefix=".nvct-launcher-", dir=output.parent) as tmp:
        conf = Path(tmp).resolve() / "config.h"  # a quoted #include ignores the cwd
        conf.write_text(header(python_command, config, socket, program=program))
        binary = Path(tmp) / "nvct-runtime"
        cmd = [
            *cc,
            "-O2",
            "-Wall",
            "-Wextra",
            f"-ffile-prefix-map={tmp}=.",  # reproducible: no random path in the debug info
            *flags,
            f'-DNVCT_LAUNCHER_CONFIG="{conf}"',
            *([] if native else ["-DNVCT_NO_NATIVE_HOOK"]),
            "-o",
            str(binary),
            str(SOURCES[program]),
            *ldflags,
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as err:
            raise BuildError(f"cannot run the C compiler {cc[0]}: {err.strerror}") from err
        if done.returncode != 0:
            raise BuildError(f"{shlex.join(cmd)} failed:\n{done.stderr.strip()}")
        binary.chmod(0o755)
        os.replace(binary, output)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry."""
    parser = argparse.ArgumentParser(prog="python -m nvct.runtime.launch.build")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument(
        "--python-command", help="how to start the Python shim (--hook: the Python hook)"
    )
    parser.add_argument(
        "--config", default=DEFAULT_PATH, help="config file when NVCT_CONFIG is unset"
    )
    parser.add_argument(
        "--native", action="store_true", help="compile launcher.c instead of the shell script"
    )
    parser.add_argument(
        "--socket", default=DEFAULT_SOCKET, help="the shim daemon's socket ('' = none)"
    )
    parser.add_argument(
        "--hook",
        action="store_true",
        help="with --native: build the native prestart hook (nvct-hook) instead",
    )
    parser.add_argument(
        "--cdi-hook",
        action="store_true",
        help="with --native: build the native CDI createContainer hook (nvct-cdi-hook) instead",
    )
    args = parser.parse_args(argv)
    if (args.hook or args.cdi_hook) and not args.native:
        parser.error("--hook and --cdi-hook build native hooks: add --native")
    if args.hook and args.cdi_hook:
        parser.error("--hook and --cdi-hook build different programs: choose one")
    program = "cdi-hook" if args.cdi_hook else "hook" if args.hook else "runtime"
    defaults = {"runtime": default_command, "hook": hook_command, "cdi-hook": cdi_hook_command}
    command = args.python_command or defaults[program]()
    if not args.native:
        install(args.output, command, args.config)
        return 0
    try:
        build_native(args.output, command, args.config, args.socket, program=program)
    except BuildError as err:
        print(f"nvct.runtime.launch.build: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
