"""A plugin that sees the node's driver under /host writes a CDI spec with the node's paths."""

from __future__ import annotations

from nvct.plan.cdi_spec import on_host as _on_host


def test_paths_under_the_seen_root_move_to_the_host_root() -> None:
    spec = {
        "devices": [{"containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0",
                                                           "hostPath": "/host/dev/nvidia0"}]}}],
        "containerEdits": {"mounts": [{"hostPath": "/host/usr/lib/libcuda.so.1",
                                       "containerPath": "/usr/lib/libcuda.so.1"}],
                           "hooks": [{"path": "/usr/bin/python3", "args": ["/hostile"]}]},
    }  # fmt: skip
    moved = _on_host(spec, "/host", "/")
    assert moved["devices"][0]["containerEdits"]["deviceNodes"][0] == {
        "path": "/dev/nvidia0",
        "hostPath": "/dev/nvidia0",
    }
    mount = moved["containerEdits"]["mounts"][0]
    assert mount["hostPath"] == "/usr/lib/libcuda.so.1"
    assert moved["containerEdits"]["hooks"][0] == spec["containerEdits"]["hooks"][0]
    assert _on_host("/host", "/host", "/run/nvidia/driver") == "/run/nvidia/driver"
