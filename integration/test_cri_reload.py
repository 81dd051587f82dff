"""A node's config changed through the Kubernetes API, proven where it matters: in containers
that containerd's CRI built with the handler ``nvct-cli configure`` wrote.

The stand-in API server holds the Node, labelled ``nvidia.com/device-plugin.config=a``; the
real ``nvct-config-manager`` (init container, then sidecar, as the chart runs them) copies the
labelled entry of a two-entry ConfigMap to the plugin's config file and signals the real
``nvct-device-plugin`` by its name; the kubelet stand-in allocates; the CRI stand-in runs the
pods on a private containerd (integration/harness/crinode). Entry ``a``: whole GPUs, answered
with CDI annotations; entry ``b``: every GPU time-sliced in 2 and renamed, answered with
volume-mount lists. Relabelling the node to ``b`` must re-advertise within 2 s, a pod of the
new resource must see exactly its GPU, and a pod started under ``a`` must still see what it
had."""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from integration.cri import runtime_v1_pb2 as cri
from integration.harness.apiserver import (
    LABEL,
    NODE,
    Pod,
    apiserver,  # noqa: F401 - fixture
    kube_certs,  # noqa: F401 - fixture
)
from integration.harness.crinode import IMAGE, Node
from integration.harness.processes import until
from integration.kubelet.cri import container_config, read_cri_log
from integration.kubelet.standin import sockets
from integration.test_cri import uuids_listed
from integration.test_device_plugin_reload import events

pytestmark = [pytest.mark.root, pytest.mark.runc]
GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
CONFIGS = {
    "a": "version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-annotations\n",
    "b": (
        "version: v1\nflags:\n  plugin:\n    deviceListStrategy: volume-mounts\n"
        "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: 2\n"
    ),
}
# What a container sees: nvidia-smi's GPUs, then its /dev; ends with a line of its own.
SHOW = "nvidia-smi -L 2>&1; echo ===; ls /dev; echo ---"


def sees(shown: str) -> tuple[list[str], list[str]]:
    """(UUIDs nvidia-smi -L listed, the nvidia<N> GPU nodes in /dev) of one ``SHOW``."""
    smi, _, devs = shown.partition("===")
    nodes = sorted(d for d in devs.split() if d.startswith("nvidia") and d[6:].isdigit())
    return uuids_listed(smi), nodes


def named_plugin(directory: Path) -> Path:
    """The plugin as a program of a name no other process on this host has: the sidecar
    signals every process of its PROCESS_TO_SIGNAL name it sees, and a test host is not a
    pod's PID namespace."""
    script = directory / f"nvct-device-plugin-{uuid.uuid4().hex[:10]}"
    script.write_text(f"#!{sys.executable}\nfrom nvct.deviceplugin.__main__ import main\nmain()\n")
    script.chmod(0o755)
    return script


def signalled(output: str) -> list[list[int]]:
    """The pids the sidecar signalled, per signal it sent."""
    return [json.loads(x)["pids"] for x in output.splitlines() if '"signalled"' in x]


def first_arrival(node: Node, resource: str, ids: set[str]) -> float | None:
    """When the kubelet stand-in first received ``ids`` as ``resource``'s devices."""
    with node.plugins.changed:
        return next(
            (at for at, r, got in node.plugins.received if r == resource and set(got) == ids),
            None,
        )


def test_a_relabelled_node_re_advertises_and_containers_see_exactly_their_gpus(
    cri_node: Node,
    sim_driver: Any,
    tmp_path: Path,
    apiserver: Any,  # noqa: F811 - the fixture's name
) -> None:
    node, gpus = cri_node, sim_driver.spec.gpus
    whole = {g.uuid for g in gpus}
    (tmp_path / "pod").mkdir()
    pod = Pod(tmp_path / "pod", apiserver, CONFIGS)
    apiserver.put_node(NODE, {LABEL: "a"})
    init = pod.manager(ONESHOT="true", SEND_SIGNAL="false", SIGNAL="", PROCESS_TO_SIGNAL="")
    assert init.wait() == 0, init.output()
    assert pod.dst.read_text() == CONFIGS["a"]
    program = named_plugin(tmp_path)
    trigger = tmp_path / "trigger"
    trigger.mkdir()
    pods = []
    with node.plugin("--config-file", str(pod.dst), program=(str(program),)) as plugin:
        sidecar = pod.manager(
            ONESHOT="false", SEND_SIGNAL="true", SIGNAL="1", PROCESS_TO_SIGNAL=program.name
        )
        try:
            assert set(node.plugins.devices(GPU)) == whole
            before = node.plugins.plugins[GPU]

            # under ``a``: a pod holding GPU 1, showing what it sees now and again when told
            held = gpus[1]
            answer = node.plugins.allocate(GPU, [held.uuid])
            assert answer.annotations and not answer.mounts  # a's answers: CDI annotations
            old = node.cri.run_pod("under-a", handler="nvidia")
            pods.append(old)
            wait = "while [ ! -e /trigger/go ]; do sleep 0.1; done"
            config = container_config(
                old, "main", IMAGE, ["/bin/sh", "-c", f"{SHOW}; {wait}; {SHOW}"], [answer],
                mounts=[(str(trigger), "/trigger", True)],
            )  # fmt: skip
            container = node.cri.create(old, config)
            node.cri.runtime.StartContainer(
                cri.StartContainerRequest(container_id=container), timeout=60
            )
            log = old.log_directory / "main/0.log"
            shown = until(lambda: log.exists() and "---" in read_cri_log(log), 30)
            assert shown, node.cri.status(container)
            assert sees(read_cri_log(log)) == ([held.uuid], [f"nvidia{held.minor}"])

            # the label changes: the GPUs come back as 2 replicas each, renamed, within 2 s
            began = time.monotonic()
            apiserver.set_node_labels(NODE, {LABEL: "b"})
            replicas = {f"{u}::{n}" for u in whole for n in range(2)}
            assert node.plugins.wait(
                lambda: set(node.plugins.devices(SHARED)) == replicas, timeout=10
            ), plugin.output() + sidecar.output()
            arrived = first_arrival(node, SHARED, replicas)
            assert arrived is not None and arrived - began < 2.0, (arrived, sidecar.output())
            # nvidia.com/gpu has no GPU left: its stream ends and its socket goes
            assert node.plugins.wait(lambda: before.stream_ended, timeout=5)
            assert until(lambda: "nvidia-gpu.sock" not in sockets(node.plugins.plugin_dir), 5)
            assert pod.dst.read_text() == CONFIGS["b"]
            assert plugin.proc is not None  # the one process the sidecar signalled, once
            told = [[plugin.proc.pid]]
            assert until(lambda: signalled(sidecar.output()) == told, 5), sidecar.output()
            assert len(events(plugin, "reloaded")) == 1 and not events(plugin, "reload_refused")

            # a new pod from the new resource: b's answers, and exactly its GPU
            other = gpus[2]
            answer = node.plugins.allocate(SHARED, [f"{other.uuid}::1"])
            assert answer.mounts and not answer.annotations  # b's answers: volume mounts
            new = node.cri.run_pod("under-b", handler="nvidia")
            pods.append(new)
            ran = node.run(new, container_config(new, "main", IMAGE, ["/bin/sh", "-c", SHOW],
                                                 [answer]))  # fmt: skip
            assert ran.exit_code == 0, ran.output
            assert sees(ran.output) == ([other.uuid], [f"nvidia{other.minor}"])

            # the pod started under ``a`` still sees what it had, and nothing more
            (trigger / "go").touch()
            done = node.cri.wait_exited(old, container, timeout=30)
            assert done.exit_code == 0, done.output
            first, again = done.output.split("---")[:2]
            assert sees(again) == sees(first) == ([held.uuid], [f"nvidia{held.minor}"])
            assert sidecar.proc.poll() is None and sidecar.errors() == []
        finally:
            sidecar.stop()
            for started in pods:
                node.cri.delete_pod(started)
