"""nvct through a real containerd's CRI, as a kubelet drives a node (integration/harness/crinode):
the device plugin's Allocate answer built into a CRI container config as the kubelet builds
it, the pod run by containerd 1.6's CRI plugin with runtime handler ``nvidia`` (or containerd's
default runtime, also nvct-runtime), and a real container's ``nvidia-smi -L`` on the simulated
driver read back from its CRI log file.

One containerd per module (started in about a second); each test starts the device plugin it
needs and deletes its pods."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.cri import runtime_v1_pb2 as cri
from integration.harness.crinode import GUARDED, IMAGE, OPEN, Node, start_containerd, start_node
from integration.harness.skips import need_binary, need_busybox, need_root, require
from integration.kubelet.cri import Exited, container_config, pod_cgroups

pytestmark = [pytest.mark.root, pytest.mark.runc]
GPU = "nvidia.com/gpu"
SCRIPT = "nvidia-smi -L 2>&1; echo ===; ls /dev; ls /dev/nvidia-caps 2>/dev/null; true"
DEVICES_DIR = "/var/run/nvidia-container-devices"


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory, sim_driver: Any, glibc_rootfs_dir: Path
) -> Iterator[Node]:
    # Skips only where these are truly absent; a containerd that does not start is an error.
    require(need_root(), need_binary("containerd"), need_binary("ctr"), need_binary("runc"))
    require(need_binary("gcc"), need_busybox())
    from integration.simdriver import cached_driver, preset

    work = tmp_path_factory.mktemp("cri")
    node = start_node(work, sim_driver)
    try:
        node.add_handler("nvidia-open", sim_driver, node.plugin_work(sim_driver) / "cdi", **OPEN)
        mig = cached_driver(preset("a100x8-570-mig"), Path("/tmp/nvct-test-simdrivers"))
        node.add_handler("nvidia-mig", mig, node.plugin_work(mig) / "cdi", **GUARDED)
        start_containerd(node, glibc_rootfs_dir)
        yield node
    finally:
        node.close()


def uuids_listed(smi: str) -> list[str]:
    return [ln.split("UUID: ")[1].rstrip(")") for ln in smi.splitlines() if "UUID:" in ln]


def seen(exited: Exited) -> tuple[list[str], list[str]]:
    """(UUIDs nvidia-smi -L listed, the nvidia<N> GPU nodes in /dev) of a container."""
    assert exited.exit_code == 0, exited.output
    smi, _, devs = exited.output.partition("===")
    nodes = sorted(d for d in devs.split() if d.startswith("nvidia") and d[6:].isdigit())
    return uuids_listed(smi), nodes


def run_pod(node: Node, handler: str, allocations: list[Any], **pod: Any) -> Exited:
    """A one-container pod on ``handler`` with ``allocations``; deleted after it ran."""
    mounts = pod.pop("mounts", ())
    sandbox = node.cri.run_pod("gpu-pod", handler=handler, **pod)
    try:
        config = container_config(
            sandbox, "main", IMAGE, ["/bin/sh", "-c", SCRIPT], allocations, mounts=mounts
        )
        return node.run(sandbox, config)
    finally:
        node.cri.delete_pod(sandbox)


@pytest.mark.parametrize("handler", ["nvidia", ""], ids=["runtimeclass", "default-runtime"])
@pytest.mark.parametrize("strategy", ["cdi-annotations", "volume-mounts"])
def test_the_guarded_node_gives_exactly_the_allocated_gpu(
    node: Node, sim_driver: Any, handler: str, strategy: str
) -> None:
    uuid = sim_driver.spec.gpus[1].uuid
    with node.plugin("--device-list-strategy", strategy):
        answer = node.plugins.allocate(GPU, [uuid])
        exited = run_pod(node, handler, [answer])
    assert seen(exited) == ([uuid], ["nvidia1"])
    if strategy == "cdi-annotations":  # containerd passed the plugin's key through
        assert set(answer.annotations) <= set(exited.spec["annotations"])


def test_the_second_pod_of_a_kind_is_prepared_by_the_launcher_alone(
    node: Node, sim_driver: Any
) -> None:
    """Two pods given the same GPU by the plugin's CDI annotation: the first create through
    the Python shim (which writes the native entry), the second by nvct-runtime's native
    create; both see that GPU and no other."""
    uuid = sim_driver.spec.gpus[2].uuid
    log = node.handlers["nvidia"].parent / "nvct.log"
    with node.plugin("--device-list-strategy", "cdi-annotations"):
        answer = node.plugins.allocate(GPU, [uuid])
        before = len(log.read_text().splitlines()) if log.exists() else 0
        pods = [run_pod(node, "nvidia", [answer]) for _ in range(2)]
    assert [seen(p) for p in pods] == [([uuid], ["nvidia2"])] * 2
    events = [json.loads(line) for line in log.read_text().splitlines()[before:]]
    prepared = [e for e in events if e.get("event") == "container_prepared"]
    assert [e["via"] for e in prepared][-1] == "native", prepared
    assert prepared[-1]["gpus"] == prepared[0]["gpus"]


def test_envvar_gives_the_gpu_where_the_guard_is_off_and_none_where_it_is_on(
    node: Node, sim_driver: Any
) -> None:
    uuid = sim_driver.spec.gpus[3].uuid
    with node.plugin("--device-list-strategy", "envvar"):
        answer = node.plugins.allocate(GPU, [uuid])
        open_node = run_pod(node, "nvidia-open", [answer])
        guarded = run_pod(node, "nvidia", [answer])
    assert seen(open_node) == ([uuid], ["nvidia3"])
    # the guard cannot tell the plugin's variable from the image's: neither counts
    assert seen(guarded) == ([], [])


@pytest.mark.parametrize("handler", ["nvidia", ""], ids=["runtimeclass", "default-runtime"])
def test_a_pod_asking_for_no_gpu_sees_none(node: Node, handler: str, tmp_path: Path) -> None:
    """Its image sets NVIDIA_VISIBLE_DEVICES=all (and CUDA_VERSION), it mounts an emptyDir's
    directory where the plugin's volume-mount list would be, and it names GPUs in a
    ``cdi.k8s.io/`` annotation of its own (a pod annotation: the kubelet copies pod
    annotations into the sandbox config only, which containerd passes on to the containers
    only through the handler's pod_annotations)."""
    empty_dir = tmp_path / "empty-dir"
    empty_dir.mkdir()
    exited = run_pod(
        node,
        handler,
        [],
        mounts=[(str(empty_dir), f"{DEVICES_DIR}/all", False)],
        annotations={"cdi.k8s.io/mine": f"{GPU}=all"},
    )
    assert "cdi.k8s.io/mine" not in exited.spec["annotations"]
    assert seen(exited) == ([], [])


def test_a_mig_device_through_the_cri(node: Node) -> None:
    mig_sim = node.drivers["nvidia-mig"]
    resource = "nvidia.com/mig-2g.20gb"
    gpu = next(g for g in mig_sim.spec.gpus if any(m.profile == "2g.20gb" for m in g.migs))
    mig = next(m.uuid for m in gpu.migs if m.profile == "2g.20gb")
    with node.plugin(
        "--mig-strategy", "mixed", "--device-list-strategy", "cdi-annotations",
        sim=mig_sim, resource=resource,
    ):  # fmt: skip
        answer = node.plugins.allocate(resource, [mig])
        exited = run_pod(node, "nvidia-mig", [answer])
    assert seen(exited) == ([gpu.uuid, mig], [f"nvidia{gpu.minor}"])
    caps = [d for d in exited.output.split() if d.startswith("nvidia-cap") and d[10:].isdigit()]
    assert len(caps) == 2


def test_a_time_sliced_replica_gives_its_gpu(node: Node, sim_driver: Any) -> None:
    uuid = sim_driver.spec.gpus[0].uuid
    sharing = {
        "device-plugin.sharing.rename-by-default": "false",
        "device-plugin.sharing.gpus": '[{devices = ["0"], replicas = 4}]',
    }
    with node.plugin("--device-list-strategy", "cdi-annotations", **sharing):
        assert f"{uuid}::3" in node.plugins.devices(GPU)
        answer = node.plugins.allocate(GPU, [f"{uuid}::3"])
        exited = run_pod(node, "nvidia", [answer])
    assert seen(exited) == ([uuid], ["nvidia0"])


def test_two_containers_of_one_pod_get_their_own_gpus(node: Node, sim_driver: Any) -> None:
    first, second = sim_driver.spec.gpus[0], sim_driver.spec.gpus[2]
    with node.plugin("--device-list-strategy", "cdi-annotations"):
        answers = [node.plugins.allocate(GPU, [g.uuid]) for g in (first, second)]
        pod = node.cri.run_pod("two", handler="nvidia")
        try:
            runs = [
                node.run(
                    pod, container_config(pod, name, IMAGE, ["/bin/sh", "-c", SCRIPT], [answer])
                )
                for name, answer in zip(("a", "b"), answers, strict=True)
            ]
        finally:
            node.cri.delete_pod(pod)
    assert seen(runs[0]) == ([first.uuid], [f"nvidia{first.minor}"])
    assert seen(runs[1]) == ([second.uuid], [f"nvidia{second.minor}"])


def test_deleting_the_pod_leaves_no_container_mount_or_state(node: Node, sim_driver: Any) -> None:
    """A pod whose GPU container still runs is deleted as the kubelet deletes it: no
    container, sandbox, process, mount, task or runc state, or snapshot of it is left."""
    uuid = sim_driver.spec.gpus[2].uuid
    with node.plugin("--device-list-strategy", "volume-mounts"):
        answer = node.plugins.allocate(GPU, [uuid])
        pod = node.cri.run_pod("held", handler="nvidia")
        config = container_config(
            pod, "main", IMAGE, ["/bin/sh", "-c", "nvidia-smi -L; exec sleep 600"], [answer]
        )
        container = node.cri.create(pod, config)
        node.cri.runtime.StartContainer(
            cri.StartContainerRequest(container_id=container), timeout=60
        )
        ids = [pod.sandbox_id, container]
        try:
            log = pod.log_directory / "main/0.log"
            deadline = time.monotonic() + 30
            while uuid not in (log.read_text() if log.exists() else ""):
                assert time.monotonic() < deadline, node.cri.status(container)
                time.sleep(0.05)
            assert node.cri.status(container).status.state == cri.CONTAINER_RUNNING
            assert node.containerd.leftovers(ids)  # the running pod is seen (the check works)
            cgroups = pod_cgroups(pod)
            assert any((c / container).is_dir() for c in cgroups)
        finally:
            node.cri.delete_pod(pod)
    assert node.cri.containers() == [] and node.cri.sandboxes() == []
    assert node.containerd.leftovers(ids) == []
    assert [c for c in cgroups if c.exists()] == []


def test_cdi_cri_on_containerd_1_6_gives_no_gpu_and_doctor_says_so(
    node: Node, sim_driver: Any, tmp_path: Path
) -> None:
    """containerd 1.6's CRI plugin drops ``CDI_devices``: the container starts without its
    GPU (why the shipped DaemonSet also answers cdi-annotations), and doctor names it."""
    uuid = sim_driver.spec.gpus[0].uuid
    with node.plugin("--device-list-strategy", "cdi-cri") as plugin:
        answer = node.plugins.allocate(GPU, [uuid])
        assert [d.name for d in answer.cdi_devices] and not answer.annotations
        exited = run_pod(node, "nvidia", [answer])
        assert seen(exited) == ([], [])
        done = subprocess.run(
            [sys.executable, "-m", "nvct.cli.main", "--config", str(plugin.config), "doctor",
             "--kubernetes", "--plugin-dir", str(node.plugins.plugin_dir),
             "--containerd-config", str(node.containerd.config), "--json"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    cdi_cri = checks["device-plugin-cdi-cri"]
    assert cdi_cri["status"] == "FAIL", cdi_cri
    assert "containerd 1.6" in cdi_cri["message"] and "has no CDI" in cdi_cri["message"]
    assert checks["containerd-annotations"]["status"] == "PASS"  # configure's handlers
