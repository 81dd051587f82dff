"""A GPU process's container, from its cgroup path as each runtime and cgroup driver writes it,
and a shared GPU's use summed per container."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nvct.exporter.usage import ProcessReader, Running, Usage, container_of, per_owner
from nvct.kubeapi.cri import listing_pb2
from nvct.kubeapi.podresources.ids import Owner

CID = "4f0c1d2e3b4a59687766554433221100ffeeddccbbaa99887766554433221100"
UID = "0e1f2a3b_4c5d_6e7f_8091_a2b3c4d5e6f7"


@pytest.mark.parametrize(
    "cgroup",
    [
        f"0::/kubepods/besteffort/pod{UID}/{CID}\n",  # containerd, cgroupfs (the kubelet's)
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID}.slice/"
        f"cri-containerd-{CID}.scope\n",  # containerd, systemd
        f"0::/kubepods.slice/kubepods-pod{UID}.slice/crio-{CID}.scope\n",  # CRI-O
        f"12:pids:/docker/{CID}\n11:memory:/docker/{CID}\n",  # cgroup v1, docker
    ],
)
def test_the_container_id_of_every_cgroup_layout(tmp_path: Path, cgroup: str) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(cgroup)
    assert container_of(42, tmp_path) == CID


def test_not_in_a_container_or_gone(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text("0::/system.slice/sshd.service\n")
    assert container_of(7, tmp_path) is None
    assert container_of(8, tmp_path) is None


def test_use_is_summed_per_container_and_strangers_left_out(tmp_path: Path) -> None:
    for pid, cid in ((1, CID), (2, CID), (3, "a" * 64), (4, "b" * 64)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(f"0::/kubepods/pod{UID}/{cid}\n")
    owner, other = Owner("p", "ns", "main"), Owner("q", "ns", "main")
    processes = {
        1: Running(Usage(10, 100), gi=1),
        2: Running(Usage(5, 50), gi=2),
        3: Running(Usage(1, 1), gi=2),
        4: Running(Usage(2, 2), gi=1),
    }
    containers = {CID: owner, "a" * 64: other}
    got = per_owner(processes, containers, tmp_path)
    assert got == {owner: Usage(15, 150), other: Usage(1, 1)}  # pid 4: no container listed
    # on a GPU in MIG mode, one GPU instance's processes only
    assert per_owner(processes, containers, tmp_path, gi=2) == {
        owner: Usage(5, 50),
        other: Usage(1, 1),
    }
    assert per_owner(processes, containers, tmp_path, gi=7) == {}


def test_the_listing_keeps_the_cri_field_numbers() -> None:
    """Field names and numbers as the CRI v1 API's (the harness's copy, checked upstream)."""
    pytest.importorskip("grpc")
    from integration.cri import runtime_v1_pb2

    for name, mine in listing_pb2.DESCRIPTOR.message_types_by_name.items():
        theirs = runtime_v1_pb2.DESCRIPTOR.message_types_by_name[name]
        for f in mine.fields:
            assert theirs.fields_by_name[f.name].number == f.number, (name, f.name)


def test_no_runtime_socket_is_one_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("grpc")
    from nvct.kubeapi.cri.client import CriClient, CriError

    client = CriClient(str(tmp_path / "containerd.sock"))
    try:
        with pytest.raises(CriError, match=r"no container runtime CRI socket at .*\.sock"):
            client.owners()
    finally:
        client.close()


class _Error(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class _NotFound(_Error):
    pass


def _proc(pid: int, mib: int, gi: int = 0xFFFFFFFF) -> SimpleNamespace:
    return SimpleNamespace(pid=pid, usedGpuMemory=mib * 1024 * 1024, gpuInstanceId=gi)


def _nvml(compute: list[Any], mps: list[Any] | int, samples: int = 6) -> SimpleNamespace:
    """NVML whose MPS call answers ``mps``, or fails with that NVML error code; utilization
    samples fail with ``samples`` (6: NOT_FOUND, none since the last round)."""
    asked = {"mps": 0, "samples": 0}

    def mps_call(_h: Any) -> list[Any]:
        asked["mps"] += 1
        if isinstance(mps, int):
            raise _Error(mps)
        return mps

    def utilization(_h: Any, _last: int) -> list[Any]:
        asked["samples"] += 1
        raise (_NotFound if samples == 6 else _Error)(samples)

    return SimpleNamespace(
        NVMLError=_Error, NVMLError_NotFound=_NotFound, asked=asked,
        nvmlDeviceGetComputeRunningProcesses=lambda _h: compute,
        nvmlDeviceGetMPSComputeRunningProcesses=mps_call,
        nvmlDeviceGetProcessUtilization=utilization,
    )  # fmt: skip


def test_mps_clients_count_once_whichever_lists_name_them() -> None:
    # Volta or newer: clients in both lists ("M+C"), the server in the compute list only
    both = _nvml([_proc(1, 28), _proc(2, 3000), _proc(3, 5000)], [_proc(2, 3000), _proc(3, 5000)])
    got = ProcessReader(both, "h").read()
    assert {pid: r.usage.memory_mib for pid, r in got.items()} == {1: 28, 2: 3000, 3: 5000}
    # a driver that lists the clients in the MPS list only: still each its own
    apart = _nvml([_proc(1, 28)], [_proc(2, 3000, gi=2), _proc(3, 5000, gi=2)])
    got = ProcessReader(apart, "h").read()
    assert {pid: (r.usage.memory_mib, r.gi) for pid, r in got.items()} == {
        1: (28, None),
        2: (3000, 2),
        3: (5000, 2),
    }


def test_a_driver_without_the_mps_call_is_asked_once() -> None:
    nvml = _nvml([_proc(1, 100)], 3)  # NOT_SUPPORTED (before Volta)
    reader = ProcessReader(nvml, "h")
    for _ in range(3):
        assert {pid: r.usage.memory_mib for pid, r in reader.read().items()} == {1: 100}
    assert nvml.asked["mps"] == 1
    flaky = _nvml([_proc(1, 100)], 999)  # UNKNOWN: asked again next round
    reader = ProcessReader(flaky, "h")
    reader.read()
    reader.read()
    assert flaky.asked["mps"] == 2


def test_memory_is_attributed_where_the_driver_gives_no_utilization_samples() -> None:
    nvml = _nvml([_proc(1, 100, gi=2)], [], samples=3)  # NOT_SUPPORTED
    reader = ProcessReader(nvml, "h")
    for _ in range(3):
        assert reader.read() == {1: Running(Usage(0.0, 100), gi=2)}
    assert nvml.asked["samples"] == 1
