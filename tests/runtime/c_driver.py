"""A test driver program in C over the native programs' headers (nvct/runtime/launch), built
warning-free (a header that makes the compiler say anything fails the test that builds it)
and, where the compiler can, with AddressSanitizer and UndefinedBehaviorSanitizer: a read or
write outside a buffer, or undefined behaviour, stops the driver and fails its test even
where the answer happened to be right (tests/runtime/test_native_sanitized.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from nvct.runtime.launch.build import header

LAUNCH = Path(__file__).resolve().parents[2] / "nvct/runtime/launch"
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")
# Short-lived drivers need not free what they allocate: no leak report at exit.
NO_LEAK_CHECK = """
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }
"""


@cache
def sanitizer_flags() -> tuple[str, ...]:
    """SANITIZE where ``$CC`` builds a program with it that runs here, else ()."""
    cc = shlex.split(os.environ.get("CC", "cc"))
    with tempfile.TemporaryDirectory() as tmp:
        source, probe = Path(tmp) / "probe.c", Path(tmp) / "probe"
        source.write_text("int main(void) { return 0; }\n")
        try:
            built = subprocess.run(
                [*cc, *SANITIZE, "-o", str(probe), str(source)], capture_output=True, check=False
            )
            runs = (
                built.returncode == 0 and subprocess.run([str(probe)], check=False).returncode == 0
            )
        except OSError:
            runs = False
    return SANITIZE if runs else ()


def build_driver(tmp: Path, source: str, flags: Sequence[str] = ()) -> Path:
    """Compile ``source`` (it includes the headers, after the generated hook configuration as
    NVCT_LAUNCHER_CONFIG) with -O2 -Wall -Wextra -Werror, the sanitizers where they run here,
    and ``flags``; the executable."""
    conf = tmp / "config.h"
    conf.write_text(header("/bin/false", "/etc/nvct/config.toml", "", program="hook"))
    sanitize = sanitizer_flags()
    (tmp / "driver.c").write_text(source + (NO_LEAK_CHECK if sanitize else ""))
    out = tmp / "driver"
    cc = shlex.split(os.environ.get("CC", "cc"))
    cmd = [*cc, "-O2", "-Wall", "-Wextra", "-Werror", *sanitize, *flags]
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
