"""devcg.h, the native prestart hook's device-cgroup grant, against the kernel and against the
Python it ports (nvct.container.cgroup.grant_devices): cgroup v2 BPF device programs swapped on
a child of this host's cgroup2 hierarchy, the v1 devices controller's devices.allow, and the
directory chosen from mountinfo and /proc/PID/cgroup text as the Python chooses it."""

from __future__ import annotations

import errno
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.harness.skips import need_cc, need_root, require
from nvct.base import bpf
from nvct.base.errors import ApplyError
from nvct.container.cgroup import grant_devices
from nvct.container.devfilter import insn, prepend_allow
from tests.container.test_cgroup_v2 import (  # noqa: F401
    _cgroup2_mount,
    attach_systemd_like,
    opens_in,
    runc_cgroup,
    runc_like_program,
    verdict,
)
from tests.runtime.c_driver import build_driver

# argv: mountinfo, a file of /proc/PID/cgroup text, MAJOR:MINOR... Prints the result, the
# descriptors open before and after the call, and the error line.
DRIVER = r"""
#define _GNU_SOURCE
#define PROGRAM "devcg-test"
#include NVCT_LAUNCHER_CONFIG
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* client.h's, json.h's, rootfs.h's own */
#include "client.h"
#include "json.h"
#include "rootfs.h"
#pragma GCC diagnostic pop
#include "devcg.h"
#include <dirent.h>

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    size_t size;
    char *lines = argc > 2 ? read_file(argv[2], &size) : NULL, err[8192] = "";
    struct devno devs[64];
    int n = 0;
    for (int i = 3; i < argc && n < 64; i++)
        if (sscanf(argv[i], "%u:%u", &devs[n].major, &devs[n].minor) == 2)
            n++;
    if (!lines)
        return 2;
    int before = open_fds();
    int rc = grant_devices(argv[1], lines, devs, n, err, sizeof err);
    printf("%d\n%d %d\n%s\n", rc, before, open_fds(), err);
    free(lines);
    return 0;
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver, built with -O2 -Wall -Wextra -Werror (devcg.h must compile clean)."""
    require(need_cc())
    return build_driver(tmp_path_factory.mktemp("devcg"), DRIVER)


def c_grant(
    driver: Path, tmp: Path, mountinfo: str | Path, lines: str, devices: list[tuple[int, int]]
) -> str:
    """grant_devices in C: "" on success, else its error line. Every descriptor is closed."""
    text = tmp / f"cgroup-{uuid.uuid4().hex[:8]}"
    text.write_text(lines)
    argv = [str(driver), str(mountinfo), str(text), *(f"{a}:{b}" for a, b in devices)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    rc, fds, err = done.stdout.split("\n", 2)
    before, after = fds.split()
    assert before == after, f"descriptors left open: {done.stdout}"
    err = err.removesuffix("\n")
    assert (rc == "0") == (err == ""), done.stdout
    assert "\n" not in err
    return err


def dev_of(path: str) -> tuple[int, int]:
    rdev = os.stat(path).st_rdev
    return os.major(rdev), os.minor(rdev)


def v2_lines(cgroup: str) -> str:
    """/proc/PID/cgroup text of a process in ``cgroup`` (a child of the first cgroup2 mount),
    with no v1 devices line: the grant goes to cgroup v2 on a unified or hybrid host alike."""
    return f"0::/{os.path.relpath(cgroup, str(_cgroup2_mount()))}\n"


def attached(cgroup: str) -> tuple[list[bytes], int]:
    """The instructions of each device program attached to ``cgroup``, and the attach flags."""
    fd = os.open(cgroup, os.O_DIRECTORY | os.O_RDONLY)
    try:
        ids, flags = bpf.query_device_programs(fd)
    finally:
        os.close(fd)
    programs = []
    for prog_id in ids:
        prog = bpf.program_fd(prog_id)
        try:
            programs.append(bpf.program_instructions(prog))
        finally:
            os.close(prog)
    return programs, flags


def test_v2_grant_opens_exactly_the_granted_node(
    driver: Path,
    runc_cgroup: str,  # noqa: F811
    h100x4,
    tmp_path: Path,
) -> None:
    nvidia0 = str(h100x4.dev_root / "dev" / "nvidia0")
    nvidia1 = str(h100x4.dev_root / "dev" / "nvidia1")
    paths = [nvidia0, nvidia1, "/dev/null", "/dev/zero", "/dev/full"]
    before = {p: verdict(m) for p, m in opens_in(runc_cgroup, paths).items()}
    assert before[nvidia1] == "denied" and before["/dev/null"] == "allowed"
    granted = dev_of(nvidia1)
    mountinfo = "/proc/self/mountinfo"
    assert c_grant(driver, tmp_path, mountinfo, v2_lines(runc_cgroup), [granted]) == ""
    after = opens_in(runc_cgroup, paths)
    assert after[nvidia1] != os.strerror(errno.EPERM)  # past the cgroup: no driver behind it
    assert {p: verdict(m) for p, m in after.items()} == {**before, nvidia1: "allowed"}
    programs, flags = attached(runc_cgroup)
    assert flags == bpf.BPF_F_ALLOW_MULTI
    assert programs == [prepend_allow([granted], runc_like_program())]  # byte for byte


def test_v2_every_attached_program_is_extended(
    driver: Path,
    runc_cgroup: str,  # noqa: F811
    h100x4,
    tmp_path: Path,
) -> None:
    """systemd's program beside runc's (BPF_F_ALLOW_MULTI): both are swapped, in place."""
    second = attach_systemd_like(runc_cgroup)
    nvidia1 = str(h100x4.dev_root / "dev" / "nvidia1")
    paths = [nvidia1, "/dev/null", "/dev/zero"]
    expected = {nvidia1: "denied", "/dev/null": "allowed", "/dev/zero": "denied"}
    assert {p: verdict(m) for p, m in opens_in(runc_cgroup, paths).items()} == expected
    # Given twice and with another device: the rules are sorted and each device is there once.
    devices = [dev_of(nvidia1), (1, 9), dev_of(nvidia1)]
    assert c_grant(driver, tmp_path, "/proc/self/mountinfo", v2_lines(runc_cgroup), devices) == ""
    assert {p: verdict(m) for p, m in opens_in(runc_cgroup, paths).items()} == {
        **expected,
        nvidia1: "allowed",
    }
    programs, _ = attached(runc_cgroup)
    assert sorted(programs) == sorted(
        prepend_allow(devices, old) for old in (runc_like_program(), second)
    )


@pytest.fixture
def empty_cgroup() -> Iterator[str]:
    """A cgroup v2 directory of its own, no process and no device program in it."""
    require(need_root())
    mount = _cgroup2_mount()
    if mount is None:
        pytest.skip("needs a cgroup2 mount (cgroup v2 or a hybrid host)")
    path = os.path.join(mount, f"nvct-test-{uuid.uuid4().hex[:8]}")
    os.mkdir(path)
    try:
        yield path
    finally:
        os.rmdir(path)


def test_v2_a_cgroup_without_a_program_is_left_alone(
    driver: Path, tmp_path: Path, empty_cgroup: str
) -> None:
    path = empty_cgroup
    assert c_grant(driver, tmp_path, "/proc/self/mountinfo", v2_lines(path), [(195, 1)]) == ""
    assert attached(path) == ([], 0)


def test_v2_a_program_with_calls_is_refused_and_left_attached(
    driver: Path, h100x4, tmp_path: Path, empty_cgroup: str
) -> None:
    """A helper call (its kernel dump is not the program loaded) is never loaded again."""
    path = empty_cgroup
    fd = os.open(path, os.O_DIRECTORY | os.O_RDONLY)
    # r6 = ctx; call bpf_get_prandom_u32; r1 = r6; then runc's kind of rules.
    calls = insn(0xBF, 6, 1) + insn(0x85, imm=7) + insn(0xBF, 1, 6) + runc_like_program()
    prog = bpf.load_device_program(calls, "with_calls")
    try:
        bpf.attach_device_program(fd, prog, bpf.BPF_F_ALLOW_MULTI)
        before = attached(path)
        nvidia1 = str(h100x4.dev_root / "dev" / "nvidia1")
        err = c_grant(driver, tmp_path, "/proc/self/mountinfo", v2_lines(path), [dev_of(nvidia1)])
        assert err.startswith("cannot extend device program ") and f" of {path}: " in err
        assert "uses opcode 0x85 at instruction 1" in err and "--runtime=nvidia" in err
        assert attached(path) == before
        assert verdict(opens_in(path, [nvidia1])[nvidia1]) == "denied"
    finally:
        os.close(prog)
        os.close(fd)


def _devices_mount() -> str | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        extra = right.split()
        if extra[:1] == ["cgroup"] and "devices" in extra[-1].split(","):
            return left.split()[4]
    return None


def _rmdir(path: str) -> None:
    """rmdir a cgroup whose last process has just been reaped (it may still be leaving)."""
    for _ in range(100):
        try:
            os.rmdir(path)
            return
        except OSError as err:
            if err.errno != errno.EBUSY:
                raise
            time.sleep(0.01)
    os.rmdir(path)


def test_v1_devices_allow_grants_exactly_the_nodes(driver: Path, h100x4, tmp_path: Path) -> None:
    require(need_root())
    mount = _devices_mount()
    if mount is None:
        pytest.skip("needs the cgroup v1 devices controller mounted (a hybrid host)")
    own = Path("/proc/self/cgroup").read_text().splitlines()
    if any(line.startswith("0::") for line in own) and not any(
        "devices" in line.split(":")[1].split(",") for line in own
    ):
        pytest.skip("this process has no v1 devices cgroup")
    name = f"nvct-test-{uuid.uuid4().hex[:8]}"
    path = os.path.join(mount, name)
    os.mkdir(path)
    try:
        Path(path, "devices.deny").write_text("a")
        assert Path(path, "devices.list").read_text() == ""
        # This process's cgroup lines with the devices line naming the child.
        lines = "".join(
            f"{ln.split(':')[0]}:{ln.split(':')[1]}:/{name}\n"
            if "devices" in ln.split(":")[1].split(",")
            else f"{ln}\n"
            for ln in own
        )
        nvidia1 = str(h100x4.dev_root / "dev" / "nvidia1")
        devices = [dev_of(nvidia1), (1, 3)]
        assert c_grant(driver, tmp_path, "/proc/self/mountinfo", lines, devices) == ""
        listed = Path(path, "devices.list").read_text().splitlines()
        assert sorted(listed) == sorted(f"c {a}:{b} rwm" for a, b in devices)
        seen = opens_in(path, [nvidia1, "/dev/null", "/dev/zero"])
        assert seen[nvidia1] != os.strerror(errno.EPERM)
        assert {p: verdict(m) for p, m in seen.items()} == {
            nvidia1: "allowed",
            "/dev/null": "allowed",
            "/dev/zero": "denied",
        }
    finally:
        _rmdir(path)


# --- The directory chosen, against the Python, from fake mountinfo and cgroup text. Each
# directory is either missing (the same error names it) or under tmp (the same file written).

NODES = [(195, 1), (195, 255)]


def py_grant(tmp: Path, mountinfo: bytes, lines: str) -> str:
    """The Python's grant: "" or its error line (as the C words one the pid is unknown in)."""
    proc = tmp / f"proc-{uuid.uuid4().hex[:8]}"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_bytes(mountinfo)
    nodes = [(f"/dev/n{i}", major, minor, 0o666) for i, (major, minor) in enumerate(NODES)]
    try:
        grant_devices(42, nodes, str(proc), cgroup_lines=lines.splitlines())
    except ApplyError as err:
        text = err.one_line().replace("/proc/42/", "/proc/PID/")
        return text.replace("process 42 ", "the process ")
    except ValueError:  # a line before the devices one that is not ID:CONTROLLERS:PATH
        return "a line of /proc/PID/cgroup is not ID:CONTROLLERS:PATH"
    return ""


def _cases(tmp: Path) -> list[tuple[str, str, str]]:
    """(mountinfo, cgroup text, where the grant goes) of unified, hybrid, v1 and odd hosts."""
    new = f"pod-{uuid.uuid4().hex[:8]}"
    v1 = f"{tmp}/v1"
    tmpfs_top = "29 1 0:25 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
    unified = "30 29 0:26 /kubepods /sys/fs/cgroup rw shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
    devices = f"31 29 0:22 / {v1}/devices rw,relatime shared:9 - cgroup cgroup rw,devices\n"
    spaced = f"32 29 0:22 / {v1}/de\\040v rw - cgroup cgroup rw,devices\n"
    cg2 = f"33 29 0:27 / {tmp}/unified rw - cgroup2 cgroup2 rw\n"
    for d in ("devices/docker/abc", "de\\040v/abc", "devices/dev-dir", "devices/b"):
        os.makedirs(f"{v1}/{d}")
    return [
        # unified: the cgroup2 mount's root comes off (as a prefix, not a path component)
        (tmpfs_top + unified, f"0::/kubepods/{new}/c1\n", "missing"),
        (tmpfs_top + unified, f"0::/kubepods-burstable/{new}\n", "missing"),
        (tmpfs_top + unified, "5:devices:/docker/abc\n", "none"),
        # a tmpfs over the cgroup2 mount: the last one is what runc sees, a v1 host
        (unified + tmpfs_top + devices, "5:devices:/docker/abc\n0::/x\n", "v1"),
        (tmpfs_top + devices + cg2, "5:devices:/docker/abc\n0::/docker/abc\n", "v1"),
        (tmpfs_top + spaced + devices, "5:devices,memory:/abc\n", "v1"),
        (tmpfs_top + cg2, "5:devices:/docker/abc\n", "none"),
        (tmpfs_top + cg2 + devices, f"1:cpu:/x\n0::/{new}\n", "missing"),
        (tmpfs_top, "1:name=systemd:/x\n0::/\n", "none"),
        ("29 1 0:25 / /run rw - tmpfs tmpfs rw\n", "1:name=systemd:/x\n", "none"),
        (tmpfs_top + devices, "1:cpu\n5:devices:/docker/abc\n", "none"),
        (tmpfs_top + devices, "5:devices:/docker/abc\n\nbroken\n", "v1"),
        # str.splitlines breaks at U+2028; str.split() splits at U+00A0
        (tmpfs_top + devices, "1:cpu:/x\u20285:devices:/dev-dir\n", "v1"),
        (tmpfs_top + f"34 29 0:27 / {tmp}/a\xa0b rw - cgroup2 cgroup2 rw\n", "0::/c\n", "missing"),
        (tmpfs_top + devices.replace("\n", "\r") + cg2, "5:devices:/b\n", "v1"),
    ]


def outcome(tmp: Path, err: str) -> tuple[str, dict[str, str]]:
    """A grant's error line and the devices.allow files it wrote under ``tmp`` (then removed)."""
    written = {str(p): p.read_text() for p in tmp.rglob("devices.allow")}
    for p in written:
        os.unlink(p)
    return err, written


def test_the_directory_is_chosen_as_the_python_chooses_it(driver: Path, tmp_path: Path) -> None:
    for mountinfo, lines, where in _cases(tmp_path):
        path = tmp_path / f"mountinfo-{uuid.uuid4().hex[:8]}"
        path.write_bytes(mountinfo.encode())
        results = [
            outcome(tmp_path, py_grant(tmp_path, mountinfo.encode(), lines)),
            outcome(tmp_path, c_grant(driver, tmp_path, path, lines, NODES)),
        ]
        assert results[0] == results[1], (mountinfo, lines)
        err, written = results[0]
        case = (where, mountinfo, lines, err, written)
        if where == "v1":  # a plain file keeps the last rule of one write each
            assert err == "" and list(written.values()) == ["c 195:255 rwm\n"], case
        elif where == "missing":
            assert err.startswith("cannot open the container's cgroup ") and not written, case
        else:
            assert err and not written, case


def write(tmp: Path, text: str) -> Path:
    path = tmp / f"mountinfo-{uuid.uuid4().hex[:8]}"
    path.write_text(text)
    return path


def test_a_unified_host_grants_in_its_v2_directory(driver: Path, tmp_path: Path) -> None:
    """The cgroup2 mount on /sys/fs/cgroup (its root, /kubepods, is not in the path)."""
    new = f"pod-{uuid.uuid4().hex[:8]}"
    mountinfo = write(
        tmp_path,
        "29 1 0:25 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        "30 29 0:26 /kubepods /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
        f"31 29 0:22 / {tmp_path}/devices rw - cgroup cgroup rw,devices\n",
    )
    err = c_grant(driver, tmp_path, mountinfo, f"5:devices:/x\n0::/kubepods/{new}/c1\n", NODES)
    assert err == (
        f"cannot open the container's cgroup /sys/fs/cgroup/{new}/c1: No such file or directory"
    )


def test_a_host_with_no_device_cgroup_is_a_clear_refusal(driver: Path, tmp_path: Path) -> None:
    mountinfo = write(tmp_path, "29 1 0:25 / /run rw - tmpfs tmpfs rw\n")
    err = c_grant(driver, tmp_path, mountinfo, "1:name=systemd:/x\n", NODES)
    assert "no device cgroup" in err and "(fix: " in err and "--runtime=nvidia" in err


def test_nothing_to_grant_reads_nothing(driver: Path, tmp_path: Path) -> None:
    assert c_grant(driver, tmp_path, tmp_path / "missing", "0::/\n", []) == ""
    err = c_grant(driver, tmp_path, tmp_path / "missing", "0::/\n", NODES)
    assert err == f"cannot read {tmp_path / 'missing'}: No such file or directory"
