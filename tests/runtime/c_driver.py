"""A test driver program in C over the native programs' headers (nvct/runtime/launch), built
warning-free: a header that makes the compiler say anything fails the test that builds it."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from nvct.runtime.launch.build import header

LAUNCH = Path(__file__).resolve().parents[2] / "nvct/runtime/launch"


def build_driver(tmp: Path, source: str, flags: Sequence[str] = ()) -> Path:
    """Compile ``source`` (it includes the headers, after the generated hook configuration as
    NVCT_LAUNCHER_CONFIG) with -O2 -Wall -Wextra -Werror and ``flags``; the executable."""
    conf = tmp / "config.h"
    conf.write_text(header("/bin/false", "/etc/nvct/config.toml", "", program="hook"))
    (tmp / "driver.c").write_text(source)
    out = tmp / "driver"
    cmd = [*shlex.split(os.environ.get("CC", "cc")), "-O2", "-Wall", "-Wextra", "-Werror", *flags]
    cmd += [
        f"-I{LAUNCH}",
        f'-DNVCT_LAUNCHER_CONFIG="{conf}"',
        "-o",
        str(out),
        str(tmp / "driver.c"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return out
