"""Live reload of the real nvct-device-plugin, against the kubelet stand-in, on the simulated
8 x A100 with MIG devices: NVIDIA's config file replaced by atomic rename (what a
config-manager sidecar does), an invalid one, and SIGHUP. An unchanged resource keeps its
registration and its ListAndWatch stream; a changed one registers again within 2 s; a removed
one stops and its socket goes; an invalid config keeps the running one, said in one line."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from integration.harness.apiserver import (
    CONFIGS,
    LABEL,
    NODE,
    Pod,
    apiserver,  # noqa: F401 - fixture
    kube_certs,  # noqa: F401 - fixture
)
from integration.harness.deviceplugin import PluginProcess, numa_sysfs
from integration.harness.processes import until
from integration.kubelet.standin import Kubelet, sockets
from nvct.node.status import read_status

pytestmark = [pytest.mark.root]
GPU = "nvidia.com/gpu"
TINY = "nvidia.com/mig-1g.10gb"
MIXED = "version: v1\nflags:\n  migStrategy: mixed\n"
SLICED = (
    MIXED + "sharing:\n  timeSlicing:\n    resources:\n    - {name: " + TINY + ", replicas: 2}\n"
)
RENAMED = SLICED.replace("timeSlicing:\n", "timeSlicing:\n    renameByDefault: true\n")
INVALID = SLICED.replace("replicas: 2", "replicas: 1")


def events(plugin: PluginProcess, name: str) -> list[dict[str, Any]]:
    lines = (json.loads(x) for x in plugin.output().splitlines() if x.startswith("{"))
    return [e for e in lines if e.get("event") == name]


def replace(path: Path, text: str) -> float:
    """Write ``path`` as a config-manager does (a new file renamed over it); when."""
    temp = path.with_name(f".{path.name}.new")
    temp.write_text(text)
    os.replace(temp, path)
    return time.monotonic()


def registrations(kubelet: Kubelet, resource: str) -> list[float]:
    return [at for at, r in kubelet.registrations if r == resource]


def test_reload_keeps_unchanged_resources_and_re_advertises_changed_ones(tmp_path, kubelet) -> None:
    from integration.simdriver import cached_driver, preset

    sim = cached_driver(preset("a100x8-570-mig"), Path("/tmp/nvct-test-simdrivers"))
    numa_sysfs(tmp_path, sim)
    config = tmp_path / "config" / "config.yaml"
    config.parent.mkdir()
    config.write_text(MIXED)
    plugin = PluginProcess(tmp_path, sim, kubelet.plugin_dir, "--config-file", str(config))
    profiles = sorted({m.profile for g in sim.spec.gpus for m in g.migs})
    resources = [GPU, *(f"nvidia.com/mig-{p}" for p in profiles)]
    tiny = sorted(m.uuid for g in sim.spec.gpus for m in g.migs if m.profile == "1g.10gb")
    plugin.start()
    try:
        assert kubelet.wait(
            lambda: all(r in kubelet.plugins and kubelet.plugins[r].updates for r in resources),
            timeout=20,
        ), plugin.output()
        whole = kubelet.plugins[GPU]
        messages = whole.updates
        assert set(kubelet.devices(TINY)) == set(tiny)

        # a changed resource: registered again, with its replicas, within 2 s
        began = replace(config, SLICED)
        sliced = {f"{u}::{n}" for u in tiny for n in range(2)}
        assert kubelet.wait(lambda: set(kubelet.devices(TINY)) == sliced, timeout=5), (
            plugin.output()
        )
        assert registrations(kubelet, TINY)[-1] - began < 2.0
        assert len(registrations(kubelet, TINY)) == 2
        # ... the others untouched: same registration, stream open, no message sent again
        assert kubelet.plugins[GPU] is whole and not whole.stream_ended
        assert whole.updates == messages
        assert [len(registrations(kubelet, r)) for r in resources if r != TINY] == [1] * 4
        (done,) = events(plugin, "reloaded")
        assert sorted(done["kept"]) == sorted(r for r in resources if r != TINY)
        assert done["served"] == [TINY]
        answer = kubelet.allocate(GPU, [sorted(kubelet.devices(GPU))[0]])  # still answers
        assert answer.cdi_devices

        # an invalid config: refused in one line, nothing changes for the kubelet
        before = list(kubelet.registrations)
        replace(config, INVALID)
        assert until(lambda: events(plugin, "reload_refused"), timeout=5), plugin.output()
        refused = [x for x in plugin.output().splitlines() if "reload refused" in x]
        assert len(refused) == 1 and "replicas = 1 is invalid" in refused[0]
        time.sleep(0.3)
        assert kubelet.registrations == before and kubelet.plugins[GPU] is whole
        assert set(kubelet.devices(TINY)) == sliced and plugin.proc.poll() is None

        # renamed: a new resource registers; the old one stops and its socket goes
        old = kubelet.plugins[TINY]
        began = replace(config, RENAMED)
        shared = f"{TINY}.shared"
        assert kubelet.wait(lambda: set(kubelet.devices(shared)) == sliced, timeout=5), (
            plugin.output()
        )
        assert registrations(kubelet, shared)[-1] - began < 2.0
        assert kubelet.wait(lambda: old.stream_ended, timeout=5)
        assert "nvidia-mig-1g.10gb.sock" not in sockets(kubelet.plugin_dir)
        assert "nvidia-mig-1g.10gb.shared.sock" in sockets(kubelet.plugin_dir)
        assert kubelet.plugins[GPU] is whole and not whole.stream_ended
        assert kubelet.allocate(shared, [f"{tiny[0]}::1"]).cdi_devices
        status, why = read_status(kubelet.plugin_dir)  # what the running plugin serves
        assert status is not None, why
        assert sorted(status.resources) == sorted([shared, *(r for r in resources if r != TINY)])

        # SIGHUP (what NVIDIA's config-manager sends): read again; nothing changed, nothing done
        assert plugin.proc is not None
        plugin.proc.send_signal(signal.SIGHUP)
        assert until(lambda: events(plugin, "reload_unchanged"), timeout=5), plugin.output()
        assert [e["signal"] for e in events(plugin, "reload_asked")][-1] == "SIGHUP"
        assert kubelet.plugins[GPU] is whole and len(registrations(kubelet, shared)) == 1

        # NVIDIA's config-manager: the link removed, then made again, here to /dev/null (its
        # empty config: NVIDIA's defaults, MIG strategy none): the MIG resources stop, the
        # GPUs stay; the moment without a file is no change (nothing refused)
        config.unlink()
        time.sleep(0.3)
        config.symlink_to("/dev/null")
        migs = [kubelet.plugins[r] for r in resources if r != GPU] + [kubelet.plugins[shared]]
        assert kubelet.wait(lambda: all(m.stream_ended for m in migs), timeout=5)
        # a stopped server's socket goes just after its streams end
        gone = ["kubelet.sock", "nvidia-gpu.sock"]
        assert until(lambda: sockets(kubelet.plugin_dir) == gone, timeout=5), sockets(
            kubelet.plugin_dir
        )
        assert kubelet.plugins[GPU] is whole and not whole.stream_ended
        assert len(events(plugin, "reload_refused")) == 1
    finally:
        assert plugin.stop() == 0
    assert sockets(kubelet.plugin_dir) == ["kubelet.sock"]


def test_a_node_label_change_reaches_the_kubelet_through_the_config_manager(
    tmp_path,
    kubelet,
    apiserver,  # noqa: F811 - the fixture's name
) -> None:
    """The whole per-node chain: the Node's label changes at the stand-in API server,
    nvct-config-manager (the real sidecar) replaces the plugin's config file, the real plugin
    reloads, and the kubelet stand-in sees the new resources: within 2 s of the label change,
    the GPUs' resource re-registered with its new devices, nothing else restarted."""
    from integration.simdriver import cached_driver, preset

    sim = cached_driver(preset("a100x8-570-mig"), Path("/tmp/nvct-test-simdrivers"))
    numa_sysfs(tmp_path, sim)
    (tmp_path / "pod").mkdir()
    pod = Pod(tmp_path / "pod", apiserver, CONFIGS)
    apiserver.put_node(NODE, {LABEL: "default"})
    init = pod.manager(ONESHOT="true", SEND_SIGNAL="false", SIGNAL="", PROCESS_TO_SIGNAL="")
    assert init.wait() == 0, init.output()
    plugin = PluginProcess(tmp_path, sim, kubelet.plugin_dir, "--config-file", str(pod.dst))
    manager = pod.manager(ONESHOT="false", SEND_SIGNAL="false", SIGNAL="", PROCESS_TO_SIGNAL="")
    plugin.start()
    try:
        whole = {g.uuid for g in sim.spec.gpus if not g.migs}
        assert kubelet.wait(lambda: set(kubelet.devices(GPU)) == whole, timeout=20), plugin.output()
        first = kubelet.plugins[GPU]
        began = time.monotonic()
        apiserver.set_node_labels(NODE, {LABEL: "ts4"})
        sliced = {f"{u}::{n}" for u in whole for n in range(4)}
        assert kubelet.wait(lambda: set(kubelet.devices(GPU)) == sliced, timeout=10), (
            plugin.output() + manager.output()
        )
        took = registrations(kubelet, GPU)[-1] - began
        assert took < 2.0, (took, manager.output())
        assert first.stream_ended and kubelet.plugins[GPU] is not first
        assert not events(plugin, "reload_refused") and manager.errors() == []
    finally:
        manager.stop()
        assert plugin.stop() == 0
