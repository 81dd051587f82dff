"""Device-cgroup grants of a hook run without the shim, against fake procfs trees."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nvct.base.errors import ApplyError
from nvct.container import cgroup
from nvct.container.cgroup import devices_cgroup_dir, grant_devices

NODES = [["/dev/nvidia1", 195, 1, 0o666], ["/dev/nvidiactl", 195, 255, 0o666]]


def fake_proc(tmp: Path, cgroup: str, mountinfo: str) -> Path:
    proc = tmp / "proc"
    (proc / "42").mkdir(parents=True)
    (proc / "self").mkdir()
    (proc / "42" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text(mountinfo)
    return proc


V1_MOUNTS = (
    "25 24 0:22 / {root}/devices rw,relatime shared:9 - cgroup cgroup rw,devices\n"
    "26 24 0:23 / {root}/memory rw,relatime shared:10 - cgroup cgroup rw,memory\n"
)


def test_v1_writes_one_allow_rule_per_node(tmp_path: Path, monkeypatch) -> None:
    cg = tmp_path / "cg"
    proc = fake_proc(
        tmp_path, "5:devices:/docker/abc\n4:memory:/docker/abc\n0::/\n", V1_MOUNTS.format(root=cg)
    )
    target = cg / "devices" / "docker" / "abc"
    target.mkdir(parents=True)
    assert devices_cgroup_dir(42, str(proc)) == str(target)
    # devices.allow takes one rule per open+write, as the kernel file does; keep every one.
    rules: list[str] = []
    real_open = open

    def appending_open(path, mode="r", **kw):
        if str(path).endswith("devices.allow"):
            handle = real_open(path, "ab" if "b" in mode else "a", **kw)
            rules.append("")
            return handle
        return real_open(path, mode, **kw)

    monkeypatch.setattr(cgroup, "open", appending_open, raising=False)
    grant_devices(42, NODES, str(proc))
    assert (target / "devices.allow").read_text() == "c 195:1 rwm\nc 195:255 rwm\n"
    assert len(rules) == 2


def test_a_busy_nodes_mountinfo_is_read_once_and_odd_paths_do_not_stop_a_grant(
    tmp_path: Path, monkeypatch
) -> None:
    # Hundreds of containers' overlay mounts, one mount point that is not UTF-8 (a crash
    # while the whole file was decoded), a look-alike of the devices mount that is no
    # cgroup, and the real controllers last.
    cg = tmp_path / "cg"
    overlay = (
        "{n} 27 0:{n} / /var/lib/docker/overlay2/{n:064x}/merged rw,relatime - overlay overlay "
        "rw,lowerdir=/var/lib/docker/overlay2/l/A:/var/lib/docker/overlay2/l/B,upperdir=/u\n"
    )
    mountinfo = (
        "".join(overlay.format(n=n) for n in range(100, 600))
        + "90 27 0:90 / /mnt/caf\xe9 rw - tmpfs tmpfs rw\n"
        + f"91 27 0:91 / {cg}/devices-old rw - tmpfs devices rw,devices\n"
        + V1_MOUNTS.format(root=cg)
    )
    proc = fake_proc(tmp_path, "5:devices:/docker/abc\n4:memory:/docker/abc\n", "")
    (proc / "self" / "mountinfo").write_bytes(mountinfo.encode("latin-1"))
    target = cg / "devices" / "docker" / "abc"
    target.mkdir(parents=True)
    opened: list[str] = []
    real_open = open

    def counting_open(path, mode="r", **kw):
        opened.append(str(path))
        return real_open(path, mode, **kw)

    monkeypatch.setattr(cgroup, "open", counting_open, raising=False)
    grant_devices(42, NODES, str(proc))
    assert (target / "devices.allow").read_text() == "c 195:255 rwm\n"  # the last rule
    assert opened.count(str(proc / "self" / "mountinfo")) == 1


V2_MOUNTS = (
    "29 1 0:25 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
    "30 29 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
)
HYBRID_MOUNTS = (
    "29 1 0:25 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
    "31 29 0:22 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n"
    "32 29 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
)


def test_unified_host_grants_through_the_bpf_program(tmp_path: Path, monkeypatch) -> None:
    # The last mount on /sys/fs/cgroup is what runc sees: cgroup2 there means a v2 host,
    # whatever was mounted under it before.
    proc = fake_proc(tmp_path, "0::/system.slice/docker-abc.scope\n", V2_MOUNTS)
    calls: list[tuple[str, list[tuple[int, int]]]] = []
    monkeypatch.setattr(
        "nvct.container.cgroup_v2.grant_devices_v2",
        lambda directory, devices: calls.append((directory, list(devices))) or 1,
    )
    grant_devices(42, NODES, str(proc))
    assert calls == [("/sys/fs/cgroup/system.slice/docker-abc.scope", [(195, 1), (195, 255)])]


def test_hybrid_host_keeps_devices_on_v1(tmp_path: Path) -> None:
    # runc on a hybrid host puts devices on the v1 controller, so the hook writes there too.
    proc = fake_proc(tmp_path, "5:devices:/docker/abc\n0::/docker/abc\n", HYBRID_MOUNTS)
    assert cgroup.unified_cgroup_dir(42, str(proc)) is None
    assert devices_cgroup_dir(42, str(proc)) == "/sys/fs/cgroup/devices/docker/abc"


def test_no_device_cgroup_at_all_is_a_clear_refusal(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, "1:name=systemd:/x\n", "29 1 0:25 / /run rw - tmpfs tmpfs rw\n")
    with pytest.raises(ApplyError, match="no device cgroup") as err:
        grant_devices(42, NODES, str(proc))
    assert "--runtime=nvidia" in err.value.one_line()


def test_nothing_to_grant_reads_nothing(tmp_path: Path) -> None:
    grant_devices(42, [], str(tmp_path / "missing"))


def test_a_grant_in_a_daemon_worker_imports_nothing(tmp_path: Path) -> None:
    """What the shim daemon preloads is all the --gpus hook's grant needs: a fresh worker (a
    fork of the daemon) loads no module for it, not even a codec (once ~1 ms a start)."""
    cg = tmp_path / "cg"
    proc = fake_proc(tmp_path, "5:devices:/docker/abc\n0::/\n", V1_MOUNTS.format(root=cg))
    (cg / "devices" / "docker" / "abc").mkdir(parents=True)
    code = f"""
import sys
from nvct.runtime.launch.daemon import preload
preload()
from nvct.container.cgroup import grant_devices
before = set(sys.modules)
grant_devices(42, {NODES!r}, {str(proc)!r}, cgroup_lines=["5:devices:/docker/abc", "0::/"])
print(" ".join(sorted(set(sys.modules) - before)))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
    allow = cg / "devices" / "docker" / "abc" / "devices.allow"
    assert allow.read_text() == "c 195:255 rwm\n"  # a plain file keeps the last write
