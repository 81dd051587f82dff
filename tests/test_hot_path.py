"""Regression guard (not a timing test): hot-path entry points import no heavy library."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("jsonschema", "elftools", "pynvml", "click", "structlog", "asyncio", "tomlkit")
# The per-container paths also keep Python's own slower modules out (~15 ms together).
LEAN = (*HEAVY, "dataclasses", "typing", "pathlib", "inspect")

# What each entry point imports on its hot path (warm caches).
HOT_MODULES = {
    "runtime passthrough": (
        LEAN,
        ["nvct.runtime.__main__", "nvct.runtime.args", "nvct.runtime.lowlevel"],
    ),
    "runtime create, cached work order": (
        LEAN,
        ["nvct.runtime.create", "nvct.runtime.fastpath", "nvct.runtime.spec_edits"],
    ),
    "hook prestart with the shim's work order": (
        LEAN,
        [
            "nvct.hook.__main__",
            "nvct.hook.workorder",
            "nvct.hook.apply",
            "nvct.hook.cgroup",
            "nvct.hook.rootfs",
            "nvct.oci",
            "nvct.log",
        ],
    ),
    "hook prestart planning itself (--gpus)": (
        HEAVY,
        [
            "nvct.hook.__main__",
            "nvct.host",
            "nvct.plan",
            "nvct.request",
            "nvct.config",
            "nvct.hook.apply",
        ],
    ),
}


def _preloaded() -> set[str]:
    """Modules this interpreter loads before any nvct code (a site .pth file may add some)."""
    out = subprocess.run(
        [sys.executable, "-I", "-c", "import sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_hot_paths_import_no_heavy_library() -> None:
    preloaded = _preloaded()
    for name, (banned, modules) in HOT_MODULES.items():
        checked = tuple(m for m in banned if m not in preloaded)
        code = (
            "import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            f"print(','.join(h for h in {checked!r} if h in sys.modules))"
        )
        out = subprocess.run(
            [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert out == "", f"{name} imports {out}"


def test_discovery_is_what_pulls_the_heavy_libraries() -> None:
    """The guard above can fail: discovery itself does import them."""
    code = (
        "import pathlib, sys\n"
        "from nvct.discover.elf import read_elf\n"
        "read_elf(pathlib.Path(sys.executable))\n"
        "print('elftools' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
