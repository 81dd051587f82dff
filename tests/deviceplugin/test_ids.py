"""The kubelet always sees UUIDs (replicas ``<uuid>::<n>``); ``device-id-strategy = "index"``
changes only what the container is told, in every answer form (NVIDIA's
uniqueDeviceIDsFromAnnotatedDeviceIDs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvct.cdi.names import PLUGIN_KIND
from nvct.config import parse_config
from nvct.deviceplugin.allocate import AllocationError, allocate
from nvct.host.inventory import Inventory
from nvct.node.devices import resources
from nvct.node.sharing import plan_sharing

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
A100 = Inventory.from_dict(json.loads((FIXTURES / "a100x8-570-mig.json").read_text()))
SLICED = '[[device-plugin.sharing.gpus]]\ndevices = ["2", "0:1"]\nreplicas = 2\n'


def advertised(id_strategy: str) -> dict[str, dict[str, object]]:
    config = parse_config(
        f'[device-plugin]\nmig-strategy = "mixed"\ndevice-id-strategy = "{id_strategy}"\n'
        f"{SLICED}".encode(),
        source="test",
    )
    found = resources(
        A100,
        mig_strategy=config.device_plugin.mig_strategy,
        sysfs_root=Path("/nonexistent"),
        plan=plan_sharing(config, A100),
    )
    return {r.name: {d.id: d for d in r.devices} for r in found}


def test_the_kubelets_ids_are_uuids_whatever_the_id_strategy() -> None:
    by_index, by_uuid = advertised("index"), advertised("uuid")
    assert {r: list(d) for r, d in by_index.items()} == {r: list(d) for r, d in by_uuid.items()}
    gpus = {g.index: g for g in A100.gpus}
    sliced = [f"{gpus[2].uuid}::{n}" for n in (0, 1)]
    whole = [g.uuid for g in A100.gpus if not g.mig_enabled and g.index != 2]
    assert sorted(by_index["nvidia.com/gpu"]) == sorted([*whole, *sliced])
    mig_ids = {i for r, d in by_index.items() if r.startswith("nvidia.com/mig-") for i in d}
    replicas = {f"{gpus[0].migs[1].uuid}::{n}" for n in (0, 1)}
    assert (
        mig_ids == {m.uuid for g in A100.gpus for m in g.migs} - {gpus[0].migs[1].uuid} | replicas
    )
    assert all(i.startswith(("GPU-", "MIG-")) for d in by_index.values() for i in d)


@pytest.mark.parametrize("id_strategy", ["index", "uuid"])
def test_index_changes_only_what_the_container_is_told(id_strategy: str) -> None:
    devices = {i: d for resource in advertised(id_strategy).values() for i, d in resource.items()}
    mig = next(d for d in devices.values() if d.uuid.startswith("MIG-"))
    replica = next(d for d in devices.values() if d.replica == 1)
    told = {
        d.id: d.index if id_strategy == "index" else d.uuid for d in (mig, replica)
    }  # gpu:mig and the GPU's index, or the UUIDs
    names = {f"{PLUGIN_KIND}={d.uuid}" for d in (mig, replica)} | {
        f"{PLUGIN_KIND}={d.index}" for d in (mig, replica)
    }
    for device in (mig, replica):
        common = {"resource": "nvidia.com/x", "id_strategy": id_strategy, "cdi_names": names}
        envvar = allocate([device.id], devices, {}, strategies=("envvar",), **common)
        assert envvar.envs == {"NVIDIA_VISIBLE_DEVICES": told[device.id]}
        mounts = allocate([device.id], devices, {}, strategies=("volume-mounts",), **common)
        assert mounts.mounts == [
            ("/dev/null", f"/var/run/nvidia-container-devices/{told[device.id]}")
        ]
        cdi = allocate(
            [device.id], devices, {}, strategies=("cdi-annotations", "cdi-cri"), **common
        )
        assert cdi.cdi_devices == [f"{PLUGIN_KIND}={told[device.id]}"]
        assert cdi.annotations == {
            "cdi.k8s.io/nvct-device-plugin_x": f"{PLUGIN_KIND}={told[device.id]}"
        }


def test_a_spec_without_index_names_is_answered_by_uuid_and_one_with_neither_refused() -> None:
    devices = {i: d for r in advertised("index").values() for i, d in r.items()}
    mig = next(d for d in devices.values() if d.uuid.startswith("MIG-"))
    common = {"resource": "nvidia.com/x", "id_strategy": "index", "strategies": ("cdi-cri",)}
    only_uuid = allocate([mig.id], devices, {}, cdi_names={f"{PLUGIN_KIND}={mig.uuid}"}, **common)
    assert only_uuid.cdi_devices == [f"{PLUGIN_KIND}={mig.uuid}"]
    with pytest.raises(AllocationError, match="the CDI spec names no device"):
        allocate([mig.id], devices, {}, cdi_names={f"nvidia.com/gpu={mig.uuid}"}, **common)
