"""bench.docker_kit: docker's programs packed here, unpacked where there is no docker."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from bench import docker_kit


def _fake_programs(directory: Path) -> None:
    directory.mkdir()
    for name in docker_kit.PROGRAMS:
        (directory / name).write_text(f"#!/bin/sh\necho {name}\n")
        (directory / name).chmod(0o755)


def test_packed_programs_unpack_runnable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_programs(tmp_path / "host")
    monkeypatch.setenv("PATH", str(tmp_path / "host"))
    kit = tmp_path / "kit.tar.xz"
    packed = docker_kit.pack(kit)
    assert [Path(p).name for p in packed] == list(docker_kit.PROGRAMS)
    bindir = docker_kit.unpack(kit, tmp_path / "there")
    for name in docker_kit.PROGRAMS:
        program = bindir / name
        assert program.read_text() == f"#!/bin/sh\necho {name}\n"
        assert os.access(program, os.X_OK)


def test_pack_takes_the_linked_libraries_but_glibc_and_unpack_leaves_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ls = Path("/bin/ls").resolve()
    linked = docker_kit.libraries(str(ls))
    if not linked:
        pytest.skip(f"{ls} links no shared library besides glibc's here")
    _fake_programs(tmp_path / "host")
    (tmp_path / "host" / "runc").unlink()
    (tmp_path / "host" / "runc").symlink_to(ls)
    monkeypatch.setenv("PATH", str(tmp_path / "host"))
    kit = tmp_path / "kit.tar.xz"
    docker_kit.pack(kit)
    with tarfile.open(kit) as tar:
        names = {m.name: m for m in tar.getmembers()}
        libs = sorted(n for n in names if n.startswith("lib/"))
        assert libs == sorted(f"lib/{lib.name}" for lib in linked)
        assert all(names[n].isfile() for n in libs)
    assert not any(n.startswith(("lib/libc.so", "lib/ld-linux")) for n in libs)
    bindir = docker_kit.unpack(kit, tmp_path / "there")
    assert not (tmp_path / "there" / "lib").exists()
    assert (bindir / "runc").read_bytes() == ls.read_bytes()


def test_pack_names_the_missing_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_programs(tmp_path / "host")
    (tmp_path / "host" / "containerd").unlink()
    monkeypatch.setenv("PATH", str(tmp_path / "host"))
    with pytest.raises(SystemExit, match="containerd is not on PATH"):
        docker_kit.pack(tmp_path / "kit.tar.xz")


def test_unpack_takes_only_the_programs_and_refuses_an_incomplete_kit(tmp_path: Path) -> None:
    kit = tmp_path / "kit.tar.xz"
    with tarfile.open(kit, "w:xz") as tar:
        for name, data in (("bin/dockerd", b"d"), ("../escape", b"x"), ("bin/sh", b"s")):
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
        link = tarfile.TarInfo("bin/docker")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)
    dest = tmp_path / "d"
    with pytest.raises(SystemExit, match="lacks docker, containerd, containerd-shim-runc-v2"):
        docker_kit.unpack(kit, dest)
    assert sorted(p.name for p in (dest / "bin").iterdir()) == ["dockerd"]
    assert not (tmp_path / "escape").exists()
