"""The real nvct-device-plugin process against the kubelet stand-in (integration/kubelet), over
gRPC on Unix sockets, on the simulated driver; its answers applied to real containers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from integration.harness.bundles import BundleFactory, run_runc
from integration.harness.deviceplugin import PluginProcess, apply, uuids
from integration.harness.nvct_config import NVCT_BIN, write_nvct_config
from integration.harness.podman import podman_run, spec_in_cdi_dir
from integration.harness.processes import until
from integration.kubelet.standin import Kubelet, sockets
from integration.simdriver import inject
from nvct.cdi.names import PLUGIN_KIND, PLUGIN_SPEC_NAME
from nvct.node.files import STATUS_FILE

pytestmark = [pytest.mark.root]
GPU = "nvidia.com/gpu"


def test_registers_and_advertises_what_nvml_sees(kubelet, plugin_factory, sim_driver) -> None:
    plugin = plugin_factory()
    assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates), (
        plugin.output()
    )
    assert kubelet.devices(GPU) == dict.fromkeys(uuids(sim_driver), "Healthy")
    numa = kubelet.numa(GPU)
    assert [numa[u] for u in uuids(sim_driver)] == [[0], [0], [1], [1]]
    registered = kubelet.plugins[GPU]
    assert registered.endpoint == "nvidia-gpu.sock"
    assert registered.options.get_preferred_allocation_available
    assert not kubelet.refused
    assert plugin.stop() == 0
    assert "nvidia-gpu.sock" not in sockets(kubelet.plugin_dir)  # SIGTERM removed it


def test_twenty_kubelet_restarts_each_re_registered_within_a_second(
    kubelet, plugin_factory
) -> None:
    plugin_factory()
    assert kubelet.wait(lambda: GPU in kubelet.plugins)
    took = []
    for _ in range(20):
        restarted = kubelet.restart()
        ok = kubelet.wait(lambda: GPU in kubelet.plugins, timeout=5)
        assert ok, "not registered again within 5 s"
        took.append(kubelet.plugins[GPU].at - restarted)
    assert max(took) < 1.0, took


def test_a_plugin_started_before_the_kubelet_registers_when_it_appears(
    tmp_path, sim_driver
) -> None:
    standin = Kubelet(tmp_path / "device-plugins")
    (tmp_path / "device-plugins").mkdir()
    plugin = PluginProcess(tmp_path, sim_driver, standin.plugin_dir).start()
    try:
        time.sleep(1.5)
        assert plugin.proc is not None and plugin.proc.poll() is None  # waiting, not crashing
        standin.start()
        appeared = time.monotonic()
        assert standin.wait(lambda: GPU in standin.plugins, timeout=5), plugin.output()
        assert standin.plugins[GPU].at - appeared < 1.0
    finally:
        plugin.stop()
        standin.stop()


@pytest.mark.parametrize(
    ("strategy", "check"),
    [
        ("envvar", lambda r, u: dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": u}),
        (
            "volume-mounts",
            lambda r, u: (
                dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
                and [(m.host_path, m.container_path, m.read_only) for m in r.mounts]
                == [("/dev/null", f"/var/run/nvidia-container-devices/{u}", True)]
            ),
        ),
        (
            "cdi-annotations",
            lambda r, u: (
                dict(r.annotations) == {"cdi.k8s.io/nvct-device-plugin_gpu": f"{PLUGIN_KIND}={u}"}
                and not r.envs
            ),
        ),
        ("cdi-cri", lambda r, u: [d.name for d in r.cdi_devices] == [f"{PLUGIN_KIND}={u}"]),
    ],
)
def test_allocate_answers_per_strategy(
    kubelet, plugin_factory, sim_driver, strategy, check
) -> None:
    plugin_factory("--device-list-strategy", strategy)
    assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates)
    uuid = uuids(sim_driver)[1]
    response = kubelet.allocate(GPU, [uuid])
    assert check(response, uuid), response


def test_the_plugins_socket_and_status_are_roots_alone_its_cdi_spec_read_only_to_others(
    kubelet, plugin_factory
) -> None:
    """Whatever the umask (000 here): the socket that answers Allocate and the status file are
    root's (the kubelet's, the exporter's) alone; the CDI spec the engine reads is 0644."""
    old = os.umask(0)
    try:
        plugin = plugin_factory("--device-list-strategy", "cdi-annotations")
        assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates), (
            plugin.output()
        )
    finally:
        os.umask(old)
    files = {
        "socket": kubelet.plugin_dir / "nvidia-gpu.sock",
        "status": kubelet.plugin_dir / STATUS_FILE,
        "cdi": plugin.work / "cdi" / PLUGIN_SPEC_NAME,
    }
    modes = {name: path.stat().st_mode & 0o7777 for name, path in files.items()}
    assert modes == {"socket": 0o600, "status": 0o600, "cdi": 0o644}
    assert {path.stat().st_uid for path in files.values()} == {os.getuid()}


def test_index_ids_reach_only_the_container_the_kubelet_keeps_uuids(
    kubelet, plugin_factory, sim_driver
) -> None:
    """``device-id-strategy = index``: ListAndWatch and Allocate's device IDs stay UUIDs (the
    kubelet's checkpoint must survive a GPU falling off the bus); every answer form tells the
    container the index, and the CDI name it gives is one the plugin's spec defines."""
    strategies = "volume-mounts,cdi-annotations,cdi-cri"
    plugin = plugin_factory("--device-id-strategy", "index", "--device-list-strategy", strategies)
    assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates)
    assert sorted(kubelet.devices(GPU)) == sorted(uuids(sim_driver))
    response = kubelet.allocate(GPU, [uuids(sim_driver)[1]])
    assert [(m.host_path, m.container_path) for m in response.mounts] == [
        ("/dev/null", "/var/run/nvidia-container-devices/1")
    ]
    assert dict(response.annotations) == {"cdi.k8s.io/nvct-device-plugin_gpu": f"{PLUGIN_KIND}=1"}
    assert [d.name for d in response.cdi_devices] == [f"{PLUGIN_KIND}=1"]
    spec = json.loads((plugin.work / "cdi" / PLUGIN_SPEC_NAME).read_text())
    assert spec["kind"] == PLUGIN_KIND and "1" in {d["name"] for d in spec["devices"]}


def test_an_envvar_plugin_on_a_guarded_node_says_so_at_start(
    kubelet, plugin_factory, sim_driver, tmp_path
) -> None:
    """The node's nvct-runtime (its config.toml, as the plugin's pod sees it) has
    only-allocated-gpus on: every envvar answer is dropped there, and the plugin says so once,
    as a JSON log line and on stderr; it still serves (the operator decides)."""
    node = write_nvct_config(
        tmp_path / "node" / "config.toml", sim_driver, **{"request.only-allocated-gpus": "true"}
    )
    plugin = plugin_factory(
        "--device-list-strategy", "envvar", **{"device-plugin.runtime-config": f'"{node}"'}
    )
    assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates)
    out = plugin.output()
    problem = (
        "device-list-strategy envvar answers only NVIDIA_VISIBLE_DEVICES, which this node's "
        f"nvct-runtime ignores (request.only-allocated-gpus is on in {node}): pods get no GPU"
    )
    assert f"nvct-device-plugin: error: {problem} (fix: set [device-plugin]" in out
    events = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    (said,) = [e for e in events if e.get("event") == "envvar_ignored_by_guard"]
    assert said["problem"] == problem and said["level"] == "error"


@pytest.mark.parametrize(
    ("strategies", "said"), [("cdi-cri", True), ("cdi-cri,cdi-annotations", False)]
)
def test_a_cdi_cri_only_plugin_says_it_needs_the_engines_cdi(
    kubelet, plugin_factory, strategies: str, said: bool
) -> None:
    """containerd 1.6 drops the kubelet's CDI devices: a plugin answering only cdi-cri says, at
    start, what that answer needs of the engine, as a warning in its log (doctor checks the
    engine itself and fails one that drops them)."""
    plugin = plugin_factory("--device-list-strategy", strategies)
    assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates)
    events = [json.loads(ln) for ln in plugin.output().splitlines() if ln.startswith("{")]
    warned = [e for e in events if e.get("event") == "cdi_cri_only"]
    assert bool(warned) is said
    assert "nvct-device-plugin: " not in plugin.output()  # a warning, not an error on stderr
    if said:
        assert "containerd 1.6 drops them" in warned[0]["problem"]


def test_unknown_and_unhealthy_devices_are_refused_and_a_lost_gpu_stays_latched(
    kubelet, plugin_factory, sim_driver
) -> None:
    """A GPU that fell off the bus (XID 79: NVIDIA says reboot the node) stays Unhealthy when
    it answers again, until the node reboots or an operator clears it; NVML is initialised
    again meanwhile."""
    plugin = plugin_factory()
    assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates)
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(GPU, ["GPU-00000000-0000-0000-0000-000000000000"])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown nvidia.com/gpu device" in refused.value.details()
    lost = uuids(sim_driver)[2]
    inject.lose(plugin.control, sim_driver.spec.gpus[2].minor)  # fell off the bus
    began = time.monotonic()
    assert kubelet.wait(lambda: kubelet.devices(GPU).get(lost) == "Unhealthy", timeout=5)
    assert time.monotonic() - began < 1.0
    assert sum(h == "Healthy" for h in kubelet.devices(GPU).values()) == 3
    with pytest.raises(grpc.RpcError) as sick:
        kubelet.allocate(GPU, [lost])
    assert sick.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    (line,) = [ln for ln in cli("device-plugin-status", kubelet).splitlines() if lost in ln]
    assert "Unhealthy" in line and "GPU is lost" in line, line
    inject.recover(plugin.control, sim_driver.spec.gpus[2].minor)
    reboot = "XID 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS): reboot the node"
    assert wait_for(lambda: reboot in cli("device-plugin-status", kubelet), 5)
    time.sleep(1.5)  # past the quiet period (1 s): the driver cannot say it was reset
    assert kubelet.devices(GPU)[lost] == "Unhealthy"
    assert '"event": "nvml_reinitialised"' in plugin.output()
    listed = cli("device-plugin-health", kubelet, proc_root=sim_driver.proc_root)
    assert lost in listed and reboot in listed, listed
    cleared = cli("device-plugin-health", kubelet, "clear", lost)
    assert cleared.startswith(f"cleared {lost}"), cleared
    began = time.monotonic()
    assert kubelet.wait(lambda: kubelet.devices(GPU).get(lost) == "Healthy", timeout=5)
    assert time.monotonic() - began < 1.0
    assert "recovered: cleared by an operator" in plugin.output()
    assert "no GPU is latched" in cli("device-plugin-health", kubelet)
    inject.xid(plugin.control, sim_driver.spec.gpus[2].minor, 94)  # the new event set has it
    assert kubelet.wait(lambda: kubelet.devices(GPU).get(lost) == "Unhealthy", timeout=5)


def cli(command: str, kubelet: Kubelet, *args: str, proc_root: Path | None = None) -> str:
    """``nvct-cli [--proc-root] <command> --plugin-dir <kubelet's> [args]``: its stdout."""
    root = ["--proc-root", str(proc_root)] if proc_root is not None else []
    done = subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", *root, command, "--plugin-dir",
         str(kubelet.plugin_dir), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def wait_for(check: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


def test_xid_errors_make_a_gpu_unhealthy_unless_ignored(kubelet, plugin_factory, sim_driver):
    """Application XIDs recover after the quiet period; a double-bit ECC error (event or XID
    48: NVIDIA says reset the GPU) holds the GPU on a driver that cannot say it was reset."""
    plugin = plugin_factory()
    assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates)
    gpus = sim_driver.spec.gpus
    inject.xid(plugin.control, gpus[0].minor, 13)  # a graphics engine exception: ignored
    inject.xid(plugin.control, gpus[1].minor, 48)  # double-bit ECC as an XID
    inject.xid(plugin.control, gpus[2].minor, 94)  # contained: restart the application
    began = time.monotonic()
    assert kubelet.wait(lambda: kubelet.devices(GPU).get(gpus[1].uuid) == "Unhealthy", timeout=5)
    assert time.monotonic() - began < 1.0
    assert kubelet.wait(lambda: kubelet.devices(GPU).get(gpus[2].uuid) == "Unhealthy", timeout=5)
    assert kubelet.devices(GPU)[gpus[0].uuid] == "Healthy"
    assert "XID 48 (ROBUST_CHANNEL_GPU_ECC_DBE)" in plugin.output()
    assert "XID 13" not in plugin.output()
    inject.double_bit_ecc(plugin.control, gpus[3].minor)
    assert kubelet.wait(lambda: kubelet.devices(GPU).get(gpus[3].uuid) == "Unhealthy", timeout=5)
    # no further error for the quiet period (1 s here): the application's XID is over
    assert kubelet.wait(lambda: kubelet.devices(GPU)[gpus[2].uuid] == "Healthy", timeout=10)
    time.sleep(1.5)
    devices = kubelet.devices(GPU)
    assert [devices[g.uuid] for g in gpus] == ["Healthy", "Unhealthy", "Healthy", "Unhealthy"]
    status = cli("device-plugin-status", kubelet)
    assert "double-bit ECC error: reset the GPU" in status, status


def test_preferred_allocation_keeps_numa_neighbours_together(
    kubelet, plugin_factory, sim_driver
) -> None:
    plugin_factory()
    assert kubelet.wait(lambda: GPU in kubelet.plugins)
    ids = uuids(sim_driver)
    # GPUs 0,1 on NUMA node 0 and 2,3 on node 1: a pair stays on one node
    assert sorted(kubelet.preferred(GPU, ids, [], 2)) == sorted(ids[:2])
    assert sorted(kubelet.preferred(GPU, ids, [ids[3]], 2)) == sorted(ids[2:])
    assert kubelet.preferred(GPU, list(reversed(ids)), [], 2) == kubelet.preferred(GPU, ids, [], 2)


def test_a_malformed_config_is_one_line(tmp_path, sim_driver) -> None:
    config = write_nvct_config(
        tmp_path / "c" / "config.toml", sim_driver, **{"device-plugin.mig-strategy": '"weird"'}
    )
    done = subprocess.run(
        [sys.executable, "-m", "nvct.deviceplugin", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("nvct-device-plugin: error: ") and str(config) in line
    assert "mig-strategy" in line


def test_nvml_failing_at_start(tmp_path, sim_driver, kubelet) -> None:
    plugin = PluginProcess(tmp_path, sim_driver, kubelet.plugin_dir)
    (plugin.dev_root / "dev/nvidiactl").unlink()  # the driver looks unloaded
    plugin.start()
    assert plugin.proc is not None and plugin.proc.wait(timeout=30) == 1
    errors = [ln for ln in plugin.output().splitlines() if ln.startswith("nvct-device-plugin:")]
    assert len(errors) == 1 and "driver-root" in errors[0], plugin.output()
    waiting = PluginProcess(tmp_path, sim_driver, kubelet.plugin_dir, "--no-fail-on-init-error")
    waiting.start()
    time.sleep(2)
    assert waiting.proc is not None and waiting.proc.poll() is None
    assert GPU not in kubelet.plugins  # advertises nothing meanwhile
    assert waiting.stop() == 0


def test_a_node_without_a_gpu_idles_then_serves_the_gpu_that_appears(
    tmp_path, sim_driver, kubelet
) -> None:
    """nvct's DaemonSets run on every node without node-feature-discovery: on a node with no
    /dev/nvidia<N> the plugin (fail-on-init-error on, the default) neither exits nor says an
    error; it advertises nothing, and registers once a GPU appears (a driver loading late)."""
    plugin = PluginProcess(tmp_path, sim_driver, kubelet.plugin_dir)
    aside = tmp_path / "aside"
    aside.mkdir()
    gpus = sorted((plugin.dev_root / "dev").glob("nvidia[0-9]*"))
    assert gpus
    for node in gpus:
        node.rename(aside / node.name)
    plugin.start()
    try:
        assert until(lambda: "no_gpu" in plugin.output(), 30), plugin.output()
        time.sleep(1)
        assert plugin.proc is not None and plugin.proc.poll() is None
        assert GPU not in kubelet.plugins
        lines = plugin.output().splitlines()
        assert [ln for ln in lines if ln.startswith("nvct-device-plugin:")] == [], lines
        # the DaemonSet's probes pass: the pod is Ready with nothing to offer
        status = [str(NVCT_BIN / "nvct-cli"), "device-plugin-status"]
        probe = subprocess.run(
            [*status, "--plugin-dir", str(kubelet.plugin_dir)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert (probe.returncode, probe.stdout) == (0, ""), probe.stderr
        for node in gpus:
            (aside / node.name).rename(node)
        assert kubelet.wait(lambda: GPU in kubelet.plugins, timeout=30), plugin.output()
    finally:
        code = plugin.stop()
    assert code == 0


def test_a_node_without_a_gpu_stops_cleanly(tmp_path, sim_driver, kubelet) -> None:
    plugin = PluginProcess(tmp_path, sim_driver, kubelet.plugin_dir)
    for node in (plugin.dev_root / "dev").glob("nvidia[0-9]*"):
        node.unlink()
    plugin.start()
    try:
        assert until(lambda: "no_gpu" in plugin.output(), 30), plugin.output()
    finally:
        code = plugin.stop()
    assert code == 0


def test_no_cdi_hook_installed_is_one_line_not_a_traceback(
    tmp_path, sim_driver, kubelet, monkeypatch
) -> None:
    """Seen on a real GPU machine with nvct's modules but no console scripts: the CDI spec
    needs nvct-cdi-hook, and the plugin died with a traceback instead of saying so."""
    monkeypatch.setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    elsewhere = (
        "import sys; sys.executable = '/nonexistent/python'; "
        "sys.argv = ['/nonexistent/nvct-device-plugin', *sys.argv[1:]]; "
        "from nvct.deviceplugin.__main__ import main; sys.exit(main())"
    )
    plugin = PluginProcess(
        tmp_path, sim_driver, kubelet.plugin_dir, program=(sys.executable, "-c", elsewhere)
    )
    plugin.start()
    assert plugin.proc is not None and plugin.proc.wait(timeout=90) == 1  # a loaded CI machine
    assert "Traceback" not in plugin.output(), plugin.output()
    errors = [ln for ln in plugin.output().splitlines() if ln.startswith("nvct-device-plugin:")]
    assert len(errors) == 1 and "cannot find nvct-cdi-hook" in errors[0], plugin.output()


# --- the answers applied to real containers, as containerd's CRI plugin applies them ---------


@pytest.mark.runc
@pytest.mark.parametrize("strategy", ["envvar", "volume-mounts", "cdi-annotations"])
def test_a_container_gets_exactly_the_allocated_gpu(
    kubelet,
    plugin_factory,
    sim_driver,
    runc_bundle_factory: BundleFactory,
    container_id: str,
    tmp_path: Path,
    strategy: str,
) -> None:
    plugin = plugin_factory("--device-list-strategy", strategy)
    assert kubelet.wait(lambda: GPU in kubelet.plugins)
    uuid = uuids(sim_driver)[3]
    response = kubelet.allocate(GPU, [uuid])
    applied = apply(response, ["NVIDIA_VISIBLE_DEVICES=all"] if strategy != "envvar" else [])
    # the envvar strategy's variable is indistinguishable from an image's
    guarded = strategy != "envvar"
    smi, devs = run_allocated(
        runc_bundle_factory, container_id, applied, sim_driver, plugin.work / "cdi", guarded
    )
    assert uuids_listed(smi) == [uuid]
    assert gpu_nodes(devs) == ["nvidia3"]


def run_allocated(
    bundle_factory: BundleFactory,
    container_id: str,
    applied: dict[str, Any],
    sim: Any,
    cdi_dir: Path,
    only_allocated: bool,
) -> tuple[str, str]:
    """The applied answer in a real container through nvct-runtime and runc (CDI names
    resolved through the plugin's spec); what ``nvidia-smi -L`` and ``ls /dev ...`` print."""
    script = "nvidia-smi -L; echo ===; ls /dev; ls /dev/nvidia-caps 2>/dev/null; true"
    bundle = bundle_factory(["/bin/sh", "-c", script], applied["env"], extra=applied["extra"])
    runtime_config = write_nvct_config(
        cdi_dir.parent / "runtime" / "config.toml",
        sim,
        **{
            "request.only-allocated-gpus": str(only_allocated).lower(),
            "cdi.spec-dirs": f'["{cdi_dir}"]',
        },
    )
    result = run_runc(
        bundle,
        container_id,
        runtime=NVCT_BIN / "nvct-runtime",
        env={**os.environ, "NVCT_CONFIG": str(runtime_config)},
    )
    assert result.returncode == 0, result.stderr
    smi, devs = result.stdout.split("===")
    return smi, devs


def uuids_listed(smi: str) -> list[str]:
    """The UUIDs ``nvidia-smi -L`` prints, GPUs and MIG devices, in order."""
    return [ln.split("UUID: ")[1].rstrip(")") for ln in smi.splitlines() if "UUID:" in ln]


def gpu_nodes(ls: str) -> list[str]:
    """The ``nvidia<N>`` GPU nodes ``ls`` printed."""
    return sorted(d for d in ls.split() if d.startswith("nvidia") and d[6:].isdigit())


@pytest.mark.podman
def test_cdi_cri_names_resolved_by_a_cdi_engine_give_exactly_the_allocated_gpu(
    kubelet, plugin_factory, sim_driver, podman: list[str]
) -> None:
    """``cdi-cri``: the engine resolves the names itself (containerd >= 1.7 hands them to the
    CDI library, which reads the spec directories); podman's CDI support plays that part."""
    plugin = plugin_factory("--device-list-strategy", "cdi-cri")
    assert kubelet.wait(lambda: GPU in kubelet.plugins), plugin.output()
    uuid = uuids(sim_driver)[2]
    response = kubelet.allocate(GPU, [uuid])
    assert not response.envs and not response.mounts and not response.annotations
    names = [d.name for d in response.cdi_devices]
    assert names == [f"{PLUGIN_KIND}={uuid}"]
    with spec_in_cdi_dir() as path:
        shutil.copyfile(plugin.work / "cdi" / PLUGIN_SPEC_NAME, path)
        result = podman_run(podman, names, "nvidia-smi -L; echo ===; ls /dev")
    assert result.returncode == 0, result.stderr
    smi, devs = result.stdout.split("===")
    assert uuids_listed(smi) == [uuid]
    assert gpu_nodes(devs) == ["nvidia2"]


@pytest.mark.runc
def test_a_mig_device_allocation_gives_exactly_that_mig_device(
    tmp_path, kubelet, runc_bundle_factory: BundleFactory, container_id: str
) -> None:
    """MIG ``mixed`` through a real container: the allocated MIG device's GPU node and its two
    caps, so ``nvidia-smi -L`` lists its GPU and that one MIG device only."""
    from integration.simdriver import cached_driver, preset

    sim = cached_driver(preset("a100x8-570-mig"), Path("/tmp/nvct-test-simdrivers"))
    plugin = PluginProcess(
        tmp_path, sim, kubelet.plugin_dir,
        "--mig-strategy", "mixed", "--device-list-strategy", "cdi-annotations",
    )  # fmt: skip
    plugin.start()
    try:
        resource = "nvidia.com/mig-2g.20gb"
        assert kubelet.wait(lambda: resource in kubelet.plugins, timeout=15), plugin.output()
        gpu = next(g for g in sim.spec.gpus if any(m.profile == "2g.20gb" for m in g.migs))
        mig = next(m.uuid for m in gpu.migs if m.profile == "2g.20gb")
        applied = apply(kubelet.allocate(resource, [mig]), ["NVIDIA_VISIBLE_DEVICES=all"])
    finally:
        plugin.stop()
    smi, devs = run_allocated(
        runc_bundle_factory, container_id, applied, sim, plugin.work / "cdi", True
    )
    assert uuids_listed(smi) == [gpu.uuid, mig]
    assert gpu_nodes(devs) == [f"nvidia{gpu.minor}"]
    assert len([d for d in devs.split() if d.startswith("nvidia-cap") and d[10:].isdigit()]) == 2


def test_preferred_allocation_follows_nvlink_on_a_real_topology(tmp_path, kubelet) -> None:
    """The 8-GPU preset with NVLink pairs (0-1, 2-3, 4-5, 6-7) behind PCIe switches of their
    own: the plugin counts links through NVML and answers pairs."""
    from integration.simdriver import cached_driver, preset

    sim = cached_driver(preset("h100pcie-x8-nvlink-pairs"), Path("/tmp/nvct-test-simdrivers"))
    plugin = PluginProcess(tmp_path, sim, kubelet.plugin_dir, "--sysfs-root", str(sim.sys_root))
    plugin.start()
    try:
        assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates)
        ids = [g.uuid for g in sim.spec.gpus]
        assert sorted(kubelet.preferred(GPU, ids, [ids[5]], 2)) == sorted([ids[4], ids[5]])
        # odd: the GPU whose partner is taken already, so that pairs stay whole
        assert kubelet.preferred(GPU, [ids[i] for i in (0, 1, 2, 4, 5)], [], 1) == [ids[2]]
        four = set(kubelet.preferred(GPU, ids, [], 4))
        assert four in ({ids[0], ids[1], ids[2], ids[3]}, {ids[4], ids[5], ids[6], ids[7]}), four
    finally:
        plugin.stop()


# (preset, available GPU indices or None for all, must include, size, expected indices)
TOPOLOGY_CASES = [
    # 8 L40S, no NVLink: one PCIe switch per NUMA node (0-3, 4-7)
    ("l40sx8-pcie", None, [], 2, [0, 1]),
    ("l40sx8-pcie", None, [5], 2, [4, 5]),
    ("l40sx8-pcie", None, [], 4, [0, 1, 2, 3]),
    ("l40sx8-pcie", [0, 4, 5], [], 2, [4, 5]),  # one switch before across CPUs
    ("l40sx8-pcie", [3, 4, 5, 6], [3], 2, [3, 4]),  # all across: the lowest index
    # HGX H100: NVLink only to the NVSwitches (all GPUs alike), a PCIe switch per pair (0-1,
    # 2-3, ...) whose bus numbers do not show it: only NVML's common ancestor does
    ("h100x8-nvswitch", [1, 2, 3], [], 2, [2, 3]),
    ("h100x8-nvswitch", None, [6], 2, [6, 7]),
    # pairs' scores summed: three on one host bridge (40 + 40 + 50) beat two switch pairs
    ("h100x8-nvswitch", [0, 2, 3, 5, 6, 7], [], 4, [0, 2, 3, 5]),
]


@pytest.mark.parametrize(("preset_name", "available", "must", "size", "expected"), TOPOLOGY_CASES)
def test_preferred_allocation_follows_nvmls_pcie_topology(
    tmp_path, kubelet, preset_name, available, must, size, expected
) -> None:
    from integration.simdriver import cached_driver, preset

    sim = cached_driver(preset(preset_name), Path("/tmp/nvct-test-simdrivers"))
    plugin = PluginProcess(tmp_path, sim, kubelet.plugin_dir, "--sysfs-root", str(sim.sys_root))
    plugin.start()
    try:
        assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates)
        ids = [g.uuid for g in sim.spec.gpus]
        offered = [ids[i] for i in (available if available is not None else range(len(ids)))]
        answer = kubelet.preferred(GPU, offered, [ids[i] for i in must], size)
        assert sorted(ids.index(u) for u in answer) == expected
    finally:
        plugin.stop()


def test_mig_mixed_gives_one_resource_and_socket_per_profile(tmp_path, kubelet) -> None:
    """The 8 x A100 preset with two GPUs in MIG mode (3g+2g+1g and 4g+3g): full GPUs stay
    nvidia.com/gpu, each MIG profile is its own resource on its own socket, IDs are MIG UUIDs."""
    from integration.simdriver import cached_driver, preset

    sim = cached_driver(preset("a100x8-570-mig"), Path("/tmp/nvct-test-simdrivers"))
    plugin = PluginProcess(tmp_path, sim, kubelet.plugin_dir, "--mig-strategy", "mixed")
    plugin.start()
    expected = {
        GPU: {g.uuid for g in sim.spec.gpus if not g.migs},
        **{
            f"nvidia.com/mig-{p}": {m.uuid for g in sim.spec.gpus for m in g.migs if m.profile == p}
            for p in {m.profile for g in sim.spec.gpus for m in g.migs}
        },
    }
    try:
        done = kubelet.wait(
            lambda: all(r in kubelet.plugins and kubelet.plugins[r].updates for r in expected),
            timeout=15,
        )
        assert done, (sorted(kubelet.plugins), plugin.output())
        for resource, ids in expected.items():
            assert set(kubelet.devices(resource)) == ids, resource
        names = {p.endpoint for p in kubelet.plugins.values()}
        assert {"nvidia-gpu.sock", "nvidia-mig-3g.40gb.sock"} <= names
        mig = sorted(expected["nvidia.com/mig-3g.40gb"])[0]
        answer = kubelet.allocate("nvidia.com/mig-3g.40gb", [mig])
        assert [d.name for d in answer.cdi_devices] == [f"{PLUGIN_KIND}={mig}"]
    finally:
        plugin.stop()
