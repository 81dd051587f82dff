"""nvct-device-plugin behind NVIDIA's GPU operator: the environment its ClusterPolicy gives the
device-plugin container (gpu-operator assets/state-device-plugin/0500_daemonset.yaml, the
driver validation's driver-ready file it sources, controllers/object_controls.go), and NVIDIA's
``--fail-on-init-error=false``. The real process on the simulated driver, against the kubelet
stand-in: what it advertises, answers and says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from integration.harness.deviceplugin import PluginProcess, numa_sysfs, uuids
from integration.harness.processes import until
from integration.kubelet.standin import Kubelet
from nvct.cdi.names import PLUGIN_KIND, PLUGIN_SPEC_NAME

pytestmark = [pytest.mark.root]
GPU = "nvidia.com/gpu"


def events(plugin: PluginProcess, name: str) -> list[dict[str, Any]]:
    lines = (json.loads(x) for x in plugin.output().splitlines() if x.startswith("{"))
    return [e for e in lines if e.get("event") == name]


def operator_env(sim: Any, plugin: PluginProcess, tmp_path: Path) -> dict[str, str]:
    """What the ClusterPolicy's defaults set (device-list envvar, device specs, MIG single),
    and the driver-ready file's roots for the operator's driver container (the driver under
    /run/nvidia/driver, its device nodes in the host's /dev)."""
    return {
        "PASS_DEVICE_SPECS": "true",
        "FAIL_ON_INIT_ERROR": "true",
        "DEVICE_LIST_STRATEGY": "envvar",
        "DEVICE_ID_STRATEGY": "uuid",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "all",
        "MPS_ROOT": str(tmp_path / "mps"),
        "MIG_STRATEGY": "single",
        "GDS_ENABLED": "true",  # ClusterPolicy gds.enabled (its entrypoint also sets it)
        "NVIDIA_MIG_MONITOR_DEVICES": "all",
        "IS_HOST_DRIVER": "false",
        "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver",
        "DRIVER_ROOT_CTR_PATH": str(sim.driver_root),
        "NVIDIA_DEV_ROOT": "/",
        "DEV_ROOT_CTR_PATH": str(plugin.dev_root),
    }


def operator_plugin(tmp_path: Path, sim: Any, kubelet: Kubelet) -> PluginProcess:
    """The plugin with nvct's config naming no driver (the operator's environment does), on a
    node whose nvct-runtime guards (only-allocated-gpus)."""
    numa_sysfs(tmp_path, sim)
    node = tmp_path / "node.toml"
    node.write_text("[request]\nonly-allocated-gpus = true\n")
    plugin = PluginProcess(
        tmp_path, sim, kubelet.plugin_dir, **{"device-plugin.runtime-config": f'"{node}"'}
    )
    text = plugin.config.read_text().replace(f'"{sim.driver_root}"', '"/nonexistent/driver"', 1)
    plugin.config.write_text(text)
    plugin.argv.remove("--dev-root")  # the operator's DEV_ROOT_CTR_PATH names it
    plugin.argv.remove(str(plugin.dev_root))
    plugin.extra_env = operator_env(sim, plugin, tmp_path)
    return plugin


def test_gpu_operator_environment(tmp_path, kubelet, sim_driver) -> None:
    plugin = operator_plugin(tmp_path, sim_driver, kubelet).start()
    try:
        ready = kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates, 20)
        assert ready, plugin.output()
        ids = uuids(sim_driver)
        assert kubelet.devices(GPU) == dict.fromkeys(ids, "Healthy")
        gpu = sim_driver.spec.gpus[1]
        answer = kubelet.allocate(GPU, [gpu.uuid])
        assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == gpu.uuid  # envvar, as asked
        # ... and cdi-annotations, which the node's guard lets through
        assert dict(answer.annotations) == {
            "cdi.k8s.io/nvct-device-plugin_gpu": f"{PLUGIN_KIND}={gpu.uuid}"
        }
        # PASS_DEVICE_SPECS: the nodes as the host names them (NVIDIA_DEV_ROOT=/)
        specs = {(d.host_path, d.container_path, d.permissions) for d in answer.devices}
        assert (f"/dev/nvidia{gpu.minor}", f"/dev/nvidia{gpu.minor}", "rw") in specs
        assert ("/dev/nvidiactl", "/dev/nvidiactl", "rw") in specs
        assert not any(f"/dev/nvidia{g.minor}" == p for _, p, _ in specs for g in
                       sim_driver.spec.gpus if g is not gpu)  # fmt: skip
        # the CDI spec the annotations name: the device nodes as the host names them
        # (NVIDIA_DEV_ROOT=/), the driver's files under NVIDIA_DRIVER_ROOT
        spec = json.loads((tmp_path / "cdi" / PLUGIN_SPEC_NAME).read_text())
        (device,) = [d for d in spec["devices"] if d["name"] == gpu.uuid]
        nodes = device["containerEdits"]["deviceNodes"] + spec["containerEdits"]["deviceNodes"]
        assert {n["hostPath"] for n in nodes} >= {f"/dev/nvidia{gpu.minor}", "/dev/nvidiactl"}
        assert all(n["hostPath"] == n["path"] for n in nodes), nodes
        mounts = spec["containerEdits"]["mounts"]
        assert mounts and all(m["hostPath"].startswith("/run/nvidia/driver/") for m in mounts)
        (guarded,) = events(plugin, "envvar_guarded_node")
        assert "only-allocated-gpus" in guarded["problem"]
        said = {e["key"] for e in events(plugin, "nvidia_setting_ignored")}
        assert said == {"NVIDIA_MIG_MONITOR_DEVICES", "IS_HOST_DRIVER", "GDS_ENABLED"}
        taken = {e["key"]: e["nvct"] for e in events(plugin, "nvidia_setting")}
        assert taken["DRIVER_ROOT_CTR_PATH"] == "driver-root"
        assert taken["NVIDIA_DRIVER_ROOT"] == "device-plugin.host-driver-root"
        assert taken["NVIDIA_DEV_ROOT"] == "device-plugin.host-dev-root"
        assert "nvct-device-plugin: error" not in plugin.output()
    finally:
        assert plugin.stop() == 0


def test_fail_on_init_error_false_as_nvidia_spells_it(tmp_path, kubelet, sim_driver) -> None:
    """``--fail-on-init-error=false`` waits for the driver; the flag beats FAIL_ON_INIT_ERROR."""
    waiting = PluginProcess(
        tmp_path, sim_driver, kubelet.plugin_dir, "--driver-root-ctr-path", "/nonexistent",
        "--fail-on-init-error=false",
    )  # fmt: skip
    waiting.extra_env = {"FAIL_ON_INIT_ERROR": "true"}
    waiting.start()
    try:
        assert until(lambda: len(events(waiting, "init_retry")) >= 2, timeout=30), waiting.output()
        assert waiting.proc is not None and waiting.proc.poll() is None
        assert GPU not in kubelet.plugins
    finally:
        assert waiting.stop() == 0
    failing = PluginProcess(
        tmp_path / "b", sim_driver, kubelet.plugin_dir, "--fail-on-init-error=true"
    )
    failing.extra_env = {"FAIL_ON_INIT_ERROR": "false", "DRIVER_ROOT_CTR_PATH": "/nonexistent"}
    failing.start()
    assert failing.proc is not None and failing.proc.wait(timeout=30) == 1
    assert "/nonexistent" in failing.output()
