"""nvct-device-plugin never dies silently: races with the kubelet's sweep of its directory are
retried, and a watcher loop that raises is logged with its traceback, its devices go Unhealthy
with the reason and the loop is restarted. Faults injected for real where the filesystem can
make them (a directory on the socket path, a sweeping kubelet), in process where only code can
(a health step that raises). The MPS supervisor's crash: test_device_plugin_sharing.py."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from integration.harness.deviceplugin import uuids
from integration.harness.nvct_config import write_nvct_config
from integration.harness.processes import until
from integration.kubelet.standin import sockets
from integration.simdriver import inject
from nvct.node.files import STATUS_FILE
from nvct.node.status import read_status

pytestmark = [pytest.mark.root]
GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"


def reasons(plugin_dir: Path, resource: str) -> dict[str, str]:
    status, why = read_status(plugin_dir)
    assert status is not None, why
    return {d["id"]: f"{d['health']}: {d['reason']}" for d in status.resources[resource]}


def test_a_socket_path_taken_by_a_directory_is_retried_until_freed(
    kubelet, plugin_factory, sim_driver
) -> None:
    taken = kubelet.plugin_dir / "nvidia-gpu.sock"
    taken.mkdir()  # what once made unlink raise IsADirectoryError and the plugin exit
    plugin = plugin_factory()
    assert until(lambda: plugin.output().count('"register_failed"') >= 2, 30), plugin.output()
    assert plugin.proc is not None and plugin.proc.poll() is None, plugin.output()
    assert GPU not in kubelet.plugins and "nvidia-gpu.sock" in plugin.output()
    taken.rmdir()
    assert kubelet.wait(lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates, 10)
    assert kubelet.devices(GPU) == dict.fromkeys(uuids(sim_driver), "Healthy")


def test_a_kubelet_sweeping_its_directory_never_kills_the_plugin(
    kubelet, plugin_factory, sim_driver
) -> None:
    swept: list[float] = []
    stop = threading.Event()

    def sweep() -> None:  # a starting kubelet deletes every socket but its own, again and again
        while not stop.is_set():
            with contextlib.suppress(FileNotFoundError):
                (kubelet.plugin_dir / "nvidia-gpu.sock").unlink()
                swept.append(time.monotonic())
            time.sleep(0.0005)

    sweeper = threading.Thread(target=sweep)
    sweeper.start()
    try:
        plugin = plugin_factory()
        # the plugin kept serving again, the sweep kept deleting
        assert until(lambda: len(swept) >= 4, 30), plugin.output()
    finally:
        stop.set()
        sweeper.join()
    assert plugin.proc is not None and plugin.proc.poll() is None, plugin.output()
    healthy = dict.fromkeys(uuids(sim_driver), "Healthy")

    def serving() -> bool:
        return "nvidia-gpu.sock" in sockets(kubelet.plugin_dir) and kubelet.devices(GPU) == healthy

    assert until(serving, 10), plugin.output()
    time.sleep(0.3)  # a socket deleted after its registration is noticed within 50 ms
    assert until(serving, 10), plugin.output()
    assert sockets(kubelet.plugin_dir) == ["kubelet.sock", "nvidia-gpu.sock"]
    assert kubelet.allocate(GPU, uuids(sim_driver)[:1]).cdi_devices


def test_a_health_step_that_raises_marks_every_device_until_it_runs_again(
    tmp_path, sim_driver, kubelet, monkeypatch
) -> None:
    from nvct.config import load_config, with_settings
    from nvct.deviceplugin.plugin import Plugin

    control = tmp_path / "nvml-control"
    control.mkdir()
    monkeypatch.setenv("NVCT_SIM_CONTROL_DIR", str(control))
    config = load_config(str(write_nvct_config(tmp_path / "nvct" / "config.toml", sim_driver)))
    config = with_settings(
        config,
        "device-plugin",
        plugin_dir=str(kubelet.plugin_dir),
        cdi_spec_dir=str(tmp_path / "cdi"),
        sysfs_root=str(tmp_path / "sys"),
        quiet_period=1.0,
    )
    stop = threading.Event()
    plugin = Plugin(config, stop)
    assert plugin.start()
    failing = threading.Event()
    real_step: Callable[..., Any] = plugin.watch.step

    def step(health: Any) -> Any:
        if failing.is_set():
            raise KeyError("an answer NVML's wrapper did not expect")
        return real_step(health)

    monkeypatch.setattr(plugin.watch, "step", step)
    ids = uuids(sim_driver)
    threads: list[threading.Thread] = []
    with capture_logs() as logs:
        try:
            plugin.write_status()
            threads = [w.start().thread for w in plugin.watchers()]  # type: ignore[misc]
            serving = threading.Thread(target=plugin.serve)
            serving.start()
            threads.append(serving)
            assert kubelet.wait(lambda: kubelet.devices(GPU) == dict.fromkeys(ids, "Healthy"))
            failing.set()
            assert kubelet.wait(lambda: kubelet.devices(GPU) == dict.fromkeys(ids, "Unhealthy"), 3)
            shown = reasons(kubelet.plugin_dir, GPU)
            assert all("health watcher crashed (KeyError" in r for r in shown.values()), shown
            time.sleep(0.5)  # crashes again while it is failing: restarted, still marked
            failing.clear()
            assert kubelet.wait(lambda: kubelet.devices(GPU) == dict.fromkeys(ids, "Healthy"), 8)
            inject.xid(control, sim_driver.spec.gpus[1].minor, 48)  # the loop really runs again
            assert kubelet.wait(lambda: kubelet.devices(GPU).get(ids[1]) == "Unhealthy", 3)
        finally:
            stop.set()
            for thread in threads:
                thread.join(10)
            plugin.close()
    crashes = [e for e in logs if e["event"] == "watcher_crashed"]
    assert len(crashes) >= 2 and all(e["watcher"] == "health" for e in crashes)
    assert "KeyError" in crashes[0]["traceback"] and "in step" in crashes[0]["traceback"]
    assert [e for e in logs if e["event"] == "watcher_restarted"]
    assert (kubelet.plugin_dir / STATUS_FILE).exists()
