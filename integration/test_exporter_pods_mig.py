"""Per-pod usage on MIG devices from the real ``nvct-cli exporter``, on an H100 in MIG mode:
three pods' containers really created by containerd's CRI from the device plugin's Allocate
answers (MIG strategy mixed, the 3g.40gb device time-sliced x2), each container's process on
its MIG device as NVML reports it (the GPU's handle lists each process with its GPU and compute
instance). Each pod on the shared MIG device's series (GPU_I_PROFILE, GPU_I_ID) gets its own
memory, a MIG device held whole keeps its own values, and the parent GPU's series, which carry
every MIG device's pods, give each pod its own use instead of the GPU's on all three."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.harness.crinode import Node, running_node
from integration.harness.skips import need_binary, need_root, require
from integration.kubelet.podresources import Container
from integration.simdriver import inject
from integration.test_exporter import Series, wait_for
from integration.test_exporter_pods import holder, pods_and_kubelet, usage_exporter

pytestmark = [pytest.mark.root, pytest.mark.runc]
SHARED = "nvidia.com/mig-3g.40gb.shared"
WHOLE = "nvidia.com/mig-2g.20gb"
RULE = '[{devices = ["0:0"], replicas = 2, rename = true}]'  # the 3g.40gb device


@pytest.fixture(scope="module")
def mig_driver() -> Any:
    require(need_root(), need_binary("gcc"), need_binary("ldconfig"))
    from integration.simdriver import cached_driver, preset

    return cached_driver(preset("h100x2-550-mig"), Path("/tmp/nvct-test-simdrivers"))


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory, mig_driver: Any, glibc_rootfs_dir: Path
) -> Iterator[Node]:
    with running_node(tmp_path_factory.mktemp("cri-mig"), mig_driver, glibc_rootfs_dir) as node:
        yield node


def series(found: list[Series], name: str, uuid: str, gi: str | None) -> dict[str, float]:
    """pod → value of ``name`` on GPU ``uuid``'s series (``gi``: that MIG device's; None: the
    GPU's own)."""
    return {
        s.labels["pod"]: s.value
        for s in found
        if s.name == name and s.labels["UUID"] == uuid and s.labels.get("GPU_I_ID") == gi
    }


def test_each_pod_on_a_mig_device_gets_its_own_usage(
    node: Node, mig_driver: Any, tmp_path: Path
) -> None:
    gpu = mig_driver.spec.gpus[0]
    shared, whole = gpu.migs[0], gpu.migs[1]  # 3g.40gb (time-sliced), 2g.20gb
    holders = {  # pod -> (resource, device ID, MIG device)
        "train-a": (SHARED, f"{shared.uuid}::0", shared),
        "train-b": (SHARED, f"{shared.uuid}::1", shared),
        "notebook": (WHOLE, whole.uuid, whole),
    }
    pids = {}
    with pods_and_kubelet(node, tmp_path) as (kubelet, pods):
        with node.plugin(
            "--mig-strategy", "mixed", "--device-list-strategy", "cdi-annotations",
            **{"device-plugin.sharing.gpus": RULE},
        ):  # fmt: skip
            assert node.plugins.wait(lambda: SHARED in node.plugins.plugins, 20)
            for name, (resource, device, _) in holders.items():
                pod, pids[name] = holder(node, name, "research", resource, device)
                pods.append(pod)
        kubelet.set_containers(
            [Container(n, "research", "main", {r: [d]}) for n, (r, d, _) in holders.items()]
        )
        kubelet.set_allocatable(
            {SHARED: [f"{shared.uuid}::0", f"{shared.uuid}::1"], WHOLE: [whole.uuid]}
        )
        with usage_exporter(node, mig_driver, kubelet, tmp_path / "exporter") as exporter:
            control = exporter.control
            # each MIG device's memory: its processes' and 100 MiB of its own (contexts)
            inject.set_mig_metrics(control, 0, shared.gi, memory_used_mib=3000 + 5000 + 100)
            inject.set_mig_metrics(control, 0, whole.gi, memory_used_mib=1000 + 100)
            inject.set_metrics(control, 0, memory_used_mib=9200)
            used = {"train-a": 3000, "train-b": 5000, "notebook": 1000}
            for name, (_, _, mig) in holders.items():
                inject.gpu_process(control, 0, pids[name], used_mib=used[name], gi=mig.gi,
                                   ci=mig.ci)  # fmt: skip
            exporter.start()
            gi = str(shared.gi)
            want = {"train-a": 3000, "train-b": 5000}
            fb = "DCGM_FI_DEV_FB_USED"
            wait_for(lambda: series(exporter.scrape(), fb, gpu.uuid, gi) == want, 20)
            found = exporter.scrape()
            # the shared MIG device: each pod its own, summing to its processes' (not twice
            # the device's 8100); its free memory stays the device's on both
            free = shared.memory_mib - 8100
            assert series(found, "DCGM_FI_DEV_FB_FREE", gpu.uuid, gi) == {
                "train-a": free,
                "train-b": free,
            }
            profiles = {s.labels["GPU_I_PROFILE"] for s in found
                        if s.name == fb and s.labels.get("GPU_I_ID") == gi}  # fmt: skip
            assert profiles == {"3g.40gb"}
            # a MIG device held whole: its own values, which are its one pod's
            assert series(found, fb, gpu.uuid, str(whole.gi)) == {"notebook": 1100}
            # the parent GPU's series carry all three pods: each its own use, not 9200 thrice
            assert series(found, fb, gpu.uuid, None) == used
