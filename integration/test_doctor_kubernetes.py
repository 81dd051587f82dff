"""``nvct-cli doctor``'s Kubernetes node checks against the real nvct-device-plugin process
registered with the kubelet stand-in, on the simulated driver: all PASS while it serves; FAIL
with the fix once it is stopped; the same in ``--json``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.harness.deviceplugin import PluginProcess, numa_sysfs
from integration.harness.nvct_config import NVCT_BIN
from integration.kubelet.standin import Kubelet

pytestmark = [pytest.mark.root]
GPU = "nvidia.com/gpu"
CHECKS = (
    "kubelet-socket",
    "device-plugin",
    "device-plugin-devices",
    "runtime-class",
    "device-plugin-guard",
    "device-plugin-cdi-spec",
    "mig-strategy",
)


@pytest.fixture
def node(tmp_path: Path, sim_driver: Any) -> Iterator[tuple[Kubelet, PluginProcess]]:
    """The kubelet stand-in and a registered plugin (both stopped after the test)."""
    kubelet = Kubelet(tmp_path / "device-plugins").start()
    numa_sysfs(tmp_path, sim_driver)
    cdi_dir = f'"{tmp_path / "cdi"}"'
    plugin = PluginProcess(
        tmp_path, sim_driver, kubelet.plugin_dir, **{"device-plugin.cdi-spec-dir": cdi_dir}
    )
    try:
        plugin.start()
        assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates), (
            plugin.output()
        )
        yield kubelet, plugin
    finally:
        if plugin.proc is not None:
            plugin.stop()
        kubelet.stop()


def doctor(plugin: PluginProcess, kubelet: Kubelet, *args: str) -> subprocess.CompletedProcess[str]:
    """nvct-cli doctor on the plugin's config and roots, with a containerd config whose
    runtime nvidia is this nvct-runtime."""
    containerd = plugin.work / "containerd/config.toml"
    containerd.parent.mkdir(exist_ok=True)
    containerd.write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        'runtime_type = "io.containerd.runc.v2"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        f'BinaryName = "{NVCT_BIN / "nvct-runtime"}"\n'
    )
    env = {
        **os.environ,
        "NVCT_SIM_DEV_ROOT": str(plugin.dev_root),
        "NVCT_SIM_CONTROL_DIR": str(plugin.control),
    }
    argv = [
        sys.executable, "-m", "nvct.cli.main", "--config", str(plugin.config),
        "--dev-root", str(plugin.dev_root), "doctor", "--plugin-dir", str(kubelet.plugin_dir),
        "--containerd-config", str(containerd), "--crio-config", str(plugin.work / "no-crio"),
        "--crio-dropin-dir", str(plugin.work / "no-crio.d"), "--cdi-dir", str(plugin.work / "cdi"),
        "--sysfs-root", str(plugin.work / "sys"), *args,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)


def kubernetes_lines(text: str) -> list[str]:
    """The Kubernetes checks' lines of doctor's text output, each fix line with its check."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.split(":")[0].split(" ")[-1] in CHECKS:
            out.append(line)
            if i + 1 < len(lines) and lines[i + 1].startswith("     fix: "):
                out.append(lines[i + 1])
    return out


def test_doctor_on_a_node_with_the_plugin_serving_then_stopped(node) -> None:
    kubelet, plugin = node
    sock = kubelet.plugin_dir / "nvidia-gpu.sock"
    done = doctor(plugin, kubelet)
    shown = kubernetes_lines(done.stdout)
    assert [ln.split(":")[0] for ln in shown] == [f"PASS {name}" for name in CHECKS], done.stdout
    assert (
        "PASS device-plugin: nvidia-gpu.sock (nvidia.com/gpu) answers GetDevicePluginOptions, "
        "newer than kubelet.sock" in shown
    )
    assert (
        "PASS device-plugin-devices: nvct-device-plugin advertises nvidia.com/gpu: 4 Healthy"
        in (shown)
    )
    spec = plugin.work / "cdi/nvct-device-plugin.json"
    assert (
        f"PASS device-plugin-cdi-spec: {spec} names all 4 advertised device(s), driver 550.54.15"
        in shown
    )
    checks = json.loads(doctor(plugin, kubelet, "--json").stdout)["checks"]
    statuses = {c["name"]: c["status"] for c in checks if c["name"] in CHECKS}
    assert statuses == dict.fromkeys(CHECKS, "PASS"), checks

    assert plugin.stop() == 0
    done = doctor(plugin, kubelet)
    assert done.returncode == 1
    shown = kubernetes_lines(done.stdout)
    failure = shown.index(
        f"FAIL device-plugin: no {sock}: nvct-device-plugin is not serving nvidia.com/gpu "
        "(stopped, or it did not come back after the kubelet restarted)"
    )
    assert shown[failure + 1].startswith("     fix: restart the plugin pod of this node (kubectl")
    assert "PASS kubelet-socket" in shown[0]  # the kubelet is still there
    checks = json.loads(doctor(plugin, kubelet, "--json").stdout)["checks"]
    [serving] = [c for c in checks if c["name"] == "device-plugin"]
    assert serving["status"] == "FAIL" and serving["fix"].startswith("restart the plugin pod")
    [devices] = [c for c in checks if c["name"] == "device-plugin-devices"]
    assert devices["status"] == "SKIP" and "is stale: no plugin serves" in devices["message"]


def serving_result(plugin: PluginProcess, kubelet: Kubelet) -> dict[str, Any]:
    checks = json.loads(doctor(plugin, kubelet, "--json").stdout)["checks"]
    [serving] = [c for c in checks if c["name"] == "device-plugin"]
    return serving


def test_doctor_after_a_kubelet_restart_and_on_a_hung_plugin(node) -> None:
    kubelet, plugin = node
    assert plugin.proc is not None
    kubelet.restart()  # sockets deleted, a new kubelet.sock: the plugin serves and registers again
    assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates)
    serving = serving_result(plugin, kubelet)
    assert serving["status"] == "PASS" and "newer than kubelet.sock" in serving["message"]
    os.kill(plugin.proc.pid, signal.SIGSTOP)  # the socket stays, nobody answers on it
    try:
        hung = serving_result(plugin, kubelet)
    finally:
        os.kill(plugin.proc.pid, signal.SIGCONT)
    assert hung["status"] == "FAIL"
    assert "exists but does not answer GetDevicePluginOptions within 2 s" in hung["message"]
    assert hung["fix"].startswith("restart the plugin pod of this node")
