"""NVIDIA's device-plugin config as is (``--config-file`` / ``CONFIG_FILE``, YAML or JSON
``version: v1``, in the shapes NVIDIA documents): the real nvct-device-plugin process on the
simulated driver, against the kubelet stand-in: what it advertises, what it answers, what it
says about what it cannot honour, and that an invalid file stops it before anything starts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from integration.harness.deviceplugin import MpsControlProcess, PluginProcess, numa_sysfs, uuids
from integration.harness.processes import until
from integration.kubelet.standin import Kubelet, sockets
from nvct.cdi.names import PLUGIN_KIND
from nvct.deviceplugin.settings import Inputs, settle

pytestmark = [pytest.mark.root]
GPU = "nvidia.com/gpu"

# NVIDIA's documented time-slicing example (README "Shared Access to GPUs with CUDA
# Time-Slicing"), with a devices list NVIDIA ignores ("not yet supported").
TIME_SLICING = """\
version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
      devices: [0, 1]
"""


def logged(plugin: PluginProcess, event: str) -> list[dict[str, Any]]:
    """The plugin's JSON log lines of ``event``."""
    out = []
    for line in plugin.output().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("event") == event:
                out.append(entry)
    return out


def registered(kubelet: Kubelet, plugin: PluginProcess, *resources: str) -> None:
    ready = kubelet.wait(
        lambda: all(r in kubelet.plugins and kubelet.plugins[r].updates for r in resources),
        timeout=20,
    )
    assert ready, (sorted(kubelet.plugins), plugin.output())


def nvidia_plugin(
    tmp_path: Path, sim: Any, kubelet: Kubelet, config: str, name: str = "config.yaml"
) -> PluginProcess:
    numa_sysfs(tmp_path, sim)
    (tmp_path / name).write_text(config)
    return PluginProcess(tmp_path, sim, kubelet.plugin_dir, "--config-file", str(tmp_path / name))


def test_time_slicing_replicas_4(tmp_path, kubelet, sim_driver) -> None:
    plugin = nvidia_plugin(tmp_path, sim_driver, kubelet, TIME_SLICING).start()
    try:
        registered(kubelet, plugin, GPU)
        ids = uuids(sim_driver)
        expected = [f"{u}::{n}" for u in ids for n in range(4)]  # every GPU: devices ignored
        assert kubelet.devices(GPU) == dict.fromkeys(expected, "Healthy")
        assert sockets(kubelet.plugin_dir) == ["kubelet.sock", "nvidia-gpu.sock"]
        answer = kubelet.allocate(GPU, [f"{ids[2]}::3"])
        assert [d.name for d in answer.cdi_devices] == [f"{PLUGIN_KIND}={ids[2]}"]
        assert not answer.devices  # passDeviceSpecs false, NVIDIA's default
        # two replicas of two GPUs: failRequestsGreaterThanOne is false by default
        both = kubelet.allocate(GPU, [f"{ids[0]}::0", f"{ids[1]}::0"])
        assert len(both.cdi_devices) == 2
        ignored = logged(plugin, "nvidia_setting_ignored")
        assert [e["key"] for e in ignored] == ["sharing.timeSlicing.resources[0].devices"]
        assert "ignores it" in ignored[0]["why"]
        taken = {e["key"]: e["nvct"] for e in logged(plugin, "nvidia_setting")}
        assert taken["sharing.timeSlicing.resources"] == "device-plugin.sharing.gpus"
    finally:
        assert plugin.stop() == 0


def test_renamed_json_config_from_config_file_env(tmp_path, kubelet, sim_driver) -> None:
    """The JSON form, named by CONFIG_FILE, renameByDefault and failRequestsGreaterThanOne:
    nvidia.com/gpu.shared, one replica per container."""
    config = {
        "version": "v1",
        "sharing": {
            "timeSlicing": {
                "renameByDefault": True,
                "failRequestsGreaterThanOne": True,
                "resources": [{"name": "gpu", "replicas": 2}],
            }
        },
    }
    numa_sysfs(tmp_path, sim_driver)
    (tmp_path / "config.json").write_text(json.dumps(config))
    plugin = PluginProcess(tmp_path, sim_driver, kubelet.plugin_dir)
    plugin.extra_env = {"CONFIG_FILE": str(tmp_path / "config.json")}
    plugin.start()
    try:
        registered(kubelet, plugin, "nvidia.com/gpu.shared")
        ids = uuids(sim_driver)
        assert set(kubelet.devices("nvidia.com/gpu.shared")) == {
            f"{u}::{n}" for u in ids for n in range(2)
        }
        assert GPU not in kubelet.plugins
        with pytest.raises(grpc.RpcError) as refused:
            kubelet.allocate("nvidia.com/gpu.shared", [f"{ids[0]}::0", f"{ids[1]}::0"])
        assert "fail-requests-greater-than-one" in refused.value.details()
    finally:
        assert plugin.stop() == 0


def mps_config(mps_root: Path) -> str:
    """NVIDIA's MPS example (every GPU as 2 MPS replicas), its daemons under ``mps_root``."""
    return f"""\
version: v1
flags:
  mpsRoot: {mps_root}
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""


def test_mps_config_and_its_import(tmp_path, kubelet, sim_driver) -> None:
    """NVIDIA's MPS example: every GPU as 2 MPS replicas; the plugin and the daemons' side
    (nvct-cli mps-control --config-file) read NVIDIA's file, and the TOML that ``configure
    --import-nvidia-plugin-config`` writes from it gives the same config."""
    mps_root = tmp_path / "mps"
    config = mps_config(mps_root)
    plugin = nvidia_plugin(tmp_path, sim_driver, kubelet, config)
    imported = tmp_path / "imported.toml"
    imported.write_text(plugin.config.read_text())
    run = subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", "--config", str(imported), "configure",
         "--import-nvidia-plugin-config", str(tmp_path / "config.yaml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    # the import is what the plugin reads from NVIDIA's file
    env = {"CONFIG_FILE": str(tmp_path / "config.yaml")}
    assert settle(Inputs(str(imported))).config == settle(Inputs(str(plugin.config), env)).config
    control = MpsControlProcess(plugin, mps_root)  # NVIDIA's file, as the plugin reads it
    control.argv += ["--config-file", str(tmp_path / "config.yaml")]
    control.start()
    plugin.start()
    try:
        registered(kubelet, plugin, GPU)
        ids = uuids(sim_driver)
        expected = dict.fromkeys([f"{u}::{n}" for u in ids for n in range(2)], "Healthy")
        assert kubelet.wait(lambda: kubelet.devices(GPU) == expected, timeout=20), (
            plugin.output() + control.output()
        )
        answer = kubelet.allocate(GPU, [f"{ids[1]}::1"])
        assert answer.envs["CUDA_MPS_PIPE_DIRECTORY"] == f"/mps/{ids[1]}/pipe"
        assert (str(mps_root / ids[1] / "pipe"), f"/mps/{ids[1]}/pipe") in [
            (m.host_path, m.container_path) for m in answer.mounts
        ]
        with pytest.raises(grpc.RpcError):  # NVIDIA's MPS default: one replica per container
            kubelet.allocate(GPU, [f"{ids[0]}::0", f"{ids[1]}::0"])
    finally:
        assert plugin.stop() == 0
        control.stop()


def test_mig_mixed_with_a_shared_profile_and_device_specs(tmp_path, kubelet) -> None:
    """MIG mixed from the file, one profile time-sliced by its resource name, the
    cdi-annotations answer under NVIDIA's prefix, and passDeviceSpecs' device nodes."""
    from integration.simdriver import cached_driver, preset

    sim = cached_driver(preset("a100x8-570-mig"), Path("/tmp/nvct-test-simdrivers"))
    config = """\
version: v1
flags:
  migStrategy: mixed
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: cdi-annotations
    cdiAnnotationPrefix: nvidia.cdi.k8s.io/
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/mig-1g.10gb
      replicas: 2
"""
    plugin = nvidia_plugin(tmp_path, sim, kubelet, config).start()
    migs = {m.profile: [] for g in sim.spec.gpus for m in g.migs}  # type: dict[str, list[Any]]
    for gpu in sim.spec.gpus:
        for mig in gpu.migs:
            migs[mig.profile].append((gpu, mig))
    try:
        resources = [GPU, *(f"nvidia.com/mig-{p}" for p in migs)]
        registered(kubelet, plugin, *resources)
        assert set(kubelet.devices("nvidia.com/mig-1g.10gb")) == {
            f"{m.uuid}::{n}" for _, m in migs["1g.10gb"] for n in range(2)
        }
        gpu, mig = migs["3g.40gb"][0]
        assert set(kubelet.devices("nvidia.com/mig-3g.40gb")) == {
            m.uuid for _, m in migs["3g.40gb"]
        }
        assert set(kubelet.devices(GPU)) == {g.uuid for g in sim.spec.gpus if not g.migs}
        answer = kubelet.allocate("nvidia.com/mig-3g.40gb", [mig.uuid])
        key = "nvidia.cdi.k8s.io/nvct-device-plugin_mig-3g.40gb"
        assert dict(answer.annotations) == {key: f"{PLUGIN_KIND}={mig.uuid}"}
        specs = [(d.container_path, d.permissions) for d in answer.devices]
        assert (f"/dev/nvidia{gpu.minor}", "rw") in specs and ("/dev/nvidiactl", "rw") in specs
        assert any(p.startswith("/dev/nvidia-caps/nvidia-cap") for p, _ in specs), specs
        assert all(d.host_path.endswith(d.container_path) for d in answer.devices)
    finally:
        assert plugin.stop() == 0


@pytest.mark.parametrize(
    ("config", "line"),
    [
        (
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
            "    - name: nvidia.com/gpu\n      replicas: 1\n",
            "sharing.timeSlicing.resources[0].replicas = 1 is invalid (fix: use an integer >= 2)",
        ),
        ("version: v2\n", 'version = "v2" is invalid (fix: use version: v1)'),
        (
            "version: v1\nflags:\n  plugin:\n    deviceListStrategy: [envvar, cdi]\n",
            'flags.plugin.deviceListStrategy = "cdi" is invalid (fix: use one of envvar,',
        ),
    ],
)
def test_an_invalid_file_stops_the_plugin_with_one_line(
    tmp_path, kubelet, sim_driver, config, line
) -> None:
    plugin = nvidia_plugin(tmp_path, sim_driver, kubelet, config).start()
    assert plugin.proc is not None
    assert plugin.proc.wait(timeout=30) == 2
    errors = [x for x in plugin.output().splitlines() if x.startswith("nvct-device-plugin: error")]
    assert len(errors) == 1 and line in errors[0], plugin.output()
    assert sockets(kubelet.plugin_dir) == ["kubelet.sock"]  # nothing served, nothing written
    assert not (tmp_path / "cdi").exists()


def test_mps_control_follows_a_changed_config_without_a_restart(
    tmp_path, kubelet, sim_driver
) -> None:
    """A node's config-manager writes its newly chosen entry (atomic rename) and sends SIGHUP:
    ``nvct-cli mps-control`` starts the daemons MPS now asks for, keeps them through an
    unchanged reload, quits them when MPS goes, and lives on throughout (SIGHUP's default
    would have ended it, and its daemons with its pod)."""
    mps_root = tmp_path / "mps"
    mps = mps_config(mps_root)
    plugin = nvidia_plugin(tmp_path, sim_driver, kubelet, TIME_SLICING)  # its roots only
    chosen = tmp_path / "chosen.yaml"
    chosen.write_text(TIME_SLICING)
    control = MpsControlProcess(plugin, mps_root)
    control.argv += ["--config-file", str(chosen)]
    control.start()
    gpus = len(uuids(sim_driver))

    def choose(text: str) -> None:
        (tmp_path / "next.yaml").write_text(text)
        (tmp_path / "next.yaml").replace(chosen)

    try:
        assert until(lambda: logged(control, "no_mps_gpus"), 30), control.output()
        choose(mps)  # seen by the file's change alone
        ready = lambda: len(logged(control, "mps_daemon_ready")) == gpus  # noqa: E731
        assert until(ready, 30), control.output()
        assert all((mps_root / u / "pipe" / "control").exists() for u in uuids(sim_driver))
        assert control.proc is not None
        control.proc.send_signal(signal.SIGHUP)
        assert until(lambda: logged(control, "reload_unchanged"), 10), control.output()
        assert len(logged(control, "mps_daemon_ready")) == gpus  # none restarted
        choose(TIME_SLICING)
        control.proc.send_signal(signal.SIGHUP)
        stopped = lambda: len(logged(control, "mps_daemon_stopped")) == gpus  # noqa: E731
        assert until(stopped, 20), control.output()
        assert control.proc.poll() is None
    finally:
        assert control.stop() == 0
