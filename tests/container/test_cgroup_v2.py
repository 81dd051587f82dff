"""cgroup v2 device grants against the kernel: a child of this host's cgroup2 hierarchy, a
deny-by-default program shaped like runc's, a process inside, and open(2) of device nodes."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvct.base import bpf
from nvct.base.errors import ApplyError
from nvct.container.cgroup_v2 import grant_devices_v2
from nvct.container.devfilter import insn, prepend_allow

_PROBE = """
import os, sys
sys.stdin.readline()  # moved into the cgroup by now
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        print(path, "ok", sep="\t")
    except OSError as err:
        print(path, os.strerror(err.errno), sep="\t")
"""


def _cgroup2_mount() -> str | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            return left.split()[4]
    return None


def runc_like_program() -> bytes:
    """runc's devicefilter shape: c 1:3 rwm, c 1:5 rw (its access check writes r1), else 0."""
    return b"".join(
        (
            insn(0x61, 2, 1, 0),  # r2 = type
            insn(0x54, 2, imm=0xFFFF),
            insn(0x61, 3, 1, 0),  # r3 = access
            insn(0x74, 3, imm=16),  # rsh32
            insn(0x61, 4, 1, 4),
            insn(0x61, 5, 1, 8),
            # c 1:3 rwm
            insn(0x55, 2, off=4, imm=2),
            insn(0x55, 4, off=3, imm=1),
            insn(0x55, 5, off=2, imm=3),
            insn(0xB4, 0, imm=1),
            insn(0x95),
            # c 1:5 rw: (access & rw) == access
            insn(0x55, 2, off=7, imm=2),
            insn(0xBC, 1, 3),  # mov32 r1, r3
            insn(0x54, 1, imm=6),
            insn(0x5D, 1, 3, off=4),  # jne r1, r3
            insn(0x55, 4, off=3, imm=1),
            insn(0x55, 5, off=2, imm=5),
            insn(0xB4, 0, imm=1),
            insn(0x95),
            insn(0xB4, 0, imm=0),
            insn(0x95),
        )
    )


@pytest.fixture
def runc_cgroup() -> Iterator[str]:
    """A child cgroup on the cgroup2 hierarchy with runc's kind of program attached."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups and load BPF programs")
    mount = _cgroup2_mount()
    if mount is None:
        pytest.skip("needs a cgroup2 mount (cgroup v2 or a hybrid host)")
    path = os.path.join(mount, f"nvct-test-{uuid.uuid4().hex[:8]}")
    os.mkdir(path)
    fd = os.open(path, os.O_DIRECTORY | os.O_RDONLY)
    prog = bpf.load_device_program(runc_like_program(), "runc_like")
    try:
        bpf.attach_device_program(fd, prog, bpf.BPF_F_ALLOW_MULTI)
        yield path
    finally:
        os.close(prog)
        os.close(fd)
        os.rmdir(path)  # its programs go with it


def opens_in(cgroup: str, paths: list[str]) -> dict[str, str]:
    """What open(O_RDWR) of each path gives a process in ``cgroup``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _PROBE, *paths],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        Path(cgroup, "cgroup.procs").write_text(str(proc.pid))
        out, _ = proc.communicate("go\n", timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return dict(line.split("\t", 1) for line in out.splitlines())


def verdict(message: str) -> str:
    return "denied" if message == os.strerror(errno.EPERM) else "allowed"


def test_grant_opens_exactly_the_granted_node(runc_cgroup: str, h100x4) -> None:
    nvidia0 = str(h100x4.dev_root / "dev" / "nvidia0")
    nvidia1 = str(h100x4.dev_root / "dev" / "nvidia1")
    paths = [nvidia0, nvidia1, "/dev/null", "/dev/zero", "/dev/full"]
    before = {p: verdict(m) for p, m in opens_in(runc_cgroup, paths).items()}
    assert before == {
        nvidia0: "denied",
        nvidia1: "denied",
        "/dev/null": "allowed",
        "/dev/zero": "allowed",  # c 1:5 rw
        "/dev/full": "denied",
    }
    major, minor = os.major(os.stat(nvidia1).st_rdev), os.minor(os.stat(nvidia1).st_rdev)
    assert grant_devices_v2(runc_cgroup, [(major, minor)]) == 1
    after = opens_in(runc_cgroup, paths)
    # The simulated node's major has no driver behind it: the open gets past the cgroup and
    # fails in the kernel's char device lookup (ENXIO/ENODEV), never with EPERM.
    assert after[nvidia1] != os.strerror(errno.EPERM)
    assert {p: verdict(m) for p, m in after.items()} == {**before, nvidia1: "allowed"}
    fd = os.open(runc_cgroup, os.O_DIRECTORY | os.O_RDONLY)
    try:
        ids, flags = bpf.query_device_programs(fd)
    finally:
        os.close(fd)
    assert len(ids) == 1, "the old program is replaced, not joined by a second one"
    assert flags == bpf.BPF_F_ALLOW_MULTI


def test_a_cgroup_without_a_program_is_left_alone(tmp_path: Path) -> None:
    if os.geteuid() != 0 or _cgroup2_mount() is None:
        pytest.skip("needs root and a cgroup2 mount")
    path = os.path.join(str(_cgroup2_mount()), f"nvct-test-{uuid.uuid4().hex[:8]}")
    os.mkdir(path)
    try:
        assert grant_devices_v2(path, [(195, 1)]) == 0
    finally:
        os.rmdir(path)


def test_missing_cgroup_names_it(tmp_path: Path) -> None:
    with pytest.raises(ApplyError, match="nope"):
        grant_devices_v2(str(tmp_path / "nope"), [(195, 1)])


def test_program_with_calls_is_refused_not_reloaded() -> None:
    old = runc_like_program()
    assert prepend_allow([(195, 1)], old).endswith(old)
    with pytest.raises(ValueError, match="opcode 0x85"):
        prepend_allow([(195, 1)], insn(0x85, imm=14) + old)
    with pytest.raises(ValueError, match="whole instructions"):
        prepend_allow([(195, 1)], old[:-3])


def attach_systemd_like(cgroup: str) -> bytes:
    """A second device program on ``cgroup`` beside runc's (BPF_F_ALLOW_MULTI), as systemd
    attaches one, allowing only /dev/null; its instructions."""
    from nvct.container.devfilter import allow_only

    program = allow_only([(1, 3)])
    fd = os.open(cgroup, os.O_DIRECTORY | os.O_RDONLY)
    loaded = bpf.load_device_program(program, "systemd_like")
    try:
        bpf.attach_device_program(fd, loaded, bpf.BPF_F_ALLOW_MULTI)
    finally:
        os.close(loaded)
        os.close(fd)
    return program


def test_every_attached_program_is_extended(runc_cgroup: str, h100x4) -> None:
    """systemd's program and runc's on one cgroup (BPF_F_ALLOW_MULTI): both must allow, so
    both are replaced; the second one here allows only /dev/null."""
    attach_systemd_like(runc_cgroup)
    nvidia1 = str(h100x4.dev_root / "dev" / "nvidia1")
    paths = [nvidia1, "/dev/null", "/dev/zero"]
    # /dev/zero: runc's program allows it, the second does not.
    assert {p: verdict(m) for p, m in opens_in(runc_cgroup, paths).items()} == {
        nvidia1: "denied",
        "/dev/null": "allowed",
        "/dev/zero": "denied",
    }
    st = os.stat(nvidia1)
    fd = os.open(runc_cgroup, os.O_DIRECTORY | os.O_RDONLY)
    try:
        assert grant_devices_v2(runc_cgroup, [(os.major(st.st_rdev), os.minor(st.st_rdev))]) == 2
        assert len(bpf.query_device_programs(fd)[0]) == 2
    finally:
        os.close(fd)
    assert {p: verdict(m) for p, m in opens_in(runc_cgroup, paths).items()} == {
        nvidia1: "allowed",
        "/dev/null": "allowed",
        "/dev/zero": "denied",
    }
