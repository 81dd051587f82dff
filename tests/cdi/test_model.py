"""The typed CDI spec model: every kind of edit it writes is valid by the CDI project's schema,
with the CDI field names, and an edit left None is not written."""

from __future__ import annotations

import json

from nvct.cdi import model
from tests.plan.test_cdi_spec import validate

NODE = model.DeviceNode("/dev/nvidia0", "/host/dev/nvidia0", 195, 0)


def test_every_edit_is_written_with_the_cdi_names_and_validates() -> None:
    edits = model.ContainerEdits(
        env=("A=1",),
        device_nodes=(NODE,),
        mounts=(model.Mount("/h/libcuda.so.1", "/usr/lib/libcuda.so.1", ("ro", "bind")),),
        hooks=(model.Hook("createContainer", "/bin/hook", ("hook", "-x"), ("PATH=/bin",)),),
    )
    spec = model.Spec("0.5.0", "example.com/gpu", (model.Device("0", edits),), edits).to_dict()
    validate(spec)
    assert spec["containerEdits"] == {
        "env": ["A=1"],
        "deviceNodes": [
            {"path": "/dev/nvidia0", "hostPath": "/host/dev/nvidia0", "type": "c", "major": 195,
             "minor": 0},
        ],
        "mounts": [
            {"hostPath": "/h/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1",
             "options": ["ro", "bind"]},
        ],
        "hooks": [
            {"hookName": "createContainer", "path": "/bin/hook", "args": ["hook", "-x"],
             "env": ["PATH=/bin"]},
        ],
    }  # fmt: skip
    assert spec["devices"] == [{"name": "0", "containerEdits": spec["containerEdits"]}]
    json.dumps(spec)  # plain JSON data only


def test_edits_left_none_are_not_written_and_empty_ones_are() -> None:
    device = model.Device("all", model.ContainerEdits(device_nodes=()))
    spec = model.Spec("0.5.0", "nvidia.com/imex-channel", (device,)).to_dict()
    validate(spec)
    assert "containerEdits" not in spec
    assert spec["devices"] == [{"name": "all", "containerEdits": {"deviceNodes": []}}]
