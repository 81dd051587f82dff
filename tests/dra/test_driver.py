"""Driver: prepare and unprepare as the kubelet calls them, on a recorded inventory's devices
and a claim store standing in for the API server (the real process against the real protocol
is integration/test_dra_plugin.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nvct.dra.checkpoint import Checkpoint
from nvct.dra.claimspec import NodeSpec
from nvct.dra.devices import dra_devices
from nvct.dra.driver import ClaimRef, Driver
from nvct.dra.mps import ClaimDaemons
from nvct.host.inventory import Inventory
from tests.inventories import read_fixture

UID = "5f0c2a9e-aaaa-4bbb-8ccc-dddddddddddd"
COMMON = {"deviceNodes": [{"path": "/dev/nvidiactl"}], "env": ["NVIDIA_VISIBLE_DEVICES=void"]}


class Claims:
    """ResourceClaims by (namespace, name), counting the reads."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Any] = {}
        self.reads = 0

    def put(self, name: str, devices: list[str], config: list[Any] | None = None) -> ClaimRef:
        self.objects[("ns", name)] = {
            "metadata": {"namespace": "ns", "name": name, "uid": UID},
            "status": {"allocation": {"devices": {
                "results": [{"request": "gpu", "driver": "gpu.nvct.io", "pool": "node-1",
                             "device": d} for d in devices],
                "config": config or [],
            }}},
        }  # fmt: skip
        return ClaimRef("ns", UID, name)

    def __call__(self, namespace: str, name: str) -> Any:
        self.reads += 1
        return self.objects[(namespace, name)]


def _driver(
    tmp_path: Path, claims: Claims, gpus: int = 4, mps: ClaimDaemons | None = None
) -> Driver:
    inventory = Inventory.from_dict(read_fixture("h100x4-550"))
    devices = dra_devices(inventory, sysfs_root=tmp_path / "sys")[:gpus]
    by_uuid = {d.uuid: {"deviceNodes": [{"path": d.nodes[0].path}]} for d in devices}
    return Driver(
        name="gpu.nvct.io", pool="node-1", devices=devices,
        node_spec=NodeSpec("0.5.0", COMMON, by_uuid), cdi_dir=tmp_path / "cdi",
        checkpoint=Checkpoint(tmp_path / "plugin"), fetch=claims, mps=mps,
    )  # fmt: skip


def test_prepare_writes_the_claims_spec_and_a_retry_reads_nothing(tmp_path: Path) -> None:
    claims = Claims()
    driver = _driver(tmp_path, claims)
    ref = claims.put("c", ["gpu-2", "gpu-0"])
    devices, error = driver.prepare(ref)
    assert error == ""
    assert [(d.device, d.cdi_device_ids) for d in devices] == [
        ("gpu-2", (f"k8s.gpu.nvct.io/claim={UID}-gpu-2",)),
        ("gpu-0", (f"k8s.gpu.nvct.io/claim={UID}-gpu-0",)),
    ]
    spec = json.loads((tmp_path / "cdi" / f"nvct-dra-claim-{UID}.json").read_text())
    assert spec["kind"] == "k8s.gpu.nvct.io/claim"
    assert spec["containerEdits"] == COMMON
    assert [
        (d["name"], d["containerEdits"]["deviceNodes"][0]["path"]) for d in spec["devices"]
    ] == [
        (f"{UID}-gpu-2", "/dev/nvidia2"),
        (f"{UID}-gpu-0", "/dev/nvidia0"),
    ]
    assert driver.prepare(ref) == (devices, "")
    assert claims.reads == 1
    # A new plugin on the same checkpoint answers the same, and rewrites a spec removed meanwhile.
    (tmp_path / "cdi" / f"nvct-dra-claim-{UID}.json").unlink()
    again = _driver(tmp_path, claims)
    assert again.prepare(ref) == (devices, "")
    assert (tmp_path / "cdi" / f"nvct-dra-claim-{UID}.json").exists()
    assert claims.reads == 1


def test_a_checkpointed_claim_whose_gpu_left_is_refused_not_shrunk(tmp_path: Path) -> None:
    claims = Claims()
    ref = claims.put("c", ["gpu-3"])
    assert _driver(tmp_path, claims).prepare(ref)[1] == ""
    (tmp_path / "cdi" / f"nvct-dra-claim-{UID}.json").unlink()
    devices, error = _driver(tmp_path, claims, gpus=3).prepare(ref)
    assert devices == ()
    assert "device gpu-3 it was prepared with is no longer on this node" in error


@pytest.mark.parametrize(
    ("devices", "config", "message"),
    [
        (["gpu-9"], None, "device 'gpu-9' is not offered by this node"),
        (
            ["gpu-0"],
            [{"opaque": {"driver": "gpu.nvct.io", "parameters": {
                "apiVersion": "dra.nvct.io/v1alpha1", "kind": "MigDeviceConfig"}}}],
            "got gpu device gpu-0 but its config is for mig devices",
        ),
    ],
)  # fmt: skip
def test_a_claim_that_cannot_be_prepared_leaves_nothing(
    tmp_path: Path, devices: list[str], config: Any, message: str
) -> None:
    claims = Claims()
    driver = _driver(tmp_path, claims)
    found, error = driver.prepare(claims.put("c", devices, config))
    assert (found, message in error, "\n" in error) == ((), True, False), error
    assert not (tmp_path / "cdi").exists() or not list((tmp_path / "cdi").iterdir())
    assert driver.checkpoint.claims == {}


def test_unprepare_is_done_for_claims_never_or_already_unprepared(tmp_path: Path) -> None:
    claims = Claims()
    driver = _driver(tmp_path, claims)
    ref = claims.put("c", ["gpu-1"])
    assert driver.unprepare(ref) == ""  # never prepared
    driver.prepare(ref)
    assert driver.unprepare(ref) == ""
    assert driver.unprepare(ref) == ""  # the kubelet's retry
    assert not list((tmp_path / "cdi").iterdir())
    assert Checkpoint(tmp_path / "plugin").claims == {}


def _mps(requests: list[str] | None = None, **fields: Any) -> list[Any]:
    parameters = {
        "apiVersion": "dra.nvct.io/v1alpha1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": fields},
    }
    return [
        {"requests": requests or [], "opaque": {"driver": "gpu.nvct.io", "parameters": parameters}}
    ]


@pytest.mark.parametrize(
    ("program", "config", "message"),
    [
        ("no nvidia-cuda-mps-control under /drv", _mps(),
         "sharing strategy MPS: no nvidia-cuda-mps-control under /drv"),
        ((Path("/nonexistent"), ""), _mps(defaultPinnedDeviceMemoryLimit="100Gi"),
         "pinned-memory limit 102400Mi exceeds gpu-0's 81559Mi"),
        ((Path("/nonexistent"), ""), _mps(defaultPerDevicePinnedMemoryLimit={"gpu-3": "1Gi"}),
         "defaultPerDevicePinnedMemoryLimit names 'gpu-3', not a device of this claim (gpu-0, "
         "gpu-1)"),
        ((Path("/nonexistent"), ""), _mps(["other"]),
         "configured with 1 MPS config(s) and 1 device(s) without MPS"),
    ],
)  # fmt: skip
def test_mps_a_claim_cannot_have_is_refused_before_any_daemon_starts(
    tmp_path: Path, program: Any, config: Any, message: str
) -> None:
    claims = Claims()
    driver = _driver(tmp_path, claims, mps=ClaimDaemons(tmp_path / "mps", program))
    ref = claims.put("c", ["gpu-0", "gpu-1"], config)
    claims.objects[("ns", "c")]["status"]["allocation"]["devices"]["results"][1]["request"] = (
        "other"
    )
    found, error = driver.prepare(ref)
    assert (found, message in error, "\n" in error) == ((), True, False), error
    assert not (tmp_path / "mps").exists()
    assert driver.checkpoint.claims == {}


def test_mps_on_a_plugin_without_daemons_is_refused(tmp_path: Path) -> None:
    claims = Claims()
    found, error = _driver(tmp_path, claims).prepare(claims.put("c", ["gpu-0"], _mps()))
    assert found == ()
    assert "sharing strategy MPS is not available on this node" in error


def test_an_interval_without_nvidia_smi_is_refused_and_default_runs_nothing(tmp_path: Path) -> None:
    from nvct.dra.timeslice import TimeSlices

    claims = Claims()
    driver = _driver(tmp_path, claims)
    driver.timeslices = TimeSlices("no nvidia-smi under /drv")
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Medium"}}
    parameters = {"apiVersion": "dra.nvct.io/v1alpha1", "kind": "GpuConfig", "sharing": sharing}
    config = [{"opaque": {"driver": "gpu.nvct.io", "parameters": parameters}}]
    found, error = driver.prepare(claims.put("c", ["gpu-0"], config))
    assert found == ()
    assert "time-slice interval Medium: no nvidia-smi under /drv (fix: install" in error
    sharing["timeSlicingConfig"]["interval"] = "Default"  # nothing to run: prepared
    found, error = driver.prepare(claims.put("c", ["gpu-0"], config))
    assert error == "" and driver.checkpoint.claims[UID].timeslice == ()
