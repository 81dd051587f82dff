"""nvct's build backend: flit_core's wheel, plus the native ``nvct-runtime`` and ``nvct-hook``.

Engines call ``nvct-runtime`` on every container operation; flit alone would install it as a
Python console script, which starts an interpreter for each call (a container asking for no
GPU then starts ~1.3 x slower than with runc). So ``build_wheel`` compiles
``nvct/runtime/launch/launcher.c`` (``$CC``, default ``cc``) and puts it in the wheel as the
``nvct-runtime`` script, in place of the console script, and tags the wheel for this platform.
The launcher runs the Python shim with the interpreter beside it (a venv's ``bin/python3``,
else ``python3`` on ``PATH``), so one wheel serves any venv. The prestart hook of ``docker
--gpus`` likewise: ``nvct/runtime/launch/hook.c`` becomes ``nvct-hook`` and
``nvidia-container-runtime-hook`` (it asks the shim daemon, else runs the Python hook), and
the createContainer hook of CDI specs: ``nvct/runtime/launch/cdihook.c`` becomes
``nvct-cdi-hook`` (what it does not take, the Python CDI hook does).

Where no C compiler is found the wheel stays pure, with the console script, and the build says
so on stderr: nvct works, every runtime call then costs an interpreter start. Everything else
(sdist, editable installs, metadata) is flit_core's.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
import shutil
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

from flit_core import buildapi as flit
from flit_core.buildapi import (  # noqa: F401  (the hooks flit already does right)
    build_editable,
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

SOURCE = Path.cwd()  # the build frontend runs backends in the source tree


def _python_command(module: str) -> str:
    """``module``'s main on the interpreter beside the program, isolated and without site
    (``-I -S``, as every other install runs nvct: site and a venv's ``.pth`` files cost ~3 ms
    a start), its venv's site-packages appended to ``sys.path`` (after the stdlib, as site
    puts it; without site ``sys.prefix`` is not the venv's, so the venv is found as site finds
    it, above the interpreter's directory); where nvct is not there (a system or ``--user``
    install) site runs after all."""
    code = (
        "import sys\n"
        "v, venv = sys.version_info, sys.executable.rsplit('/', 2)[0]\n"
        "sys.path.append(f'{venv}/lib/python{v[0]}.{v[1]}/site-packages')\n"
        "try:\n"
        f"    from {module} import main\n"
        "except ImportError:\n"
        "    import site\n"
        "    site.main()\n"
        f"    from {module} import main\n"
        "sys.exit(main())\n"
    )
    return shlex.join(["python3", "-I", "-S", "-c", code])


# The launcher execs this for a GPU create no shim daemon serves: the interpreter beside it.
SHIM_COMMAND = _python_command("nvct.runtime.__main__")
# The native hook execs this when no shim daemon does its work.
HOOK_COMMAND = _python_command("nvct.hook.__main__")
# The native CDI hook execs this for what it does not do itself.
CDI_HOOK_COMMAND = _python_command("nvct.hook.cdi")
# The native programs, by script name: (which program, the Python command they fall back to).
NATIVE = {
    "nvct-runtime": ("runtime", SHIM_COMMAND),
    "nvct-hook": ("hook", HOOK_COMMAND),
    "nvidia-container-runtime-hook": ("hook", HOOK_COMMAND),
    "nvct-cdi-hook": ("cdi-hook", CDI_HOOK_COMMAND),
}


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, object] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """PEP 517 hook: flit's wheel, then the native programs in place of the console scripts."""
    name = flit.build_wheel(wheel_directory, config_settings, metadata_directory)
    with tempfile.TemporaryDirectory(prefix="nvct-launcher-") as tmp:
        programs = {script: Path(tmp) / script for script in NATIVE}
        problem = next(filter(None, (_compile(out, *NATIVE[s]) for s, out in programs.items())), "")
        if problem:
            print(
                f"nvct build: {problem}; nvct-runtime and the hooks stay Python console "
                "scripts (every runtime call and hook starts an interpreter: install a C "
                "compiler and rebuild for the native programs)",
                file=sys.stderr,
            )
            return name
        return _with_launcher(Path(wheel_directory) / name, programs)


def _compile(output: Path, program: str, command: str) -> str:
    """Compile the native ``program`` into ``output``, falling back to ``command``;
    an empty string, or why it could not be done."""
    cc = os.environ.get("CC", "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc}) found"
    sys.path.insert(0, str(SOURCE))
    try:
        from nvct.runtime.launch.build import BuildError, build_native

        build_native(output, command, program=program)
    except BuildError as err:
        return f"the native launcher did not build ({err})"
    finally:
        sys.path.remove(str(SOURCE))
    return ""


def _with_launcher(wheel: Path, programs: dict[str, Path]) -> str:
    """Rewrite ``wheel``: each native program as ``<dist>.data/scripts/<name>``, no console
    script of that name, a platform tag; returns the new file name."""
    dist, version, *_ = wheel.name.split("-")
    tag = f"py3-none-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}"
    target = wheel.with_name(f"{dist}-{version}-{tag}.whl")
    info = f"{dist}-{version}.dist-info"
    records: list[str] = []
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for item in src.infolist():
            if item.filename == f"{info}/RECORD":
                continue
            data = src.read(item)
            if item.filename == f"{info}/entry_points.txt":
                data = b"".join(
                    line
                    for line in data.splitlines(keepends=True)
                    if line.partition(b"=")[0].strip().decode() not in programs
                )
            elif item.filename == f"{info}/WHEEL":
                data = _wheel_file(data, tag)
            out.writestr(item, data)
            records.append(_record(item.filename, data))
        date_time = src.getinfo(f"{info}/WHEEL").date_time
        for name, program in programs.items():
            script = f"{dist}-{version}.data/scripts/{name}"
            entry = zipfile.ZipInfo(script, date_time=date_time)
            entry.external_attr = (0o100755 & 0xFFFF) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            data = program.read_bytes()
            out.writestr(entry, data)
            records.append(_record(script, data))
        records.append(f"{info}/RECORD,,")
        record = zipfile.ZipInfo(f"{info}/RECORD", date_time=date_time)
        out.writestr(record, "\n".join(records) + "\n", zipfile.ZIP_DEFLATED)
    wheel.unlink()
    return target.name


def _wheel_file(data: bytes, tag: str) -> bytes:
    replaced = {"Root-Is-Purelib": "Root-Is-Purelib: false", "Tag": f"Tag: {tag}"}
    lines = [replaced.get(line.partition(":")[0], line) for line in data.decode().splitlines()]
    return ("\n".join(lines) + "\n").encode()


def _record(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"
