"""The CRI listing stand-in (integration/kubelet/crilisting) answers nvct's CRI client as a
runtime does: each container ID with its pod, namespace and name, one sandbox per pod."""

from __future__ import annotations

from pathlib import Path

from integration.kubelet.crilisting import CriListing, Listed
from nvct.kubeapi.cri.client import CriClient
from nvct.kubeapi.podresources.ids import Owner

A, B, C = ("a" * 64, "b" * 64, "c" * 64)


def test_the_client_maps_each_listed_container_to_its_pod(tmp_path: Path) -> None:
    listing = CriListing(tmp_path / "containerd.sock").start()
    client = CriClient(str(listing.socket))
    try:
        listing.set_containers([
            Listed(A, "train", "team-a", "main"),
            Listed(B, "train", "team-a", "sidecar"),
            Listed(C, "train", "team-b", "main"),  # same pod name, another namespace
        ])  # fmt: skip
        assert client.owners() == {
            A: Owner("train", "team-a", "main"),
            B: Owner("train", "team-a", "sidecar"),
            C: Owner("train", "team-b", "main"),
        }
        listing.set_containers([Listed(C, "train", "team-b", "main")])
        assert client.owners() == {C: Owner("train", "team-b", "main")}
        assert listing.calls == {"ListPodSandbox": 2, "ListContainers": 2}
    finally:
        client.close()
        listing.stop()
    assert not listing.socket.exists()
