"""Drivers laid out as real hosts have them, beyond Debian's multiarch directories.

Found on a real GPU machine (GKE-style driver 580 under /usr/local/nvidia, Ubuntu userland):
``/usr/bin/nvidia-smi`` was a shell wrapper that execs ``/usr/local/nvidia/bin/nvidia-smi``,
and ``/sbin/ldconfig`` a wrapper of ``/sbin/ldconfig.real``. Mounted into a container, the
first named a path the container lacks; run in the container's chroot, the second would be
the image's ``/bin/sh`` running a script, and cannot be executed by descriptor at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nvct.base.errors import ApplyError
from nvct.container.ldconfig import open_host_ldconfig
from nvct.host.discover import discover_inventory
from tests.conftest import sim_config


@pytest.fixture
def prefixed_root(h100x4, tmp_path: Path) -> Path:
    from integration.simdriver.layouts import own_prefix

    root = tmp_path / "driver"
    subprocess.run(["cp", "-a", str(h100x4.driver_root), str(root)], check=True)
    own_prefix(root)
    return root


def test_a_driver_under_its_own_prefix_gives_its_binaries_not_the_wrappers(
    h100x4, prefixed_root: Path
) -> None:
    inventory = discover_inventory(prefixed_root, h100x4.dev_root, h100x4.proc_root)
    binaries = {f.name: f.host_path for f in inventory.files if f.kind == "bin"}
    assert binaries["nvidia-smi"] == str(prefixed_root / "usr/local/nvidia/bin/nvidia-smi")
    assert binaries["nvidia-cuda-mps-control"].startswith(str(prefixed_root / "usr/local/nvidia"))
    libs = [f.host_path for f in inventory.files if f.kind == "lib" and "x86_64" not in f.host_path]
    assert any(p.endswith("/usr/local/nvidia/lib64/libcuda.so.550.54.15") for p in libs), libs
    wrapper = prefixed_root / "usr/bin/nvidia-smi"
    assert f"{wrapper} is not an ELF executable (a wrapper?): skipped" in inventory.warnings


def test_a_wrapper_alone_is_no_binary(h100x4, prefixed_root: Path) -> None:
    shutil.rmtree(prefixed_root / "usr/local/nvidia/bin")
    inventory = discover_inventory(prefixed_root, h100x4.dev_root, h100x4.proc_root)
    assert not [f for f in inventory.files if f.kind == "bin"]


def test_the_list_command_shows_the_prefix_binaries(h100x4, prefixed_root: Path, tmp_path) -> None:
    from nvct.host.load import load_inventory

    config = sim_config(h100x4, tmp_path, driver_root=prefixed_root)
    inventory = load_inventory(config, use_cache=False)
    assert str(prefixed_root / "usr/local/nvidia/bin/nvidia-smi") in {
        f.host_path for f in inventory.files
    }


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _elf() -> Path:
    return Path(os.path.realpath(shutil.which("ldconfig") or "/sbin/ldconfig"))


def test_an_ldconfig_wrapper_resolves_to_the_real_binary_beside_it(tmp_path: Path) -> None:
    if _elf().read_bytes()[:4] != b"\x7fELF":
        pytest.skip(f"{_elf()} is not an ELF file on this host")
    wrapper = _script(tmp_path / "ldconfig", 'exec /sbin/ldconfig.real "$@"')
    shutil.copy(_elf(), tmp_path / "ldconfig.real")
    fd = open_host_ldconfig(str(wrapper))
    try:
        assert os.fstat(fd).st_ino == (tmp_path / "ldconfig.real").stat().st_ino
    finally:
        os.close(fd)


def test_an_elf_ldconfig_is_used_as_it_is(tmp_path: Path) -> None:
    if _elf().read_bytes()[:4] != b"\x7fELF":
        pytest.skip(f"{_elf()} is not an ELF file on this host")
    fd = open_host_ldconfig(str(_elf()))
    try:
        assert os.fstat(fd).st_ino == _elf().stat().st_ino
    finally:
        os.close(fd)


def test_an_ldconfig_script_with_nothing_beside_it_is_refused_with_its_fix(tmp_path) -> None:
    wrapper = _script(tmp_path / "ldconfig", "exit 0")
    with pytest.raises(ApplyError) as caught:
        open_host_ldconfig(str(wrapper))
    assert caught.value.one_line() == (
        f"ldconfig {wrapper} is not an ELF executable and there is no {wrapper}.real beside it"
        " (fix: set ldconfig in nvct's config.toml to the host's ldconfig binary, not a wrapper)"
    )
