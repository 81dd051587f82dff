"""Regression guard (not a timing test): hot-path entry points import no heavy library."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("jsonschema", "elftools", "pynvml", "click", "structlog", "asyncio", "tomlkit")

# Everything the shim's create path and the hook's prestart import when caches are warm.
HOT_MODULES = {
    "runtime passthrough": ["nvct.runtime.__main__", "nvct.runtime.args", "nvct.runtime.lowlevel"],
    "runtime create": ["nvct.runtime.create", "nvct.runtime.spec_edits"],
    "hook prestart": [
        "nvct.hook.__main__",
        "nvct.hook.apply",
        "nvct.hook.cgroup",
        "nvct.hook.rootfs",
        "nvct.host",
        "nvct.plan",
        "nvct.request",
        "nvct.oci",
        "nvct.config",
        "nvct.log",
    ],
}


def test_hot_paths_import_no_heavy_library() -> None:
    for name, modules in HOT_MODULES.items():
        code = (
            "import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            f"print(','.join(h for h in {HEAVY!r} if h in sys.modules))"
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
