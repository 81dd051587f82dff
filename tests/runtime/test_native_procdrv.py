"""procdrv.h, the native prestart hook's /proc/driver/nvidia, against the Python it ports
(nvct.container.procfs.stage_proc_driver): each runs on its own copy of a container's rootfs in
a private mount namespace, and what the container would see there (files, modes, contents,
mounts and their options, whether anything can be written) must be the same."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from integration.harness.skips import need_binary, need_root, require
from nvct.container.procfs import container_params
from tests.runtime.c_driver import LAUNCH, build_driver

REPO = LAUNCH.parents[2]

# argv: rootfs, proc root, entries. Prints masked, absent or "error: <reason>"; on stderr, any
# descriptor the call left open.
DRIVER = r"""
#define _GNU_SOURCE
#define PROGRAM "procdrv-test"
#include NVCT_LAUNCHER_CONFIG
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* client.h's, json.h's, rootfs.h's own */
#include "client.h"
#include "json.h"
#include "rootfs.h"
#pragma GCC diagnostic pop
#include "procdrv.h"

int main(int argc, char **argv)
{
    char open_before[1024] = {0}, err[4096] = "";
    if (argc < 3)
        return 2;
    for (int fd = 0; fd < 1024; fd++)
        open_before[fd] = fcntl(fd, F_GETFD) >= 0;
    int root = open(argv[1], O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return 2;
    int rc = stage_proc_driver(root, argv[2], (const char *const *)argv + 3, argc - 3, err,
                               sizeof err);
    close(root);
    for (int fd = 0; fd < 1024; fd++)
        if (!open_before[fd] && fcntl(fd, F_GETFD) >= 0)
            fprintf(stderr, "left open: fd %d\n", fd);
    printf(rc < 0 ? "error: %s\n" : rc ? "masked\n" : "absent\n", err);
    return rc < 0;
}
"""

# Run in a private mount namespace: stage /proc/driver/nvidia (mode "c": the driver; "py":
# stage_proc_driver), then, in the same namespace, describe the lists' trees and the mounts
# under `base`. argv[1]: JSON of mode, driver, rootfs, proc_root, entries, base, lists
# ([path, probe]: probe tries to write each entry) and bind (mounted over /proc/driver first).
RUNNER = r"""
import errno, json, os, stat, subprocess, sys

job = json.loads(sys.argv[1])
if job.get("bind"):
    subprocess.run(["mount", "--bind", job["bind"], "/proc/driver"], check=True)
args = [job["rootfs"], job["proc_root"], *job["entries"]]
if job["mode"] == "c":
    done = subprocess.run([job["driver"], *args], capture_output=True, text=True)
    result, stderr = done.stdout.strip(), done.stderr
else:
    from nvct.base.errors import ApplyError
    from nvct.container.procfs import stage_proc_driver
    from nvct.container.rootfs import Rootfs

    with Rootfs(job["rootfs"]) as rootfs:
        try:
            result = stage_proc_driver(rootfs, job["proc_root"], job["entries"])
        except ApplyError as err:
            result = f"error: {err}"
    stderr = ""


def writable(path, is_dir):
    try:
        if is_dir:
            fd = os.open(os.path.join(path, ".probe"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            os.unlink(os.path.join(path, ".probe"))
        else:
            fd = os.open(path, os.O_WRONLY)
        os.close(fd)
        return "yes"
    except OSError as err:
        return errno.errorcode[err.errno]


def tree(path, rel, probe, out):
    st = os.lstat(path)
    kind = "d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode) else "f"
    item = {"path": rel, "type": kind, "mode": oct(stat.S_IMODE(st.st_mode))}
    if kind == "f":
        with open(path, "rb") as f:
            item["content"] = f.read().decode(errors="replace")
    if kind == "l":
        item["target"] = os.readlink(path)
    if probe and kind != "l":
        item["writable"] = writable(path, kind == "d")
    out.append(item)
    if kind == "d":
        for name in sorted(os.listdir(path)):
            tree(os.path.join(path, name), f"{rel}/{name}", probe, out)
    return out


base = job["base"]
lists = {}
for path, probe in job["lists"]:  # never probe outside the rootfs: the symlink tests' dirs
    within = os.path.realpath(job["rootfs"] if probe else base) + "/"
    inside = os.path.realpath(path).startswith(within)
    lists[os.path.relpath(path, base)] = (
        tree(path, ".", probe, []) if inside and os.path.lexists(path) else None
    )
mounts = []
with open("/proc/self/mountinfo") as f:
    for line in f:
        fields = line.split()
        point = fields[4].encode().decode("unicode_escape")
        if point.startswith(base + "/"):
            fstype = fields[fields.index("-") + 1]
            mounts.append([os.path.relpath(point, base), fields[3], fields[5], fstype])
print(json.dumps({"result": result, "stderr": stderr, "lists": lists, "mounts": mounts}))
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver, built with -O2 -Wall -Wextra -Werror (procdrv.h must compile clean)."""
    require(need_root(), need_binary("gcc"), need_binary("unshare"), need_binary("mount"))
    return build_driver(tmp_path_factory.mktemp("procdrv"), DRIVER)


def stage(
    driver: Path,
    mode: str,
    base: Path,
    proc_root: str,
    entries: list[str],
    lists: tuple[tuple[Path, bool], ...] = (),
    bind: str | None = None,
) -> dict:
    """Stage in a private mount namespace and describe what the container would see there."""
    rootfs = base / "rootfs"
    job = {
        "mode": mode,
        "driver": str(driver),
        "rootfs": str(rootfs),
        "proc_root": proc_root,
        "entries": entries,
        "base": str(base),
        "lists": [[str(rootfs / "proc/driver"), True]] + [[str(p), b] for p, b in lists],
        "bind": bind,
    }
    cmd = ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", RUNNER]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [*cmd, json.dumps(job)], capture_output=True, text=True, check=False, cwd=REPO, env=env
    )
    assert done.returncode == 0, done.stderr
    seen: dict = json.loads(done.stdout)
    return seen


def make_rootfs(base: Path, layout: str, outside: Path | None = None) -> None:
    """A container's rootfs under ``base``: its /proc as ``layout`` has it."""
    proc = base / "rootfs/proc"
    if layout == "nvidia-dir":  # a procfs with the driver: covered as it is
        (proc / "driver/nvidia").mkdir(parents=True)
        (proc / "driver/nvidia/stale").write_text("the image's\n")
    elif layout == "no-nvidia":  # no driver loaded: /proc/driver gets a tmpfs first
        (proc / "driver").mkdir(parents=True)
    elif layout == "proc-abs-link":
        proc.parent.mkdir(parents=True)
        proc.symlink_to(outside)  # type: ignore[arg-type]
    elif layout == "driver-rel-link":
        proc.mkdir(parents=True)
        (proc / "driver").symlink_to("../../../../../../../../.." + f"{outside}/driver")
    elif layout == "nvidia-abs-link":
        (proc / "driver").mkdir(parents=True)
        (proc / "driver/nvidia").symlink_to(f"{outside}/driver/nvidia")
    else:
        raise AssertionError(layout)


# The outside directory: relative path -> (type, what else its listing holds).
OUTSIDE = {
    ".": ("d", {}),
    "driver": ("d", {}),
    "driver/nvidia": ("d", {}),
    "driver/nvidia/keep": ("f", {"content": "the host's\n"}),
}


def make_outside(base: Path) -> Path:
    """A directory outside the rootfs that a followed symlink would reach."""
    outside = base / "outside"
    (outside / "driver/nvidia").mkdir(parents=True)
    (outside / "driver/nvidia/keep").write_text("the host's\n")
    return outside


def both(driver: Path, tmp: Path, layout: str, proc_root: str, entries: list[str], **kw) -> tuple:
    """The C's and the Python's stage, each on its own rootfs made as ``layout`` says."""
    seen = []
    for mode in ("c", "py"):
        base = tmp / mode
        outside = make_outside(base)
        make_rootfs(base, layout, outside)
        lists = ((outside, False),)
        seen.append(stage(driver, mode, base, proc_root, entries, lists, **kw))
    return seen[0], seen[1]


def bus_ids(proc_root: str) -> list[str]:
    return sorted(os.listdir(f"{proc_root}/driver/nvidia/gpus"))


def test_the_header_compiles_warning_free(driver: Path) -> None:
    assert driver.exists()  # the fixture built it with -Werror and checked gcc said nothing


def test_every_descriptor_is_close_on_exec() -> None:
    """in_root adds O_CLOEXEC; every other open, openat and dup in procdrv.h names it."""
    text = (LAUNCH / "procdrv.h").read_text()
    starts = [m.start() for m in re.finditer(r"\b(?:openat|open|fcntl)\(", text)]
    assert len(starts) >= 7
    for start, after in zip(starts, [*starts[1:], len(text)], strict=True):
        call = text[start : min(after, text.index(";", start))]
        assert "CLOEXEC" in call, call


@pytest.mark.parametrize("layout", ["nvidia-dir", "no-nvidia"])
@pytest.mark.parametrize("sim_name", ["h100x4", "a100mig"])
def test_c_and_python_show_a_container_the_same_proc_driver(
    driver: Path, tmp_path: Path, request: pytest.FixtureRequest, layout: str, sim_name: str
) -> None:
    sim = request.getfixturevalue(sim_name)
    proc_root = str(sim.proc_root)
    host = Path(proc_root, "driver/nvidia")
    gpu = bus_ids(proc_root)[1]
    # The second GPU's entries, one the host lacks (h100: no MIG), a file under a new dir.
    entries = [f"gpus/{gpu}", "capabilities/gpu1", "capabilities/mig/config"]
    c, py = both(driver, tmp_path, layout, proc_root, entries)
    assert c["stderr"] == ""  # no descriptor left open
    assert c["result"] == py["result"] == "masked"
    assert c["lists"] == py["lists"]
    assert c["mounts"] == py["mounts"]

    listing = {item["path"]: item for item in c["lists"]["rootfs/proc/driver"]}
    nv = {p[len("./nvidia/") :]: item for p, item in listing.items() if p.startswith("./nvidia/")}
    params = (host / "params").read_text()
    assert "ModifyDeviceFiles: 1" in params
    assert nv["params"]["content"] == container_params(params)
    assert "ModifyDeviceFiles: 0" in nv["params"]["content"]
    assert "ModifyDeviceFiles: 1" not in nv["params"]["content"]
    for name in ("version", "registry"):
        assert nv[name]["content"] == (host / name).read_text()
    for name in ("params", "version", "registry"):
        assert nv[name]["mode"] == "0o444" and nv[name]["type"] == "f"
    assert "stale" not in nv  # the image's directory is covered
    assert [p for p in nv if p.startswith("gpus/") and p.count("/") == 1] == [f"gpus/{gpu}"]
    assert (
        nv[f"gpus/{gpu}/information"]["content"]
        == (host / "gpus" / gpu / "information").read_text()
    )
    mig = (host / "capabilities").exists()
    assert ("capabilities/gpu1" in nv) == mig and ("capabilities/mig/config" in nv) == mig
    if mig:
        assert "capabilities/mig/monitor" not in nv
        assert nv["capabilities/mig/config"]["type"] == "f"
        assert nv["capabilities/mig"]["mode"] == nv["capabilities"]["mode"] == "0o555"
    assert listing["./nvidia"]["mode"] == nv["gpus"]["mode"] == "0o555"
    assert {item["writable"] for p, item in listing.items() if p != "."} == {"EROFS"}
    assert listing["."]["writable"] == ("EROFS" if layout == "no-nvidia" else "yes")
    points = [m[0] for m in c["mounts"]]
    covered = ["rootfs/proc/driver"] if layout == "no-nvidia" else []
    binds = [f"rootfs/proc/driver/nvidia/{e}" for e in entries if (host / e).exists()]
    assert points == [*covered, "rootfs/proc/driver/nvidia", *binds]
    for point, _root, options, _fstype in c["mounts"]:
        assert options.split(",")[:4] == ["ro", "nosuid", "nodev", "noexec"], point


@pytest.mark.parametrize("entry", ["gpus/../../../etc", "..", "/gpus", "gpus//x", "", "gpus/"])
def test_an_entry_outside_the_directory_is_refused(
    driver: Path, h100x4, tmp_path: Path, entry: str
) -> None:
    proc_root = str(h100x4.proc_root)
    entries = [f"gpus/{bus_ids(proc_root)[0]}", entry]
    c, py = both(driver, tmp_path, "nvidia-dir", proc_root, entries)
    assert c["result"].startswith("error: cannot cover /proc/driver/nvidia in the container: ")
    assert "is not an entry of /proc/driver/nvidia" in c["result"], c["result"]
    assert "is not an entry of /proc/driver/nvidia" in py["result"], py["result"]
    assert c["stderr"] == ""
    assert c["mounts"] == []  # refused before anything is mounted (the Python's stays mounted)


@pytest.mark.parametrize("twice", ["gpus/{gpu}", "capabilities/mig/config"])
def test_an_entry_named_twice_fails_midway_leaving_no_descriptor_open(
    driver: Path, a100mig, tmp_path: Path, twice: str
) -> None:
    """The second bind finds its mount point made (O_EXCL, mkdir): an error, as in the Python."""
    proc_root = str(a100mig.proc_root)
    entry = twice.format(gpu=bus_ids(proc_root)[0])
    c, py = both(driver, tmp_path, "nvidia-dir", proc_root, [entry, entry])
    assert c["result"].startswith("error: ") and py["result"].startswith("error: ")
    assert "File exists" in c["result"] and "File exists" in py["result"]
    assert c["stderr"] == ""
    assert c["mounts"] == py["mounts"]  # both stop where the error came


def test_files_are_copied_up_to_a_mebibyte(driver: Path, h100x4, tmp_path: Path) -> None:
    """procfs._MAX_FILE: a longer file is cut there; every ModifyDeviceFiles: 1 in params."""
    proc = tmp_path / "hostproc"
    shutil.copytree(h100x4.proc_root, proc, symlinks=True)
    nv = proc / "driver/nvidia"
    params = (nv / "params").read_text() + "ModifyDeviceFiles: 1\nModifyDeviceFiles: 1"
    (nv / "params").write_text(params)
    (nv / "registry").write_text("x" * ((1 << 20) + 10))
    (nv / "version").unlink()
    c, py = both(driver, tmp_path, "nvidia-dir", str(proc), [])
    assert c["result"] == py["result"] == "masked"
    assert c["lists"] == py["lists"]
    listing = {item["path"]: item for item in c["lists"]["rootfs/proc/driver"]}
    assert listing["./nvidia/registry"]["content"] == "x" * (1 << 20)
    shown = listing["./nvidia/params"]["content"]
    assert shown == container_params(params) and shown.count("ModifyDeviceFiles: 0") == 3
    assert "./nvidia/version" not in listing  # what the host lacks is not there


def test_a_host_without_the_driver_shows_nothing(driver: Path, tmp_path: Path) -> None:
    empty = tmp_path / "hostproc"
    (empty / "driver").mkdir(parents=True)
    c, py = both(driver, tmp_path, "no-nvidia", str(empty), ["gpus/0000:00:01.0"])
    assert c["result"] == py["result"] == "absent"
    assert c["mounts"] == py["mounts"] == []
    assert c["lists"] == py["lists"]
    assert c["stderr"] == ""


@pytest.mark.parametrize(
    ("proc_root", "result"),
    [
        ("/proc", "absent"),
        ("/proc/", "absent"),
        ("/proc/./", "absent"),
        ("/tmp/../proc", "absent"),
        ("///proc", "absent"),
        ("//proc", "masked"),  # normpath keeps two leading slashes: not "/proc"
        ("{tmp}/../../../../../../../../../../proc", "absent"),  # long names, then ".."
        ("{tmp}/proc", "masked"),
    ],
)
def test_with_the_hosts_own_proc_a_container_without_the_driver_gets_nothing(
    driver: Path, h100x4, tmp_path: Path, proc_root: str, result: str
) -> None:
    """The host's /proc (here the simulated driver's bound over /proc/driver in the namespace)
    and a container whose /proc has no driver/nvidia: nothing to show."""
    bind = f"{h100x4.proc_root}/driver"
    proc_root = proc_root.replace("{tmp}", str(tmp_path))
    if proc_root.startswith(str(tmp_path)):
        shutil.copytree(h100x4.proc_root, tmp_path / "proc", symlinks=True)
    c, py = both(driver, tmp_path, "no-nvidia", proc_root, [], bind=bind)
    assert c["result"] == py["result"] == result
    assert c["lists"] == py["lists"]
    assert c["mounts"] == py["mounts"]
    assert c["stderr"] == ""


@pytest.mark.parametrize("layout", ["proc-abs-link", "driver-rel-link", "nvidia-abs-link"])
def test_a_symlink_out_of_the_rootfs_mounts_nothing_outside(
    driver: Path, h100x4, tmp_path: Path, layout: str
) -> None:
    proc_root = str(h100x4.proc_root)
    entries = [f"gpus/{bus_ids(proc_root)[0]}"]
    c, py = both(driver, tmp_path, layout, proc_root, entries)
    assert c["stderr"] == ""
    assert c["result"].split(":")[0] == py["result"].split(":")[0]
    assert c["lists"] == py["lists"]
    assert c["mounts"] == py["mounts"]
    # Inside the namespace, after the stage: the outside directory as it was made.
    outside = tmp_path / "c/outside"
    mode = {rel: oct((outside / rel).stat().st_mode & 0o7777) for rel in OUTSIDE}
    assert c["lists"]["outside"] == [
        {"path": "./" + rel if rel != "." else rel, "type": kind, "mode": mode[rel], **extra}
        for rel, (kind, extra) in OUTSIDE.items()
    ]
    assert all(m[0].startswith("rootfs/") for m in c["mounts"])
    if layout == "nvidia-abs-link":  # the link is the image's: covered, its /proc/driver too
        assert c["result"] == "masked"
        assert [m[0] for m in c["mounts"]][:2] == [
            "rootfs/proc/driver",
            "rootfs/proc/driver/nvidia",
        ]
    else:  # /proc or /proc/driver resolve to nothing inside the rootfs
        assert c["result"].startswith("error: ")
        assert c["mounts"] == []
