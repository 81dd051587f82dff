"""Grant char devices to a cgroup v2 directory by replacing its BPF device programs.

Every device program attached to the cgroup must allow an access (BPF_F_ALLOW_MULTI), so
adding one more program cannot grant anything. Each attached program is read back from the
kernel, loaded again with the devices allowed in front of it, and attached in its place with
BPF_F_REPLACE (one atomic swap: at no moment does the cgroup allow less or more than the old
rules plus the devices). A cgroup without a program of its own already allows every device
at its level (only its ancestors' programs apply), so there is nothing to add.

As with NVIDIA's hook, a later ``runc update`` or a systemd daemon-reload rebuilds runc's
program from the spec and drops the grant; the runtime shim (devices in the spec) does not
have this limit.
"""

from __future__ import annotations

import os

from nvct.base import bpf
from nvct.base.errors import ApplyError
from nvct.container.devfilter import prepend_allow

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Sequence


def grant_devices_v2(cgroup_dir: str, devices: Sequence[tuple[int, int]]) -> int:
    """Allow read/write/mknod of char ``(major, minor)`` devices in ``cgroup_dir``.

    Returns:
        How many attached programs were replaced (0: none attached, nothing denied here).

    Raises:
        ApplyError: the cgroup cannot be opened, or a program cannot be read, built or swapped.
    """
    if not devices:
        return 0
    try:
        cgroup_fd = os.open(cgroup_dir, os.O_DIRECTORY | os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise ApplyError(
            f"cannot open the container's cgroup {cgroup_dir}: {err.strerror}"
        ) from err
    try:
        try:
            ids, flags = bpf.query_device_programs(cgroup_fd)
        except OSError as err:
            raise ApplyError(
                f"cannot list the device programs of {cgroup_dir}: {err.strerror}",
                hint="the hook needs CAP_SYS_ADMIN and a kernel with cgroup BPF (4.15+)",
            ) from err
        for prog_id in ids:
            _replace(cgroup_fd, cgroup_dir, prog_id, flags, devices)
        return len(ids)
    finally:
        os.close(cgroup_fd)


def _replace(
    cgroup_fd: int, cgroup_dir: str, prog_id: int, flags: int, devices: Sequence[tuple[int, int]]
) -> None:
    try:
        old_fd = bpf.program_fd(prog_id)
    except OSError as err:
        raise ApplyError(f"cannot open device program {prog_id}: {err.strerror}") from err
    new_fd = -1
    try:
        try:
            code = prepend_allow(devices, bpf.program_instructions(old_fd))
            new_fd = bpf.load_device_program(code)
        except (OSError, ValueError) as err:
            raise ApplyError(
                f"cannot extend device program {prog_id} of {cgroup_dir}: {err}",
                hint="run the container with --runtime=nvidia (nvct-runtime), which puts the "
                "devices in the spec instead",
            ) from err
        try:
            if flags & bpf.BPF_F_ALLOW_MULTI:
                bpf.attach_device_program(
                    cgroup_fd, new_fd, bpf.BPF_F_ALLOW_MULTI | bpf.BPF_F_REPLACE, old_fd
                )
            else:  # a single (or overridable) attachment is replaced by attaching again
                bpf.attach_device_program(cgroup_fd, new_fd, flags)
        except OSError as err:
            raise ApplyError(
                f"cannot attach the extended device program to {cgroup_dir}: {err.strerror}",
                hint="BPF_F_REPLACE needs Linux 5.6 or later",
            ) from err
    finally:
        os.close(old_fd)
        if new_fd >= 0:
            os.close(new_fd)
