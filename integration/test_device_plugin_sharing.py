"""GPU sharing in the real nvct-device-plugin process, against the kubelet stand-in, on the
simulated driver (4 x H100): time-slicing per GPU, the renamed resource on its own socket, the
refusals, MPS daemons (limits recorded by the simulated nvidia-cuda-mps-control, killed and
restarted, quit on SIGTERM), and two containers sharing one GPU at once through nvct-runtime."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from integration.harness.bundles import BundleFactory, run_runc
from integration.harness.deviceplugin import MpsControlProcess, PluginProcess, apply, uuids
from integration.harness.nvct_config import NVCT_BIN, write_nvct_config
from integration.harness.processes import process_alive, until
from integration.kubelet.standin import Kubelet, sockets
from integration.simdriver import inject
from nvct.cdi.names import PLUGIN_KIND

pytestmark = [pytest.mark.root]
GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
PID_FILE = "nvidia-cuda-mps-control.pid"


def sharing(*rules: str, **options: str) -> dict[str, str]:
    """write_nvct_config's keys for ``[device-plugin.sharing]`` (dotted keys, inline tables)."""
    out = {f"device-plugin.sharing.{k.replace('_', '-')}": v for k, v in options.items()}
    out["device-plugin.sharing.gpus"] = f"[{', '.join(rules)}]"
    return out


def replicas(uuid: str, n: int) -> list[str]:
    return [f"{uuid}::{i}" for i in range(n)]


def test_gpu_0_sliced_by_four_the_others_whole(kubelet, plugin_factory, sim_driver) -> None:
    ids = uuids(sim_driver)
    plugin = plugin_factory(**sharing('{devices = ["0"], replicas = 4}'))
    assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates), (
        plugin.output()
    )
    assert kubelet.devices(GPU) == dict.fromkeys([*replicas(ids[0], 4), *ids[1:]], "Healthy")
    assert sockets(kubelet.plugin_dir) == ["kubelet.sock", "nvidia-gpu.sock"]
    answer = kubelet.allocate(GPU, [f"{ids[0]}::2"])
    assert [d.name for d in answer.cdi_devices] == [f"{PLUGIN_KIND}={ids[0]}"]  # ::n stripped
    # a replica and a whole GPU: no fail-requests-greater-than-one here
    both = kubelet.allocate(GPU, [f"{ids[0]}::1", ids[2]])
    assert [d.name for d in both.cdi_devices] == [f"{PLUGIN_KIND}={u}" for u in (ids[0], ids[2])]
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(GPU, [f"{ids[0]}::0", f"{ids[0]}::3"])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"2 replicas of one GPU ({ids[0]})" in refused.value.details()
    assert "beside whole GPUs" in plugin.output()  # the config's pitfall, logged
    # every replica follows its GPU's health (an application's XID: over after the quiet period)
    inject.xid(plugin.control, sim_driver.spec.gpus[0].minor, 94)
    began = time.monotonic()
    sick = dict.fromkeys(replicas(ids[0], 4), "Unhealthy")
    assert kubelet.wait(lambda: sick.items() <= kubelet.devices(GPU).items(), timeout=5)
    assert time.monotonic() - began < 1.0
    assert [kubelet.devices(GPU)[u] for u in ids[1:]] == ["Healthy"] * 3
    assert kubelet.wait(lambda: set(kubelet.devices(GPU).values()) == {"Healthy"}, timeout=10)


def test_renamed_shared_gpus_are_their_own_resource_and_socket(
    kubelet, plugin_factory, sim_driver
) -> None:
    ids = uuids(sim_driver)
    plugin_factory(
        **sharing(
            '{devices = ["0", "' + ids[1] + '"], replicas = 4}',
            rename_by_default="true",
            fail_requests_greater_than_one="true",
        )
    )
    both = (GPU, SHARED)
    assert kubelet.wait(
        lambda: all(r in kubelet.plugins and kubelet.plugins[r].updates for r in both)
    )
    assert kubelet.devices(GPU) == dict.fromkeys(ids[2:], "Healthy")
    shared = [*replicas(ids[0], 4), *replicas(ids[1], 4)]
    assert kubelet.devices(SHARED) == dict.fromkeys(shared, "Healthy")
    assert kubelet.plugins[SHARED].endpoint == "nvidia-gpu.shared.sock"
    assert {"nvidia-gpu.sock", "nvidia-gpu.shared.sock"} <= set(sockets(kubelet.plugin_dir))
    one = kubelet.allocate(SHARED, [f"{ids[1]}::3"])
    assert [d.name for d in one.cdi_devices] == [f"{PLUGIN_KIND}={ids[1]}"]
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(SHARED, [f"{ids[0]}::0", f"{ids[1]}::0"])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "fail-requests-greater-than-one" in refused.value.details()
    # GPU 0 has one replica taken (not available): the next one comes from GPU 1
    available = [i for i in shared if i != f"{ids[0]}::0"]
    assert kubelet.preferred(SHARED, available, [], 1) == [f"{ids[1]}::0"]
    assert kubelet.preferred(SHARED, available, [], 2) == [f"{ids[1]}::0", f"{ids[0]}::1"]


def test_two_replicas_of_one_gpu_with_warn_are_told_to_the_container(
    kubelet, plugin_factory, sim_driver
) -> None:
    ids = uuids(sim_driver)
    plugin = plugin_factory(
        "--device-list-strategy",
        "envvar",
        **sharing('{devices = ["all"], replicas = 2}', replicas_of_one_gpu='"warn"'),
    )
    assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates)
    answer = kubelet.allocate(GPU, replicas(ids[3], 2))
    assert dict(answer.envs) == {
        "NVIDIA_VISIBLE_DEVICES": ids[3],
        "NVCT_SHARED_GPU_REPLICAS": f"{ids[3]}=2",
    }
    warning = [ln for ln in plugin.output().splitlines() if '"allocate_warning"' in ln]
    assert len(warning) == 1 and ids[3] in warning[0], plugin.output()


# --- MPS -----------------------------------------------------------------------------------


@pytest.fixture
def mps_control(tmp_path: Path) -> Iterator[Callable[..., MpsControlProcess]]:
    """Starts ``nvct-cli mps-control`` for a plugin; at the end stops them all, and kills any
    daemon a SIGKILLed one left."""
    started: list[MpsControlProcess] = []

    def make(plugin: Any, config: Path | None = None) -> MpsControlProcess:
        control = MpsControlProcess(plugin, tmp_path / "mps", config=config).start()
        started.append(control)
        return control

    yield make
    for control in started:
        if control.proc is not None and control.proc.poll() is None:
            control.stop()
    for pid_file in (tmp_path / "mps").glob(f"*/pipe/{PID_FILE}"):
        with contextlib.suppress(ValueError, ProcessLookupError):
            pid = int(pid_file.read_text())
            if "nvidia-cuda-mps-control" in Path(f"/proc/{pid}/cmdline").read_text():
                os.kill(pid, signal.SIGKILL)


MPS_RULES = sharing(
    '{devices = ["1"], strategy = "mps", replicas = 2, rename = true}',
    '{devices = ["2"], strategy = "mps", replicas = 4, pinned-memory-mib = 1000,'
    " active-thread-percentage = 30, rename = true}",
)


def test_mps_limits_applied_before_advertising_daemon_restarted_and_quit(
    kubelet, plugin_factory, mps_control, sim_driver, tmp_path
) -> None:
    ids = uuids(sim_driver)
    uuid = ids[1]
    plugin = plugin_factory("--mps-root", str(tmp_path / "mps"), start=False, **MPS_RULES)
    pipe = plugin.work / "mps" / uuid / "pipe"
    control = mps_control(plugin)
    plugin.start()
    seen: dict[str, list[tuple[str, str]]] = {}  # per GPU: the commands when first advertised
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(seen) < 2:
        advertised = {i.partition("::")[0] for i in kubelet.devices(SHARED)}
        for gpu in advertised - set(seen):
            seen[gpu] = inject.mps_commands(plugin.control)
        time.sleep(0.002)
    assert sorted(seen) == sorted(ids[1:3]), plugin.output() + control.output()
    mine = [c for p, c in seen[uuid] if p == str(pipe)]
    memory = sim_driver.spec.gpus[1].memory_mib // 2
    limits = [
        f"set_default_device_pinned_mem_limit 0 {memory}M",
        "set_default_active_thread_percentage 50",
        "get_default_device_pinned_mem_limit 0",
        "get_default_active_thread_percentage",
    ]
    # mps-control set them, then read them back, and the plugin asked for both before
    # advertising: the two read-backs are separate processes and may interleave
    assert mine[:2] == limits[:2] and sorted(mine[2:6]) == sorted(limits[2:] * 2), mine
    other = [c for p, c in seen[ids[2]] if p == str(plugin.work / "mps" / ids[2] / "pipe")]
    assert other[:2] == [
        "set_default_device_pinned_mem_limit 0 1000M",
        "set_default_active_thread_percentage 30",
    ], plugin.output()
    expected = [*replicas(uuid, 2), *replicas(ids[2], 4)]
    assert kubelet.wait(lambda: kubelet.devices(SHARED) == dict.fromkeys(expected, "Healthy"))

    answer = kubelet.allocate(SHARED, [f"{uuid}::1"])
    assert answer.envs["CUDA_MPS_PIPE_DIRECTORY"] == f"/mps/{uuid}/pipe"
    assert [(m.host_path, m.container_path, m.read_only) for m in answer.mounts] == [
        (str(pipe), f"/mps/{uuid}/pipe", False),
        (str(plugin.work / "mps" / uuid / "shm"), "/dev/shm", False),
    ]
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(SHARED, [f"{uuid}::0", f"{ids[2]}::0"])
    assert "(MPS GPUs)" in refused.value.details()

    first = int((pipe / PID_FILE).read_text())
    environ = dict(
        e.split("=", 1) for e in Path(f"/proc/{first}/environ").read_text().split("\0") if e
    )
    assert environ["CUDA_VISIBLE_DEVICES"] == uuid
    assert environ["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe)
    assert environ["CUDA_MPS_LOG_DIRECTORY"] == str(plugin.work / "mps" / uuid / "log")
    # the driver is under a driver root (as from a pod): its servers must find libcuda there
    assert str(sim_driver.lib_dir) in environ["LD_LIBRARY_PATH"].split(":")
    assert (
        "set_default_active_thread_percentage 50" in (pipe.parent / "log/control.log").read_text()
    )
    # the containers' pipe and shm directories, and the daemons' log for root alone, whatever
    # the umask
    modes = {d: (pipe.parent / d).stat().st_mode & 0o7777 for d in ("pipe", "shm", "log")}
    assert modes == {"pipe": 0o755, "shm": 0o755, "log": 0o700}
    history = kubelet.plugins[SHARED].history
    seen_lists = len(history)
    os.kill(first, signal.SIGKILL)
    killed = time.monotonic()
    gone = dict.fromkeys(replicas(uuid, 2), "Unhealthy")

    def told() -> list[dict[str, str]]:  # the lists since the kill that said so
        return [h for h in history[seen_lists:] if gone.items() <= h.items()]

    assert kubelet.wait(lambda: bool(told()), timeout=5), plugin.output()
    assert time.monotonic() - killed < 1.0
    assert told()[0][f"{ids[2]}::0"] == "Healthy"  # the other GPU's daemon
    assert kubelet.wait(lambda: kubelet.devices(SHARED) == dict.fromkeys(expected, "Healthy"))
    second = int((pipe / PID_FILE).read_text())
    assert second != first and process_alive(second)
    # the daemon's /dev/shm is the GPU's shm directory, which its containers get too
    mountinfo = Path(f"/proc/{second}/mountinfo").read_text().splitlines()
    shm = [ln.split()[3] for ln in mountinfo if ln.split()[4] == "/dev/shm"]
    assert shm and shm[-1].endswith(f"/mps/{uuid}/shm"), shm  # the last mounted covers the rest
    assert '"mps_daemon_died"' in control.output() and '"mps_daemon_died"' in plugin.output()

    assert plugin.stop() == 0  # the plugin quits no daemon: they are mps-control's
    assert not [c for _, c in inject.mps_commands(plugin.control) if c == "quit"]
    assert process_alive(second)
    assert control.stop() == 0
    quits = [p for p, c in inject.mps_commands(plugin.control) if c == "quit"]
    assert sorted(quits) == sorted([str(pipe), str(plugin.work / "mps" / ids[2] / "pipe")])
    assert not process_alive(second) and not (pipe / PID_FILE).exists()


def test_a_daemon_whose_limits_mps_control_has_not_applied_is_asked_nothing(
    kubelet, plugin_factory, mps_control, sim_driver, tmp_path
) -> None:
    """A daemon answers on its pipe, with the driver's defaults, before its limits are set.
    The plugin asks it nothing and advertises nothing until nvct-cli mps-control has applied
    them (its limits-applied file), and says why; mps-control replaces that daemon."""
    ids = uuids(sim_driver)
    plugin = plugin_factory("--mps-root", str(tmp_path / "mps"), start=False, **MPS_RULES)
    base = plugin.work / "mps" / ids[1]
    for name in ("pipe", "log"):
        (base / name).mkdir(parents=True)
    env = {
        **os.environ,
        **sim_driver.env(plugin.dev_root),
        "CUDA_MPS_PIPE_DIRECTORY": str(base / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(base / "log"),
    }
    mps = str(sim_driver.bin_dir / "nvidia-cuda-mps-control")
    subprocess.run([mps, "-d"], env=env, check=True, timeout=10)
    assert until((base / "pipe" / PID_FILE).exists, 5)
    stray = int((base / "pipe" / PID_FILE).read_text())
    asked = subprocess.run(
        [mps], input="get_default_active_thread_percentage\n", env=env, text=True,
        capture_output=True, check=True, timeout=10,
    )  # fmt: skip
    assert asked.stdout.strip() == "100.0"  # it answers, with the defaults
    before = len(inject.mps_commands(plugin.control))
    plugin.start()
    said = f"has not applied the limits of {ids[1]}'s MPS control daemon yet"
    assert kubelet.wait(lambda: plugin.output().count(said) >= 2, 10), plugin.output()
    assert inject.mps_commands(plugin.control)[before:] == []  # the plugin asked nothing
    assert not [d for d in kubelet.devices(SHARED) if d.startswith(ids[1])]

    control = mps_control(plugin)
    memory = sim_driver.spec.gpus[1].memory_mib // 2
    expected = dict.fromkeys([*replicas(ids[1], 2), *replicas(ids[2], 4)], "Healthy")
    assert kubelet.wait(lambda: kubelet.devices(SHARED) == expected, 30), control.output()
    assert not process_alive(stray)  # its defaults are not the config's: replaced
    applied = base / "limits-applied"
    assert applied.read_text() == f"pinned memory 0: {memory}M and 50% active threads\n"
    assert control.stop() == 0
    assert not applied.exists()  # quit: the next daemon there is not taken for this one


def test_mps_daemons_and_their_clients_outlive_a_plugin_restart(
    kubelet, plugin_factory, mps_control, sim_driver, tmp_path
) -> None:
    """The plugin SIGKILLed (a crash; an upgrade or config change restarts its pod): every
    daemon runs on, a client connected before keeps talking to the same daemon, and the
    restarted plugin advertises the replicas Healthy within a second of registering."""
    uuid = uuids(sim_driver)[1]
    plugin = plugin_factory("--mps-root", str(tmp_path / "mps"), start=False, **MPS_RULES)
    pipe = plugin.work / "mps" / uuid / "pipe"
    mps_control(plugin)
    plugin.start()
    healthy = dict.fromkeys(replicas(uuid, 2), "Healthy")
    assert kubelet.wait(lambda: healthy.items() <= kubelet.devices(SHARED).items())
    daemon = int((pipe / PID_FILE).read_text())
    client = subprocess.Popen(  # an MPS client with the pipe open, as a CUDA process has it
        [str(sim_driver.bin_dir / "nvidia-cuda-mps-control")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **sim_driver.env(plugin.dev_root), "CUDA_MPS_PIPE_DIRECTORY": str(pipe)},
    )
    try:
        assert client.stdin is not None and client.stdout is not None
        client.stdin.write("get_default_active_thread_percentage\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == "50.0"
        sets_before = [c for _, c in inject.mps_commands(plugin.control) if c.startswith("set_")]
        assert plugin.proc is not None
        plugin.proc.kill()
        plugin.proc.wait()
        time.sleep(1.5)  # longer than a probe period: nothing noticed the plugin's death
        assert process_alive(daemon) and int((pipe / PID_FILE).read_text()) == daemon

        before = kubelet.plugins[SHARED].at
        again = plugin_factory("--mps-root", str(tmp_path / "mps"), start=False, **MPS_RULES)
        again.start()
        assert kubelet.wait(lambda: kubelet.plugins[SHARED].at != before), again.output()
        registered = kubelet.plugins[SHARED].at
        assert kubelet.wait(lambda: healthy.items() <= kubelet.devices(SHARED).items())
        assert time.monotonic() - registered < 1.0, again.output()
        client.stdin.write("get_default_active_thread_percentage\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == "50.0"  # the same connection, answered
        assert process_alive(daemon) and int((pipe / PID_FILE).read_text()) == daemon
        sets_after = [c for _, c in inject.mps_commands(plugin.control) if c.startswith("set_")]
        assert sets_after == sets_before  # never restarted, never re-limited
    finally:
        client.kill()
        client.wait()


def test_a_crash_in_mps_controls_loop_is_said_and_survived_with_every_daemon(
    kubelet, plugin_factory, mps_control, sim_driver, tmp_path
) -> None:
    """Restarting a dead daemon fails with an error MpsDaemon does not expect (its log
    directory is a file now): nvct-cli mps-control logs the crash with its traceback and goes
    on, the other GPU's daemon untouched, and restarts the daemon once the directory is back."""
    ids = uuids(sim_driver)
    plugin = plugin_factory("--mps-root", str(tmp_path / "mps"), start=False, **MPS_RULES)
    control = mps_control(plugin)
    plugin.start()
    expected = dict.fromkeys([*replicas(ids[1], 2), *replicas(ids[2], 4)], "Healthy")
    assert kubelet.wait(lambda: kubelet.devices(SHARED) == expected, 30), control.output()
    other = int((tmp_path / "mps" / ids[2] / "pipe" / PID_FILE).read_text())
    log_dir = tmp_path / "mps" / ids[1] / "log"
    log_dir.rename(tmp_path / "log.aside")
    log_dir.write_text("not a directory\n")
    os.kill(int((tmp_path / "mps" / ids[1] / "pipe" / PID_FILE).read_text()), signal.SIGKILL)
    gone = dict.fromkeys(replicas(ids[1], 2), "Unhealthy")
    assert kubelet.wait(lambda: gone.items() <= kubelet.devices(SHARED).items(), 5)
    deadline = time.monotonic() + 10
    while '"watcher_crashed"' not in control.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    out = control.output()
    assert "Traceback (most recent call last)" in out and "FileExistsError" in out, out
    assert control.proc is not None and control.proc.poll() is None
    assert process_alive(other)  # a crash quits no daemon
    log_dir.unlink()
    (tmp_path / "log.aside").rename(log_dir)
    assert kubelet.wait(lambda: kubelet.devices(SHARED) == expected, 15), control.output()
    assert '"watcher_restarted"' in control.output()


def test_mps_control_keeps_daemons_with_its_limits_and_replaces_others(
    kubelet, plugin_factory, mps_control, sim_driver, tmp_path
) -> None:
    """A new mps-control (its pod restarted without taking the daemons, or a host service
    restarted) keeps a daemon that answers with the configured limits, and replaces one
    that answers with others."""
    uuid = uuids(sim_driver)[1]
    plugin = plugin_factory("--mps-root", str(tmp_path / "mps"), start=False, **MPS_RULES)
    pipe = plugin.work / "mps" / uuid / "pipe"
    first = mps_control(plugin)
    plugin.start()
    healthy = dict.fromkeys(replicas(uuid, 2), "Healthy")
    assert kubelet.wait(lambda: healthy.items() <= kubelet.devices(SHARED).items())
    daemon = int((pipe / PID_FILE).read_text())
    first.kill()
    kept = mps_control(plugin)
    assert until(lambda: '"mps_daemon_ready"' in kept.output(), timeout=10)
    assert '"adopted": true' in kept.output(), kept.output()
    assert int((pipe / PID_FILE).read_text()) == daemon and process_alive(daemon)
    kept.kill()

    other = write_nvct_config(
        tmp_path / "other" / "config.toml",
        sim_driver,
        **sharing(
            '{devices = ["1"], strategy = "mps", replicas = 2, rename = true,'
            " active-thread-percentage = 20}",
        ),
    )
    replaced = mps_control(plugin, other)
    assert until(lambda: '"mps_daemon_ready"' in replaced.output(), timeout=10)
    assert not process_alive(daemon)
    assert (str(pipe), "quit") in inject.mps_commands(plugin.control)
    # the plugin, still configured for 50 %, takes its replicas out and says why
    gone = dict.fromkeys(replicas(uuid, 2), "Unhealthy")
    assert kubelet.wait(lambda: gone.items() <= kubelet.devices(SHARED).items(), timeout=5)
    assert until(lambda: "20.0% active threads, not" in plugin.output(), timeout=5)


def test_the_plugin_without_mps_control_advertises_no_mps_replica_and_says_why(
    kubelet, plugin_factory, mps_control, sim_driver, tmp_path
) -> None:
    uuid = uuids(sim_driver)[1]
    plugin = plugin_factory("--mps-root", str(tmp_path / "mps"), **MPS_RULES)
    assert until(lambda: '"mps_daemon_failed"' in plugin.output(), timeout=10)
    assert "nvct-cli mps-control" in plugin.output()
    time.sleep(0.5)
    assert not [d for d in kubelet.devices(SHARED) if d.startswith(uuid)]
    mps_control(plugin)
    healthy = dict.fromkeys(replicas(uuid, 2), "Healthy")
    assert kubelet.wait(lambda: healthy.items() <= kubelet.devices(SHARED).items(), timeout=5)


def test_a_stale_pid_file_never_kills_another_process(
    kubelet, plugin_factory, mps_control, sim_driver, tmp_path
) -> None:
    uuid = uuids(sim_driver)[0]
    pipe = tmp_path / "mps" / uuid / "pipe"
    pipe.mkdir(parents=True)
    other = subprocess.Popen(["sleep", "60"])  # the pid a reboot's leftover file names now
    try:
        (pipe / PID_FILE).write_text(f"{other.pid}\n")
        rule = '{devices = ["0"], strategy = "mps", replicas = 2, rename = true}'
        plugin = plugin_factory("--mps-root", str(tmp_path / "mps"), **sharing(rule))
        control = mps_control(plugin)
        healthy = dict.fromkeys(replicas(uuid, 2), "Healthy")
        assert kubelet.wait(lambda: kubelet.devices(SHARED) == healthy), plugin.output()
        assert other.poll() is None and int((pipe / PID_FILE).read_text()) != other.pid
        assert control.stop() == 0
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_mps_on_a_mig_strategy_mixed_node_is_a_one_line_error(
    kubelet, plugin_factory, sim_driver
) -> None:
    plugin = plugin_factory(
        "--mig-strategy",
        "mixed",
        **sharing('{devices = ["0"], strategy = "mps", replicas = 2}'),
    )
    assert plugin.proc is not None and plugin.proc.wait(timeout=60) == 2
    errors = [ln for ln in plugin.output().splitlines() if ln.startswith("nvct-device-plugin:")]
    assert len(errors) == 1 and "mig-strategy mixed" in errors[0] and "fix:" in errors[0]
    assert GPU not in kubelet.plugins


def test_a_socket_path_too_long_for_unix_sockets_is_a_one_line_error(
    tmp_path: Path, sim_driver: Any
) -> None:
    # a plugin-dir deeper than the kubelet's default (pytest's, ~75 bytes): with this name's
    # socket it passes the 107 bytes a Unix socket path may have; kubelet.sock still fits
    standin = Kubelet(tmp_path / "device-plugins").start()
    name = "nvidia.com/gpu.shared-by-the-team-that-needs-a-long-name"
    toml = sharing(f'{{devices = ["0"], replicas = 2, resource = "{name}"}}')
    plugin = PluginProcess(tmp_path, sim_driver, standin.plugin_dir, **toml).start()
    try:
        assert plugin.proc is not None and plugin.proc.wait(timeout=60) == 2
        out = plugin.output()
        errors = [ln for ln in out.splitlines() if ln.startswith("nvct-device-plugin:")]
        assert len(errors) == 1 and name in errors[0] and "shorter plugin-dir" in errors[0]
        assert "Traceback" not in out
    finally:
        if plugin.proc is not None and plugin.proc.poll() is None:
            plugin.stop()
        standin.stop()


# --- two containers sharing one GPU, at once, through nvct-runtime ------------------------


def _run_two_at_once(
    kubelet: Kubelet,
    resource: str,
    ids: list[str],
    runc_bundle_factory: BundleFactory,
    runtime_config: Path,
    tmp_path: Path,
    script: str,
) -> list[Any]:
    """Two containers, each given one replica; each waits until both run before it looks."""
    meet = tmp_path / "meet"
    meet.mkdir()
    results: list[Any] = [None, None]

    def one(n: int) -> None:
        response = kubelet.allocate(resource, [ids[n]])
        applied = apply(response, [])
        applied["extra"]["mounts"].append(
            {"destination": "/meet", "source": str(meet), "type": "bind", "options": ["rbind"]}
        )
        both = (
            f"touch /meet/{n}; i=0; while [ ! -e /meet/{1 - n} ] && [ $i -lt 300 ]; do "
            "sleep 0.1; i=$((i+1)); done; [ -e /meet/{1 - n} ] && echo together; " + script
        ).replace("{1 - n}", str(1 - n))
        bundle = runc_bundle_factory(
            ["/bin/sh", "-c", both], applied["env"], extra=applied["extra"]
        )
        results[n] = run_runc(
            bundle,
            f"nvct-share-{os.getpid()}-{n}-{time.monotonic_ns()}",
            runtime=NVCT_BIN / "nvct-runtime",
            env={**os.environ, "NVCT_CONFIG": str(runtime_config)},
            timeout=90,
        )

    threads = [threading.Thread(target=one, args=(n,)) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _smi_uuids(stdout: str) -> list[str]:
    return [ln.split("UUID: ")[1].rstrip(")") for ln in stdout.splitlines() if "UUID:" in ln]


@pytest.mark.runc
@pytest.mark.parametrize("strategy", ["time-slicing", "mps"])
def test_two_containers_share_one_gpu_at_once(
    kubelet,
    plugin_factory,
    mps_control,
    sim_driver,
    runc_bundle_factory: BundleFactory,
    tmp_path: Path,
    strategy: str,
) -> None:
    uuid = uuids(sim_driver)[2]
    plugin = plugin_factory(
        "--device-list-strategy",
        "cdi-annotations",
        "--mps-root",
        str(tmp_path / "mps"),
        **sharing(f'{{devices = ["2"], strategy = "{strategy}", replicas = 2, rename = true}}'),
    )
    if strategy == "mps":
        mps_control(plugin)
    assert kubelet.wait(lambda: len(kubelet.devices(SHARED)) == 2), plugin.output()
    runtime_config = write_nvct_config(
        tmp_path / "runtime" / "config.toml",
        sim_driver,
        **{"request.only-allocated-gpus": "true", "cdi.spec-dirs": f'["{plugin.work / "cdi"}"]'},
    )
    script = "nvidia-smi -L"
    if strategy == "mps":
        script += '; echo "pipe=$CUDA_MPS_PIPE_DIRECTORY"; ls "$CUDA_MPS_PIPE_DIRECTORY"'
        script += "; touch /dev/shm/from-a-client"
    results = _run_two_at_once(
        kubelet, SHARED, replicas(uuid, 2), runc_bundle_factory, runtime_config, tmp_path, script
    )
    for result in results:
        assert result.returncode == 0, (result.stdout, result.stderr)
        assert result.stdout.startswith("together\n"), (result.stdout, result.stderr)
        assert _smi_uuids(result.stdout) == [uuid], result.stdout
        if strategy == "mps":  # the daemon's pipe directory, with its control FIFO
            assert f"pipe=/mps/{uuid}/pipe" in result.stdout
            assert "control" in result.stdout.split(f"pipe=/mps/{uuid}/pipe", 1)[1].split()
    if strategy == "mps":  # their /dev/shm is the daemon's
        assert (plugin.work / "mps" / uuid / "shm" / "from-a-client").exists()


def test_mig_slices(tmp_path, kubelet) -> None:
    """MIG devices time-sliced under mixed (8 x A100, GPU 0 in MIG mode): its 1g.10gb device
    sliced x3 as its profile's .shared resource, the other devices as they were. (A short
    name: the socket's path must fit a sockaddr_un.)"""
    from integration.harness.deviceplugin import PluginProcess
    from integration.simdriver import cached_driver, preset

    sim = cached_driver(preset("a100x8-570-mig"), Path("/tmp/nvct-test-simdrivers"))
    rule = '{devices = ["0:2"], replicas = 3, rename = true}'
    plugin = PluginProcess(
        tmp_path, sim, kubelet.plugin_dir, "--mig-strategy", "mixed", **sharing(rule)
    )
    plugin.start()
    mig = sim.spec.gpus[0].migs[2]
    resource = f"nvidia.com/mig-{mig.profile}.shared"
    try:
        assert kubelet.wait(
            lambda: resource in kubelet.plugins and kubelet.plugins[resource].updates, timeout=15
        ), plugin.output()
        assert kubelet.devices(resource) == dict.fromkeys(replicas(mig.uuid, 3), "Healthy")
        assert kubelet.plugins[resource].endpoint == f"nvidia-mig-{mig.profile}.shared.sock"
        assert mig.uuid not in kubelet.devices(f"nvidia.com/mig-{mig.profile}")
        answer = kubelet.allocate(resource, [f"{mig.uuid}::1"])
        assert [d.name for d in answer.cdi_devices] == [f"{PLUGIN_KIND}={mig.uuid}"]
    finally:
        plugin.stop()
