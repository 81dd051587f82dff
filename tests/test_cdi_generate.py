"""``cdi generate``'s specs validate against the CDI project's own JSON schema
(tests/fixtures/cdi-schema, copied from the CDI repository), for every naming, a subset, another
kind, the management mode and a MIG host. Unprivileged: recorded inventories."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from nvct.base.errors import RequestError
from nvct.cdi.spec import build_spec, device_names
from nvct.host.arch import host_arch
from tests.conftest import sim_config

SCHEMA_DIR = Path(__file__).resolve().parent / "fixtures" / "cdi-schema"


def validate(spec: dict) -> None:
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    defs_resource = Resource.from_contents(defs, default_specification=DRAFT7)
    registry = Registry().with_resource("defs.json", defs_resource)
    jsonschema.Draft7Validator(schema, registry=registry).validate(spec)


def spec(sim, tmp: Path, **kw) -> dict:
    return build_spec(sim.inventory, sim_config(sim, tmp), host_arch(), **kw)


@pytest.mark.parametrize("strategy", ["index", "uuid", "both"])
def test_every_naming_validates(recorded_h100x4, tmp_path, strategy) -> None:
    made = spec(recorded_h100x4, tmp_path, strategy=strategy)
    validate(made)
    gpus = recorded_h100x4.spec.gpus
    names = {
        "index": [f"nvidia.com/gpu={i}" for i in range(len(gpus))],
        "uuid": [f"nvidia.com/gpu={g.uuid}" for g in gpus],
        "both": [f"nvidia.com/gpu={n}" for i, g in enumerate(gpus) for n in (str(i), g.uuid)],
    }[strategy]
    assert device_names(made) == [*names, "nvidia.com/gpu=all"]


def test_a_subset_of_devices_and_another_kind(recorded_h100x4, tmp_path) -> None:
    uuid = recorded_h100x4.spec.gpus[3].uuid
    made = spec(
        recorded_h100x4, tmp_path, strategy="both", kind="example.com/accel", device_ids=["1", uuid]
    )
    validate(made)
    assert device_names(made) == [
        "example.com/accel=1",
        f"example.com/accel={recorded_h100x4.spec.gpus[1].uuid}",
        "example.com/accel=3",
        f"example.com/accel={uuid}",
        "example.com/accel=all",
    ]
    all_nodes = [n["path"] for n in made["devices"][-1]["containerEdits"]["deviceNodes"]]
    assert all_nodes == ["/dev/nvidia1", "/dev/nvidia3"]
    with pytest.raises(RequestError, match="names no device"):
        spec(recorded_h100x4, tmp_path, device_ids=["7"])


def test_management_mode_gives_every_node_and_cap(recorded_a100mig, tmp_path) -> None:
    made = spec(recorded_a100mig, tmp_path, mode="management")
    validate(made)
    assert device_names(made) == ["nvidia.com/gpu=all"]
    paths = {n["path"] for n in made["devices"][0]["containerEdits"]["deviceNodes"]}
    gpus = recorded_a100mig.inventory.gpus
    assert {f"/dev/nvidia{g.minor}" for g in gpus} <= paths
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm"} <= paths
    caps = {c.path for g in gpus for m in g.migs for c in m.caps}
    assert caps and caps <= paths
    mounted = {m["containerPath"].rsplit("/", 1)[-1] for m in made["containerEdits"]["mounts"]}
    assert "nvidia-smi" in mounted


def test_a_mig_host_validates(recorded_a100mig, tmp_path) -> None:
    made = spec(recorded_a100mig, tmp_path, strategy="both")
    validate(made)
    assert "nvidia.com/gpu=0:1" in device_names(made)


def test_the_schema_check_can_fail() -> None:
    with pytest.raises(jsonschema.ValidationError):
        validate({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"x": 1}]})
