"""A GPU process's container, from its cgroup path as each runtime and cgroup driver writes it,
and a shared GPU's use summed per container."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvct.exporter.usage import Usage, container_of, per_owner
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
    processes = {1: Usage(10, 100), 2: Usage(5, 50), 3: Usage(1, 1), 4: Usage(2, 2)}
    got = per_owner(processes, {CID: owner, "a" * 64: other}, tmp_path)
    assert got == {owner: Usage(15, 150), other: Usage(1, 1)}  # pid 4: no container listed


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
