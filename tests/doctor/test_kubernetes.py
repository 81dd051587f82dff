"""doctor's Kubernetes node checks: kubelet.sock, the device plugin's sockets answering over real
gRPC (or not), its status file, the RuntimeClass handler in containerd / CRI-O, the plugin's CDI
spec and the MIG strategy against recorded inventories. Unprivileged: temporary trees only."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from nvct.cdi.names import PLUGIN_CLASS, PLUGIN_KIND, PLUGIN_VENDOR
from nvct.config.container import RequestRules
from nvct.config.kubernetes import DevicePlugin
from nvct.doctor import FAIL, PASS, SKIP, WARN, CheckResult, k8s_plugin, k8s_runtime, kubernetes
from nvct.doctor.report import DoctorReport
from nvct.host.arch import host_arch
from nvct.kubeapi.deviceplugin import v1beta1_pb2 as api
from nvct.kubeapi.deviceplugin import v1beta1_pb2_grpc as rpc
from nvct.node.files import STATUS_FILE
from nvct.node.status import status_bytes
from nvct.plan.cdi_spec import SpecOptions, build_spec
from tests.conftest import sim_config
from tests.doctor.conftest import by_name, cdi_generator, context, executable

HOOK = "/usr/bin/nvct-cdi-hook"
H100_UUIDS = [f"GPU-{i}" for i in range(4)]


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    """A short directory: a Unix socket's path must fit in 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="k8sd-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Options(rpc.DevicePluginServicer):  # type: ignore[misc]
    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return api.DevicePluginOptions(get_preferred_allocation_available=True)


@pytest.fixture
def serve() -> Iterator[Any]:
    """Serve the v1beta1 DevicePlugin service on a Unix socket path (stopped after the test)."""
    servers: list[Any] = []

    def start(path: Path) -> Path:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        rpc.add_DevicePluginServicer_to_server(Options(), server)
        server.add_insecure_port(f"unix://{path}")
        server.start()
        servers.append(server)
        return path

    yield start
    for server in servers:
        server.stop(grace=None).wait()


@pytest.fixture
def listening() -> Iterator[Any]:
    """A plain socket that listens (and never answers), as a live kubelet.sock or a hung
    plugin looks from outside."""
    socks: list[socket.socket] = []

    def make(path: Path) -> Path:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        sock.listen(8)
        socks.append(sock)
        return path

    yield make
    for sock in socks:
        sock.close()


def dead_socket(path: Path) -> Path:
    """A socket file nobody listens on (what a killed process leaves)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
    return path


def write_status(directory: Path, status: dict[str, list[dict[str, str]]]) -> None:
    (directory / STATUS_FILE).write_text(json.dumps(status))


def healthy(uuids: list[str]) -> list[dict[str, str]]:
    return [{"id": u, "uuid": u, "health": "Healthy", "reason": ""} for u in uuids]


def k8s_ctx(tmp: Path, plugin_dir: Path, **kw: Any) -> Any:
    return context(tmp, plugin_dir=plugin_dir, plugin_timeout=1.0, **kw)


# --- the gate ------------------------------------------------------------------------------


def test_not_a_kubernetes_node_is_one_skip(tmp_path) -> None:
    ctx = k8s_ctx(tmp_path, tmp_path / "nowhere")
    [result] = kubernetes.check_kubernetes(ctx)
    assert result.status == SKIP and result.name == "kubernetes"
    assert f"not a Kubernetes node: no {tmp_path / 'nowhere'}" in result.message
    off = k8s_ctx(tmp_path, tmp_path, kubernetes=False)
    assert [r.status for r in kubernetes.check_kubernetes(off)] == [SKIP]
    forced = kubernetes.check_kubernetes(k8s_ctx(tmp_path, tmp_path / "nowhere", kubernetes=True))
    assert by_name(forced, kubernetes.KUBELET).status == FAIL


def test_the_plugin_dir_comes_from_the_config_unless_overridden(tmp_path) -> None:
    from nvct.config import Config

    ctx = context(tmp_path, Config(device_plugin=DevicePlugin(plugin_dir=str(tmp_path / "dp"))))
    assert ctx.device_plugin_dir() == tmp_path / "dp"
    assert dataclasses.replace(ctx, plugin_dir=tmp_path / "x").device_plugin_dir() == tmp_path / "x"


# --- kubelet.sock ----------------------------------------------------------------------------


def test_kubelet_socket(plugin_dir, listening) -> None:
    path = plugin_dir / "kubelet.sock"
    missing = kubernetes.check_kubelet_socket(plugin_dir)
    assert missing.status == FAIL and f"no {path}: the kubelet is not running" in missing.message
    assert "[device-plugin] plugin-dir" in missing.fix
    path.write_text("")
    assert "is not a socket" in kubernetes.check_kubelet_socket(plugin_dir).message
    path.unlink()
    dead_socket(path)
    dead = kubernetes.check_kubelet_socket(plugin_dir)
    assert dead.status == FAIL and "nobody listens" in dead.message
    path.unlink()
    listening(path)
    live = kubernetes.check_kubelet_socket(plugin_dir)
    assert live.status == PASS and live.message.startswith(f"{path}: the kubelet listens")


# --- the device plugin -------------------------------------------------------------------------


def test_a_serving_plugin_passes(tmp_path, plugin_dir, serve, listening) -> None:
    listening(plugin_dir / "kubelet.sock")
    serve(plugin_dir / "nvidia-gpu.sock")
    serve(plugin_dir / "nvidia-mig-1g.10gb.sock")
    write_status(
        plugin_dir,
        {"nvidia.com/gpu": healthy(H100_UUIDS[:2]), "nvidia.com/mig-1g.10gb": healthy(["MIG-a"])},
    )
    results = kubernetes.check_kubernetes(k8s_ctx(tmp_path, plugin_dir))
    serving = [r for r in results if r.name == k8s_plugin.SERVING]
    assert [r.status for r in serving] == [PASS, PASS], serving
    assert serving[0].message == (
        "nvidia-gpu.sock (nvidia.com/gpu) answers GetDevicePluginOptions, newer than kubelet.sock"
    )
    assert "nvidia-mig-1g.10gb.sock (nvidia.com/mig-1g.10gb)" in serving[1].message
    devices = by_name(results, k8s_plugin.DEVICES)
    assert devices.status == PASS
    assert devices.message == (
        "nvct-device-plugin advertises nvidia.com/gpu: 2 Healthy, nvidia.com/mig-1g.10gb: 1 Healthy"
    )


def test_an_unhealthy_device_is_a_warning_with_its_reason(tmp_path, plugin_dir, serve) -> None:
    serve(plugin_dir / "nvidia-gpu.sock")
    devices = healthy(H100_UUIDS)
    devices[2] = {**devices[2], "health": "Unhealthy", "reason": "XID 79: GPU is lost"}
    write_status(plugin_dir, {"nvidia.com/gpu": devices})
    [warning] = k8s_plugin.check_plugin(k8s_ctx(tmp_path, plugin_dir), plugin_dir, None)[1:]
    assert warning.status == WARN and warning.name == k8s_plugin.DEVICES
    assert warning.message == "nvidia.com/gpu device GPU-2 is Unhealthy: XID 79: GPU is lost"
    assert "nvct-cli device-plugin-status" in warning.fix


def test_a_socket_nobody_listens_on_fails_fast_with_the_fix(tmp_path, plugin_dir) -> None:
    dead_socket(plugin_dir / "nvidia-gpu.sock")
    write_status(plugin_dir, {"nvidia.com/gpu": healthy(H100_UUIDS)})
    ctx = dataclasses.replace(k8s_ctx(tmp_path, plugin_dir), plugin_timeout=10.0)
    began = time.monotonic()
    results = k8s_plugin.check_plugin(ctx, plugin_dir, None)
    assert time.monotonic() - began < 5.0  # refused at once: the timeout is not waited out
    [dead] = [r for r in results if r.name == k8s_plugin.SERVING]
    assert dead.status == FAIL
    assert dead.message.startswith(
        f"{plugin_dir}/nvidia-gpu.sock (nvidia.com/gpu) exists but does not answer "
        "GetDevicePluginOptions within 10 s (UNAVAILABLE: "
    )
    assert dead.fix.startswith("restart the plugin pod of this node")
    assert "kubectl logs" in dead.fix


def test_a_hung_plugin_fails_after_the_timeout(tmp_path, plugin_dir, listening) -> None:
    listening(plugin_dir / "nvidia-gpu.sock")  # accepts connections, never speaks HTTP/2
    ctx = dataclasses.replace(k8s_ctx(tmp_path, plugin_dir), plugin_timeout=0.5)
    began = time.monotonic()
    [hung, *_] = k8s_plugin.check_plugin(ctx, plugin_dir, None)
    assert 0.4 < time.monotonic() - began < 5.0
    assert hung.status == FAIL and "within 0.5 s (DEADLINE_EXCEEDED" in hung.message
    assert "(not in the status file)" in hung.message


def test_a_socket_older_than_kubelet_sock_has_not_re_registered(
    tmp_path, plugin_dir, serve, listening
) -> None:
    gpu = serve(plugin_dir / "nvidia-gpu.sock")
    kubelet = listening(plugin_dir / "kubelet.sock")
    now = time.time()
    os.utime(gpu, (now - 60, now - 60))  # the kubelet restarted after the plugin registered
    os.utime(kubelet, (now, now))
    write_status(plugin_dir, {"nvidia.com/gpu": healthy(H100_UUIDS)})
    results = kubernetes.check_kubernetes(k8s_ctx(tmp_path, plugin_dir))
    [stale] = [r for r in results if r.name == k8s_plugin.SERVING]
    assert stale.status == FAIL
    assert "answers, but is older than kubelet.sock" in stale.message
    assert "has not re-registered since the kubelet restarted" in stale.message
    assert stale.fix.startswith("restart the plugin pod")


def test_a_stopped_plugin_fails_and_its_status_is_stale(tmp_path, plugin_dir) -> None:
    write_status(plugin_dir, {"nvidia.com/gpu": healthy(H100_UUIDS)})
    results = k8s_plugin.check_plugin(k8s_ctx(tmp_path, plugin_dir), plugin_dir, None)
    assert [(r.name, r.status) for r in results] == [
        (k8s_plugin.SERVING, FAIL),
        (k8s_plugin.DEVICES, SKIP),
    ]
    assert results[0].message.startswith(
        f"no {plugin_dir}/nvidia-gpu.sock: nvct-device-plugin is not serving nvidia.com/gpu"
    )
    assert results[0].fix.startswith("restart the plugin pod")
    assert "is stale: no plugin serves" in results[1].message


def test_no_plugin_at_all_says_deploy_it(tmp_path, plugin_dir) -> None:
    [result] = k8s_plugin.check_plugin(k8s_ctx(tmp_path, plugin_dir), plugin_dir, None)
    assert result.status == FAIL and "nvct-device-plugin has not run on this node" in result.message
    assert result.fix.startswith("deploy it: kubectl apply -k deployments/")


def test_another_plugin_without_a_status_file_warns(tmp_path, plugin_dir, serve) -> None:
    serve(plugin_dir / "nvidia-gpu.sock")
    (plugin_dir / "nvidia-other.txt").write_text("")  # not a socket: ignored
    results = k8s_plugin.check_plugin(k8s_ctx(tmp_path, plugin_dir), plugin_dir, None)
    assert [r.status for r in results] == [PASS, WARN]
    assert "not nvct-device-plugin" in results[1].message


# --- the RuntimeClass handler ----------------------------------------------------------------


def containerd_config(tmp: Path, text: str) -> Path:
    path = tmp / "containerd/config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "plugin", ['"io.containerd.grpc.v1.cri"', '"io.containerd.cri.v1.runtime"', "cri"]
)
def test_containerd_handler_in_each_config_version(tmp_path, plugin) -> None:
    runtime = executable(tmp_path / "bin/nvct-runtime")
    path = containerd_config(
        tmp_path,
        f"version = 2\n[plugins.{plugin}.containerd.runtimes.nvidia]\n"
        f'runtime_type = "io.containerd.runc.v2"\n'
        f'[plugins.{plugin}.containerd.runtimes.nvidia.options]\nBinaryName = "{runtime}"\n',
    )
    result = k8s_runtime.check_runtime_class(context(tmp_path))
    assert result.status == PASS
    table = f"plugins.{plugin.strip(chr(34))}.containerd.runtimes.nvidia.options"
    assert result.message == (
        f"RuntimeClass nvidia's handler: {path}: [{table}] BinaryName = {runtime}"
    )


def test_containerd_handler_in_an_import_wins(tmp_path) -> None:
    cri = 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options'
    runtime = executable(tmp_path / "bin/nvct-runtime")
    containerd_config(
        tmp_path,
        f'version = 2\nimports = ["conf.d/*.toml"]\n[{cri}]\nBinaryName = "/gone/nvct-runtime"\n',
    )
    dropin = tmp_path / "containerd/conf.d/99-nvct.toml"
    dropin.parent.mkdir()
    dropin.write_text(f'version = 2\n[{cri}]\nBinaryName = "{runtime}"\n')
    result = k8s_runtime.check_runtime_class(context(tmp_path))
    assert result.status == PASS and str(dropin) in result.message


@pytest.mark.parametrize(
    ("binary", "said"),
    [
        ("/gone/nvct-runtime", "no executable /gone/nvct-runtime on this node"),
        ("/usr/bin/nvidia-container-runtime", "the handler runs /usr/bin/nvidia-container-runtime"),
        (None, "containerd's runtime nvidia names no program (BinaryName unset: it runs runc)"),
    ],
)
def test_a_handler_not_running_nvct_runtime_fails(tmp_path, binary, said) -> None:
    options = f'\n[plugins.cri.containerd.runtimes.nvidia.options]\nBinaryName = "{binary}"\n'
    containerd_config(
        tmp_path,
        '[plugins.cri.containerd.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n'
        + (options if binary else ""),
    )
    result = k8s_runtime.check_runtime_class(context(tmp_path))
    assert result.status == FAIL and said in result.message
    assert result.fix.startswith("install nvct on the node, or nvct-cli configure --runtime")


def test_crio_drop_in_handler(tmp_path) -> None:
    runtime = executable(tmp_path / "bin/nvct-runtime")
    dropins = tmp_path / "crio/crio.conf.d"
    dropins.mkdir(parents=True)
    (dropins / "10-base.conf").write_text('[crio.runtime]\nlog_level = "info"\n')
    ctx = context(tmp_path)
    none = k8s_runtime.check_runtime_class(ctx)
    assert none.status == FAIL
    assert "neither containerd nor CRI-O defines a runtime nvidia" in none.message
    assert none.fix.startswith("nvct-cli configure --runtime containerd (or --runtime crio)")
    (dropins / "99-nvct.conf").write_text(
        f'[crio.runtime.runtimes.nvidia]\nruntime_path = "{runtime}"\nruntime_type = "oci"\n'
    )
    result = k8s_runtime.check_runtime_class(ctx)
    assert result.status == PASS
    assert f"{dropins}/99-nvct.conf: [crio.runtime.runtimes.nvidia] runtime_path" in result.message


def test_the_handler_is_the_one_the_runtime_class_names() -> None:
    yaml = pytest.importorskip("yaml")
    root = Path(__file__).resolve().parents[2]
    runtime_class = yaml.safe_load((root / "deployments/runtimeclass.yaml").read_text())
    assert runtime_class["kind"] == "RuntimeClass"
    assert runtime_class["handler"] == k8s_runtime.HANDLER


def test_no_engine_config_at_all(tmp_path) -> None:
    result = k8s_runtime.check_runtime_class(context(tmp_path))
    assert result.status == FAIL and result.message.startswith("no containerd (")
    assert "--containerd-config" in result.fix


# --- the plugin's CDI spec ------------------------------------------------------------------


def plugin_spec(sim: Any, tmp: Path) -> dict[str, Any]:
    """The spec nvct-device-plugin writes (both name forms, the hook)."""
    options = SpecOptions(strategy="both", vendor=PLUGIN_VENDOR, cls=PLUGIN_CLASS)
    return build_spec(sim.inventory, sim_config(sim, tmp), host_arch(), options=options, hook=HOOK)


def cdi_ctx(sim: Any, tmp: Path, **device_plugin: Any) -> Any:
    settings = DevicePlugin(**{"cdi_spec_dir": str(tmp / "cdi"), **device_plugin})
    return context(
        tmp,
        sim_config(sim, tmp, device_plugin=settings),
        cdi_generate=cdi_generator(sim, tmp),
        inventory=lambda: sim.inventory,
    )


def write_spec(tmp: Path, spec: dict[str, Any]) -> Path:
    path = tmp / "cdi/nvct-device-plugin.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(spec))
    return path


def test_plugin_cdi_spec_current(recorded_h100x4, tmp_path) -> None:
    path = write_spec(tmp_path, plugin_spec(recorded_h100x4, tmp_path))
    ctx = cdi_ctx(recorded_h100x4, tmp_path)
    result = kubernetes.check_cdi_spec(ctx, recorded_h100x4.inventory)
    assert result.status == PASS
    assert result.message == f"{path} names all 4 advertised device(s), driver 550.54.15"


def test_plugin_cdi_spec_missing_broken_or_short_of_a_gpu(recorded_h100x4, tmp_path) -> None:
    sim = recorded_h100x4
    ctx = cdi_ctx(sim, tmp_path)
    path = tmp_path / "cdi/nvct-device-plugin.json"
    missing = kubernetes.check_cdi_spec(ctx, sim.inventory)
    assert missing.status == FAIL and missing.message.startswith(f"no {path}: ")
    assert missing.fix.startswith(f"restart the plugin pod (it writes {path} when it starts)")
    write_spec(tmp_path, plugin_spec(sim, tmp_path))
    path.write_text("{")
    broken = kubernetes.check_cdi_spec(ctx, sim.inventory)
    assert broken.status == FAIL and f"{path} is not valid JSON" in broken.message
    spec = plugin_spec(sim, tmp_path)
    uuid2 = sim.inventory.gpus[2].uuid
    spec["devices"] = [d for d in spec["devices"] if d["name"] not in ("2", uuid2)]
    write_spec(tmp_path, spec)
    short = kubernetes.check_cdi_spec(ctx, sim.inventory)
    assert short.status == FAIL and f"{path} names no device for GPU(s) 2:" in short.message


def test_a_plugin_spec_with_host_dev_root_paths_is_not_stale(recorded_h100x4, tmp_path) -> None:
    """NVIDIA_DEV_ROOT moves the device nodes' host paths only: not what `cdi generate` writes
    where the plugin sees them, and no drift."""
    from nvct.plan.cdi_spec import spec_on_host

    sim = recorded_h100x4
    ctx = cdi_ctx(sim, tmp_path, host_dev_root="/")
    path = write_spec(tmp_path, spec_on_host(plugin_spec(sim, tmp_path), ctx.config))
    result = kubernetes.check_cdi_spec(ctx, sim.inventory)
    assert result.status != FAIL, result.message
    assert result.message.startswith(f"{path} names all 4 advertised device(s)")


def test_plugin_cdi_spec_stale(recorded_h100x4, tmp_path) -> None:
    sim = recorded_h100x4
    ctx = cdi_ctx(sim, tmp_path)
    spec = plugin_spec(sim, tmp_path)
    spec["containerEdits"]["mounts"].pop()
    path = write_spec(tmp_path, spec)
    drifted = kubernetes.check_cdi_spec(ctx, sim.inventory)
    assert drifted.status == FAIL
    assert drifted.message == f"{path} is stale: the common mounts changed"
    # Written by a plugin from before its spec had a kind of its own.
    write_spec(tmp_path, {**plugin_spec(sim, tmp_path), "kind": "nvidia.com/gpu"})
    kind = kubernetes.check_cdi_spec(ctx, sim.inventory)
    assert kind.status == FAIL
    assert kind.message == (
        f"{path} is of kind nvidia.com/gpu, the plugin's answers name {PLUGIN_KIND}: an older "
        "nvct-device-plugin wrote it, and it collides with the node's nvidia.com/gpu spec"
    )
    older = dataclasses.replace(sim.inventory, driver_version="535.104.05")
    options = SpecOptions(vendor=PLUGIN_VENDOR, cls=PLUGIN_CLASS)
    write_spec(
        tmp_path,
        build_spec(older, sim_config(sim, tmp_path), host_arch(), options=options, hook=HOOK),
    )
    version = kubernetes.check_cdi_spec(ctx, sim.inventory)
    assert version.status == FAIL
    assert "was written for driver 535.104.05, the driver is 550.54.15" in version.message


def test_plugin_cdi_spec_not_asked_for_or_no_driver(recorded_h100x4, tmp_path) -> None:
    sim = recorded_h100x4
    envvar = cdi_ctx(sim, tmp_path, device_list_strategy=("envvar",))
    result = kubernetes.check_cdi_spec(envvar, sim.inventory)
    assert (
        result.status == SKIP and "device-list-strategy envvar hands out no CDI" in result.message
    )
    write_spec(tmp_path, plugin_spec(sim, tmp_path))
    unknown = kubernetes.check_cdi_spec(cdi_ctx(sim, tmp_path), None)
    assert unknown.status == WARN and "the driver's GPUs are unknown" in unknown.message


# --- the MIG strategy ---------------------------------------------------------------------------


def mig(sim: Any, tmp: Path, strategy: str, inventory: Any = None) -> CheckResult:
    ctx = context(tmp, sim_config(sim, tmp, device_plugin=DevicePlugin(mig_strategy=strategy)))
    return kubernetes.check_mig_strategy(ctx, inventory or sim.inventory)


def test_mig_strategies_on_gpus_without_mig(recorded_h100x4, tmp_path) -> None:
    for strategy in ("none", "single", "mixed"):
        result = mig(recorded_h100x4, tmp_path, strategy)
        assert result.status == PASS, result
        assert result.message == (
            f"mig-strategy {strategy}: no GPU is in MIG mode; advertises nvidia.com/gpu x4"
        )


def test_mig_strategies_on_two_mig_gpus(recorded_a100mig, tmp_path) -> None:
    sim = recorded_a100mig
    in_mig = [g.index for g in sim.inventory.gpus if g.mig_enabled]
    count = sum(len(g.migs) for g in sim.inventory.gpus)
    none = mig(sim, tmp_path, "none")
    assert none.status == WARN
    assert none.message.startswith(
        f"mig-strategy none: GPU(s) {', '.join(map(str, in_mig))} are in MIG mode; their "
        f"{count} MIG device(s) are not advertised (advertised: nvidia.com/gpu x6)"
    )
    assert none.fix.startswith('set [device-plugin] mig-strategy = "mixed"')
    mixed = mig(sim, tmp_path, "mixed")
    assert mixed.status == PASS and "nvidia.com/mig-3g.40gb x2" in mixed.message
    single = mig(sim, tmp_path, "single")
    assert single.status == FAIL
    assert "MIG strategy single needs every GPU in MIG mode with one profile" in single.message
    assert "refuses to start" in single.message
    assert single.fix == "use mig-strategy mixed, or repartition the GPUs alike"


def test_mig_single_on_alike_partitions_and_a_gpu_without_mig_devices(
    recorded_a100mig, tmp_path
) -> None:
    sim = recorded_a100mig
    parent = next(g for g in sim.inventory.gpus if g.mig_enabled)
    alike = tuple(dataclasses.replace(m, profile="1g.10gb") for m in parent.migs)
    only = dataclasses.replace(sim.inventory, gpus=(dataclasses.replace(parent, migs=alike),))
    single = mig(sim, tmp_path, "single", only)
    assert single.status == PASS
    assert single.message == (
        f"mig-strategy single fits the GPUs in MIG mode: advertises nvidia.com/gpu x{len(alike)}"
    )
    bare = dataclasses.replace(only, gpus=(dataclasses.replace(parent, migs=()),))
    empty = mig(sim, tmp_path, "mixed", bare)
    assert empty.status == WARN
    assert f"GPU(s) {parent.index} are in MIG mode with no MIG device" in empty.message


def test_the_plugins_recorded_settings_win_over_the_nodes_config(
    recorded_a100mig, tmp_path, plugin_dir
) -> None:
    """From a pod the plugin runs with its ConfigMap: doctor judges it by what it recorded."""
    sim = recorded_a100mig
    node = context(
        tmp_path, sim_config(sim, tmp_path, device_plugin=DevicePlugin(mig_strategy="none"))
    )
    assert kubernetes.check_mig_strategy(node, sim.inventory).status == WARN
    settings = {"mig-strategy": "mixed", "device-list-strategy": ["envvar"], "bogus": 1}
    (plugin_dir / STATUS_FILE).write_bytes(status_bytes({"nvidia.com/gpu": []}, settings))
    plugin = kubernetes.as_the_plugin_runs(node, plugin_dir)
    assert plugin.config.device_plugin.mig_strategy == "mixed"
    assert plugin.config.device_plugin.device_list_strategy == ("envvar",)
    mixed = kubernetes.check_mig_strategy(plugin, sim.inventory)
    assert mixed.status == PASS and "nvidia.com/mig-3g.40gb x2" in mixed.message
    assert kubernetes.check_cdi_spec(plugin, sim.inventory).status == SKIP  # no CDI strategy
    write_status(plugin_dir, {"nvidia.com/gpu": []})  # an older plugin recorded none
    assert kubernetes.as_the_plugin_runs(node, plugin_dir) is node


def test_mig_without_a_driver_skips(tmp_path) -> None:
    result = kubernetes.check_mig_strategy(context(tmp_path), None)
    assert result.status == SKIP
    assert result.message == "mig-strategy none: the driver's GPUs are unknown (see the nvml check)"


# --- in the report ----------------------------------------------------------------------------


def test_the_report_lists_every_kubernetes_check(
    recorded_h100x4, tmp_path, plugin_dir, serve, listening
) -> None:
    listening(plugin_dir / "kubelet.sock")
    serve(plugin_dir / "nvidia-gpu.sock")
    write_status(plugin_dir, {"nvidia.com/gpu": healthy(H100_UUIDS)})
    runtime = executable(tmp_path / "bin/nvct-runtime")
    containerd_config(
        tmp_path,
        f'[plugins.cri.containerd.runtimes.nvidia.options]\nBinaryName = "{runtime}"\n',
    )
    write_spec(tmp_path, plugin_spec(recorded_h100x4, tmp_path))
    ctx = dataclasses.replace(cdi_ctx(recorded_h100x4, tmp_path), plugin_dir=plugin_dir)
    report = DoctorReport(tuple(kubernetes.check_kubernetes(ctx)))
    checks = report.to_dict()["checks"]
    assert [(c["name"], c["status"]) for c in checks] == [
        ("kubelet-socket", PASS),
        ("device-plugin", PASS),
        ("device-plugin-devices", PASS),
        ("runtime-class", PASS),
        ("device-plugin-guard", PASS),
        ("device-plugin-cdi-spec", PASS),
        ("device-plugin-cdi-cri", SKIP),  # no containerd installed in this context
        ("mig-strategy", PASS),
    ]
    assert report.to_text()[-1] == "OK: 7 PASS, 1 SKIP"


def test_without_grpc_a_socket_is_a_warning_saying_why(
    tmp_path, plugin_dir, serve, monkeypatch
) -> None:
    """grpc that cannot be imported (the packaged grpcio built for another Python): doctor
    says so for each socket instead of failing the plugin or crashing."""
    serve(plugin_dir / "nvidia-gpu.sock")
    write_status(plugin_dir, {"nvidia.com/gpu": healthy(H100_UUIDS)})
    monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc raises ImportError
    serving, devices = k8s_plugin.check_plugin(k8s_ctx(tmp_path, plugin_dir), plugin_dir, None)
    assert serving.status == WARN and serving.name == k8s_plugin.SERVING
    assert serving.message.startswith(
        f"cannot ask {plugin_dir / 'nvidia-gpu.sock'} (nvidia.com/gpu) over gRPC: cannot import"
    )
    assert "reinstall the nvct package built for Python" in serving.message
    assert devices.status == PASS


def test_plugin_cdi_spec_dir_the_engines_do_not_read(recorded_h100x4, tmp_path) -> None:
    sim = recorded_h100x4
    ctx = cdi_ctx(sim, tmp_path, cdi_spec_dir=str(tmp_path / "elsewhere"))
    result = kubernetes.check_cdi_spec(ctx, sim.inventory)
    assert result.status == FAIL
    assert result.message == (
        f"the plugin writes its CDI spec to {tmp_path / 'elsewhere'}; the engines read "
        f"{tmp_path / 'cdi'}: the CDI names it answers resolve nowhere"
    )
    assert result.fix.startswith('set [device-plugin] cdi-spec-dir = "/var/run/cdi"')


def test_an_envvar_only_plugin_on_a_guarded_node_is_named_with_the_fix(
    recorded_h100x4, tmp_path, plugin_dir
) -> None:
    """The guard drops NVIDIA_VISIBLE_DEVICES from every source, the plugin's too."""
    sim = recorded_h100x4
    node = context(
        tmp_path, sim_config(sim, tmp_path, request=RequestRules(only_allocated_gpus=True))
    )
    node = dataclasses.replace(node, config_file="/etc/nvct/config.toml")
    settings = {"device-list-strategy": ["envvar"]}
    (plugin_dir / STATUS_FILE).write_bytes(status_bytes({"nvidia.com/gpu": []}, settings))
    plugin = kubernetes.as_the_plugin_runs(node, plugin_dir)
    dropped = kubernetes.check_guard(plugin)
    assert dropped.status == FAIL
    assert dropped.message == (
        "device-list-strategy envvar answers only NVIDIA_VISIBLE_DEVICES, which this node's "
        "nvct-runtime ignores (request.only-allocated-gpus is on in /etc/nvct/config.toml): "
        "pods get no GPU"
    )
    assert dropped.fix.startswith('set [device-plugin] device-list-strategy = ["cdi-cri"')
    settings = {"device-list-strategy": ["envvar", "cdi-annotations"]}
    (plugin_dir / STATUS_FILE).write_bytes(status_bytes({"nvidia.com/gpu": []}, settings))
    accepted = kubernetes.check_guard(kubernetes.as_the_plugin_runs(node, plugin_dir))
    assert accepted.status == PASS and "only-allocated-gpus is on" in accepted.message
    unguarded = context(tmp_path, sim_config(sim, tmp_path))
    assert kubernetes.check_guard(unguarded).status == PASS
