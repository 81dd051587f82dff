"""A plugin that sees the node's driver under /host writes a CDI spec with the node's paths:
the device nodes' under host-dev-root, the driver's files under host-driver-root."""

from __future__ import annotations

from typing import Any

from nvct.config import Config, parse_config
from nvct.plan.cdi_spec import on_host as _on_host
from nvct.plan.cdi_spec import spec_on_host


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


def _spec(driver: str, dev: str) -> dict[str, Any]:
    def node(name: str) -> dict[str, Any]:
        return {"path": f"/dev/{name}", "hostPath": f"{dev}/dev/{name}", "type": "c"}

    return {
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [node("nvidia0")]}}],
        "containerEdits": {
            "deviceNodes": [node("nvidiactl")],
            "mounts": [{"hostPath": f"{driver}/usr/lib/libcuda.so.1",
                        "containerPath": "/usr/lib/libcuda.so.1"}],
        },
    }  # fmt: skip


def _config(**plugin: str) -> Config:
    keys = "".join(f'{k} = "{v}"\n' for k, v in plugin.items())
    text = f'driver-root = "/host/run/nvidia/driver"\ndev-root = "/host"\n[device-plugin]\n{keys}'
    return parse_config(text.encode(), source="test")


def _host_paths(spec: dict[str, Any]) -> tuple[list[str], list[str]]:
    nodes = (
        spec["containerEdits"]["deviceNodes"] + spec["devices"][0]["containerEdits"]["deviceNodes"]
    )
    return [n["hostPath"] for n in nodes], [m["hostPath"] for m in spec["containerEdits"]["mounts"]]


def test_device_nodes_follow_host_dev_root_and_the_rest_host_driver_root() -> None:
    """NVIDIA's driver container: the driver under /run/nvidia/driver, its device nodes in the
    node's own /dev (NVIDIA_DEV_ROOT=/)."""
    spec = _spec("/host/run/nvidia/driver", "/host")
    config = _config(**{"host-driver-root": "/run/nvidia/driver", "host-dev-root": "/"})
    nodes, mounts = _host_paths(spec_on_host(spec, config))
    assert nodes == ["/dev/nvidiactl", "/dev/nvidia0"]
    assert mounts == ["/run/nvidia/driver/usr/lib/libcuda.so.1"]
    # the container's paths stay
    assert (
        spec_on_host(spec, config)["devices"][0]["containerEdits"]["deviceNodes"][0]["path"]
        == "/dev/nvidia0"
    )
    # without host-dev-root the nodes follow the driver's root (NVIDIA's nvidiaDevRoot default)
    nodes, mounts = _host_paths(spec_on_host(spec, _config(**{"host-driver-root": "/run/nv"})))
    assert nodes == ["/run/nv/dev/nvidiactl", "/run/nv/dev/nvidia0"]
    assert mounts == ["/run/nv/usr/lib/libcuda.so.1"]
    # neither: the spec as the plugin wrote it
    assert spec_on_host(spec, _config()) == spec
