"""bench.mount_floor: nvct's 1-GPU spec edits as docker's own flags."""

from __future__ import annotations

from bench.mount_floor import docker_flags

PLAIN = {
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc", "options": []}],
    "linux": {"devices": [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}]},
}


def test_only_what_the_edits_add_becomes_flags() -> None:
    edited = {
        "mounts": [
            *PLAIN["mounts"],
            {
                "destination": "/usr/bin/nvidia-smi",
                "source": "/drv/usr/bin/nvidia-smi",
                "options": ["bind", "ro", "nosuid", "nodev", "private"],
            },
            {
                "destination": "/tmp/nvidia-mps",
                "source": "/drv/tmp/nvidia-mps",
                "options": ["bind", "rw", "nosuid", "nodev", "noexec", "private"],
            },
            {"destination": "/run/x", "source": "tmpfs", "type": "tmpfs", "options": ["nosuid"]},
        ],
        "linux": {
            "devices": [
                *PLAIN["linux"]["devices"],
                {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0},
            ]
        },
    }
    assert docker_flags(edited, PLAIN, "/sim/root") == {
        "mounts": [
            "--mount",
            "type=bind,source=/drv/usr/bin/nvidia-smi,target=/usr/bin/nvidia-smi,readonly,"
            "bind-propagation=private",
            "--mount",
            "type=bind,source=/drv/tmp/nvidia-mps,target=/tmp/nvidia-mps,bind-propagation=private",
        ],
        "devices": ["--device", "/sim/root/dev/nvidia0:/dev/nvidia0:rwm"],
    }
