"""Hostile environments: no code from the image runs in a host process (issue 7, item 3).

CVE-2025-23266 "NVIDIAScape": ``ENV LD_PRELOAD=/proc/self/cwd/poc.so`` in an image reached
NVIDIA's root hook, whose working directory held the image's files. For a Python hook the
vectors are LD_PRELOAD (honoured by ld.so before Python starts), PYTHONPATH, PYTHONSTARTUP,
PYTHONHOME, PYTHONUSERBASE and modules in the working directory (runc runs hooks in the
bundle). Each payload here writes a marker into a host directory when it runs; the marker
directory must stay empty while GPU containers with those variables start.

Defences under test: the hook entry the shim writes carries an explicit ``env`` (runc then
passes nothing else), and the interpreter runs isolated (``-I``: no PYTHON* variables, no
working directory or user site on sys.path).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from integration.harness.bundles import BundleFactory, run_runc
from integration.harness.dockerd import Dockerd
from integration.harness.images import docker_import
from integration.harness.nvct_config import NVCT_BIN
from integration.harness.shimd import hook_via
from integration.harness.skips import need_binary, require

PRELOAD_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void payload(void) {
    char path[512], exe[256] = "?";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) exe[n] = 0;
    snprintf(path, sizeof path, "%s/ld-preload-%d", MARKER_DIR, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) { dprintf(fd, "%s\n", exe); close(fd); }
}
"""

PY_PAYLOAD = """\
import os
with open(os.path.join({markers!r}, "{name}-%d" % os.getpid()), "w") as f:
    f.write("{name}\\n")
"""


def build_payloads(where: Path, markers: Path) -> dict[str, str]:
    """x.so and Python payloads under ``where``; returns the hostile environment."""
    require(need_binary("gcc"))
    where.mkdir(parents=True, exist_ok=True)
    source = where / "x.c"
    source.write_text(PRELOAD_C)
    define = f'-DMARKER_DIR="{markers}"'
    subprocess.run(
        ["gcc", "-shared", "-fPIC", define, "-o", str(where / "x.so"), str(source)], check=True
    )

    def payload(path: Path, name: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(PY_PAYLOAD.format(markers=str(markers), name=name))

    pyver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for module in ("sitecustomize", "usercustomize", "json", "nvct/__init__", "encodings/__init__"):
        payload(where / "pypath" / f"{module}.py", f"pythonpath-{module.replace('/', '.')}")
        payload(where / f"{module}.py", f"cwd-{module.replace('/', '.')}")  # runc's cwd
    payload(where / "startup.py", "pythonstartup")
    payload(where / "home" / "lib" / pyver / "os.py", "pythonhome-os")
    payload(where / "home" / "lib" / pyver / "encodings" / "__init__.py", "pythonhome-encodings")
    payload(where / "userbase" / "lib" / pyver / "site-packages" / "usercustomize.py", "userbase")
    (where / "userbase" / "lib" / pyver / "site-packages" / "evil.pth").write_text(
        f"import os; open(os.path.join({str(markers)!r}, 'pth-%d' % os.getpid()), 'w')\n"
    )
    return {
        "LD_PRELOAD": f"/proc/self/cwd/x.so {where}/x.so",
        "PYTHONPATH": str(where / "pypath"),
        "PYTHONSTARTUP": str(where / "startup.py"),
        "PYTHONHOME": str(where / "home"),
        "PYTHONUSERBASE": str(where / "userbase"),
        "PYTHONINSPECT": "1",
        "PYTHONSAFEPATH": "0",
        "NVCT_PLAN": '{"mounts":[["/etc","/host-etc",[]]]}',
    }


def markers_left(markers: Path) -> list[str]:
    return sorted(f"{p.name}: {p.read_text().strip()}" for p in markers.iterdir())


@pytest.mark.runc
@pytest.mark.root
@pytest.mark.parametrize("via", ["shim", "hook-alone", "hook-daemon"])
def test_image_env_never_reaches_host_processes(
    runc_bundle_factory: BundleFactory,
    container_id: str,
    nvct_config: Path,
    sim_driver: Any,
    tmp_path: Path,
    hook_path: Callable[[str], Path],
    via: str,
) -> None:
    """The hook alone runs in its own process (the Python hook) or in a shim daemon's worker
    (the native hook): neither may run the image's payloads."""
    markers = tmp_path / "markers"
    markers.mkdir()
    hooks = {}
    if via != "shim":  # as dockerd writes it for --gpus: no env, runc's is inherited
        hook = hook_path("daemon" if via == "hook-daemon" else "python")
        hooks = {
            "prestart": [
                {
                    "path": str(hook),
                    "args": ["nvidia-container-runtime-hook", "prestart"],
                }
            ]
        }
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", "nvidia-smi -L; ls /host-etc 2>&1; true"],
        ["NVIDIA_VISIBLE_DEVICES=0"],
        extra={"hooks": hooks},
    )
    env = build_payloads(bundle, markers)  # in the bundle dir: the hook's working directory
    build_payloads(bundle / "rootfs", markers)  # and in the image, as NVIDIAScape had it
    spec_path = bundle / "config.json"
    spec = json.loads(spec_path.read_text())
    spec["process"]["env"] += [f"{k}={v}" for k, v in env.items()]
    spec_path.write_text(json.dumps(spec))
    runtime = str(NVCT_BIN / "nvct-runtime") if via == "shim" else "runc"
    result = run_runc(
        bundle, container_id, runtime=runtime, env={**os.environ, "NVCT_CONFIG": str(nvct_config)}
    )
    assert markers_left(markers) == []
    assert result.returncode == 0, result.stderr
    assert sim_driver.spec.gpus[0].uuid in result.stdout
    assert "No such file or directory" in result.stdout  # no /host-etc: NVCT_PLAN was ignored
    ran = hook_via(nvct_config.parent / "nvct.log", container_id)
    assert ran == ([] if via == "shim" else ["daemon" if via == "hook-daemon" else "hook"])


@pytest.mark.docker
@pytest.mark.root
def test_image_env_never_reaches_host_processes_docker(
    nvidia_dockerd: Dockerd, sim_driver: Any, tmp_path: Path, glibc_rootfs_dir: Path
) -> None:
    """``docker run --runtime=nvidia`` of an image with ``ENV LD_PRELOAD=/proc/self/cwd/x.so``
    and ``x.so`` at its root (the NVIDIAScape Dockerfile), plus PYTHON* pointing at payloads
    both in the image and on the host."""
    markers = tmp_path / "markers"
    markers.mkdir()
    rootfs = tmp_path / "rootfs"
    shutil.copytree(glibc_rootfs_dir, rootfs, symlinks=True)
    host_env = build_payloads(tmp_path / "host", markers)
    image_env = build_payloads(rootfs / "payload", markers)
    shutil.copyfile(rootfs / "payload" / "x.so", rootfs / "x.so")
    env = {
        **image_env,
        "LD_PRELOAD": f"/proc/self/cwd/x.so /proc/self/cwd/rootfs/x.so {host_env['LD_PRELOAD']}",
        "PYTHONPATH": f"/payload/pypath:{host_env['PYTHONPATH']}",
    }
    tag = "nvct-test/nvidiascape:latest"
    docker_import(nvidia_dockerd, rootfs, tag, changes=[f"ENV {k}={v!r}" for k, v in env.items()])
    try:
        result = nvidia_dockerd.docker(
            "run", "--rm", "--network", "none", "--runtime", "nvidia",
            "-e", "NVIDIA_VISIBLE_DEVICES=1", tag, "/bin/sh", "-c", "nvidia-smi -L",
            check=False, timeout=120,
        )  # fmt: skip
    finally:
        nvidia_dockerd.docker("rmi", "-f", tag, check=False)
    assert markers_left(markers) == []
    assert result.returncode == 0, result.stderr
    assert sim_driver.spec.gpus[1].uuid in result.stdout
