"""Why a real-container test cannot run here, as pytest skip reasons.

Each ``need_*`` returns ``None`` when the requirement is met, else a reason that says how to meet
it. ``require`` skips the calling test (or fixture) on the first unmet one.
"""

from __future__ import annotations

import os
import shutil

import pytest

from integration.harness.images import is_static_busybox

# Debian 12 package that provides each binary the integration tests use.
_APT_PACKAGE = {
    "docker": "docker.io",
    "dockerd": "docker.io",
    "containerd": "containerd",
    "runc": "runc",
    "crun": "crun",
    "podman": "podman",
    "busybox": "busybox-static",
    "ldconfig": "libc-bin",
    "gcc": "gcc",
}


def need_root() -> str | None:
    if os.geteuid() != 0:
        return "needs root (run as root or in CI via .ci/run)"
    return None


def need_binary(name: str) -> str | None:
    if shutil.which(name) is None:
        package = _APT_PACKAGE.get(name, name)
        return f"needs {name}: apt-get install {package}"
    return None


def need_cc() -> str | None:
    """The C compiler the native nvct-runtime launcher is built with (``$CC``, default cc)."""
    if shutil.which(os.environ.get("CC", "cc")) is None:
        return "needs a C compiler for the native launcher: apt-get install gcc"
    return None


def need_busybox() -> str | None:
    """A static busybox: the images and bundles are built from it."""
    reason = need_binary("busybox")
    if reason is not None:
        return reason
    if not is_static_busybox():
        return "needs a statically linked busybox: apt-get install busybox-static"
    return None


def need_docker() -> str | None:
    """Root plus dockerd, its managed containerd and runc, and the docker CLI."""
    for reason in (
        need_root(),
        need_binary("dockerd"),
        need_binary("docker"),
        need_binary("containerd"),
        need_binary("runc"),
    ):
        if reason is not None:
            return reason
    return None


def require(*reasons: str | None) -> None:
    """Skip the current test with the first reason that is not ``None``."""
    __tracebackhide__ = True  # report the skip at the caller's line
    for reason in reasons:
        if reason is not None:
            pytest.skip(reason)
