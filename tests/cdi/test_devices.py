"""CDI device names as a request (NVIDIA_VISIBLE_DEVICES, cdi.k8s.io annotations) and their
resolution through the spec directories, by the CDI rules. Unprivileged: plain files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvct.base.errors import RequestError
from nvct.cdi.specs import load_cdi_specs
from nvct.config import Config
from nvct.plan.cdi_order import cdi_order
from nvct.request.inputs import request_inputs
from nvct.request.parse import parse_request, request_from_spec

CONFIG = Config()


def write_spec(directory: Path, name: str, kind: str, devices: dict[str, dict], **edits) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    spec = {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [{"name": n, "containerEdits": e} for n, e in devices.items()],
        "containerEdits": edits,
    }
    path.write_text(json.dumps(spec))
    return path


@pytest.mark.parametrize(
    ("env", "annotations", "devices", "decision"),
    [
        ({"NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=1"}, {}, ("nvidia.com/gpu=1",), "from"),
        (
            {"NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=0,nvidia.com/gpu=GPU-a1"},
            {},
            ("nvidia.com/gpu=0", "nvidia.com/gpu=GPU-a1"),
            "from NVIDIA_VISIBLE_DEVICES",
        ),
        (
            {"NVIDIA_VISIBLE_DEVICES": "all"},
            {"cdi.k8s.io/plugin_gpu": "nvidia.com/gpu=2,example.com/nic=eth1"},
            ("nvidia.com/gpu=2", "example.com/nic=eth1"),
            "NVIDIA_VISIBLE_DEVICES ignored: CDI annotations name the devices",
        ),
        ({}, {"cdi.k8s.io/a": "nvidia.com/mig-1g.10gb=0:1"}, ("nvidia.com/mig-1g.10gb=0:1",), ""),
    ],
)
def test_cdi_names_make_a_cdi_request(env, annotations, devices, decision) -> None:
    request = parse_request(env, annotations=annotations, config=CONFIG)
    assert request.visible == "cdi" and request.wants_gpu
    assert request.devices == devices
    assert any(decision in d for d in request.decisions)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nvidia.com/gpu=0,1", "mixes CDI device names and GPU ids"),
        ("nvidia.com/gpu=", "is not a fully-qualified CDI device name"),
        ("nvidia.com/=0", "is not a fully-qualified CDI device name"),
        ("nvidia.com/gpu=0 1", "is not a fully-qualified CDI device name"),
    ],
)
def test_malformed_cdi_names_are_refused(value: str, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        parse_request({"NVIDIA_VISIBLE_DEVICES": value}, config=CONFIG)


def test_annotations_reach_the_request_and_its_cache_key() -> None:
    spec = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}
    annotated = {**spec, "annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=1", "other": "y"}}
    assert request_from_spec(annotated, CONFIG).devices == ("nvidia.com/gpu=1",)
    assert request_from_spec(spec, CONFIG).devices == ("0",)
    assert request_inputs(spec) != request_inputs(annotated)
    # other annotations change nothing
    assert request_inputs(spec) == request_inputs({**spec, "annotations": {"other": "y"}})


def test_later_directories_win_and_conflicts_are_dropped(tmp_path: Path) -> None:
    null = {"deviceNodes": [{"path": "/dev/null"}]}
    zero = {"deviceNodes": [{"path": "/dev/zero"}]}
    write_spec(tmp_path / "etc", "a.json", "nvidia.com/gpu", {"0": null, "1": null})
    write_spec(tmp_path / "run", "b.json", "nvidia.com/gpu", {"0": zero})
    write_spec(tmp_path / "run", "c.json", "example.com/x", {"k": null})
    write_spec(tmp_path / "run", "d.json", "example.com/x", {"k": zero})
    specs = load_cdi_specs([tmp_path / "etc", tmp_path / "run"])
    assert specs.devices["nvidia.com/gpu=0"].path == str(tmp_path / "run/b.json")
    assert specs.devices["nvidia.com/gpu=1"].path == str(tmp_path / "etc/a.json")
    assert "example.com/x=k" not in specs.devices
    assert any("example.com/x=k is defined by both" in p for p in specs.problems)


def test_a_broken_file_is_named_and_the_others_still_serve(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("[1, 2")
    (tmp_path / "kindless.json").write_text('{"devices": []}')
    write_spec(tmp_path, "ok.json", "nvidia.com/gpu", {"0": {"env": ["A=1"]}})
    specs = load_cdi_specs([tmp_path, tmp_path / "missing"])
    assert list(specs.devices) == ["nvidia.com/gpu=0"]
    assert len(specs.problems) == 2
    assert specs.problems[0].startswith(f"{tmp_path / 'bad.json'} is not valid JSON")
    assert specs.problems[1].startswith(f"{tmp_path / 'kindless.json'}: 'kind' must be")


def test_a_file_nested_past_the_recursion_limit_is_a_broken_file(tmp_path: Path) -> None:
    """Another vendor's spec nested ~100,000 deep (JSON) or ~10,000 (YAML): named as broken,
    like any malformed file, not a RecursionError out of every GPU create that reads the
    directory."""
    (tmp_path / "deep.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 10_000 + "]" * 10_000 + "\n")
    write_spec(tmp_path, "ok.json", "nvidia.com/gpu", {"0": {"env": ["A=1"]}})
    specs = load_cdi_specs([tmp_path])
    assert list(specs.devices) == ["nvidia.com/gpu=0"]
    assert sorted(specs.problems) == [
        f"{tmp_path / 'deep.json'} is not valid JSON (nested too deeply)",
        f"{tmp_path / 'deep.yaml'} is not valid YAML (nested too deeply)",
    ]


def test_unknown_names_list_the_known_ones(tmp_path: Path) -> None:
    write_spec(tmp_path, "ok.json", "nvidia.com/gpu", {"0": {}, "1": {}})
    specs = load_cdi_specs([tmp_path])
    with pytest.raises(RequestError, match=r"'nvidia.com/gpu=7' \(known: nvidia.com/gpu=0, "):
        specs.resolve(["nvidia.com/gpu=7"])


def test_the_order_carries_every_edit_once_per_spec(tmp_path: Path) -> None:
    """Device nodes (numbers read from the host when the spec has none), mounts, variables,
    hooks and groups; the spec's own edits come once for two of its devices."""
    hook = {"hookName": "createContainer", "path": "/bin/true", "args": ["true", "x"]}
    write_spec(
        tmp_path,
        "nvidia.json",
        "nvidia.com/gpu",
        {
            "0": {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/null"}]},
            "1": {"deviceNodes": [{"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1}]},
        },
        deviceNodes=[{"path": "/dev/nvidiactl", "hostPath": "/dev/zero"}],
        mounts=[{"hostPath": "/usr/bin/env", "containerPath": "/usr/bin/env", "options": ["ro"]}],
        env=["NVIDIA_VISIBLE_DEVICES=void"],
        hooks=[hook],
        additionalGids=[44],
    )
    order = cdi_order(["nvidia.com/gpu=0", "nvidia.com/gpu=1"], load_cdi_specs([tmp_path]), CONFIG)
    assert [d[:3] for d in order["devices"]] == [
        ("/dev/nvidiactl", 1, 5),
        ("/dev/nvidia0", 1, 3),
        ("/dev/nvidia1", 195, 1),
    ]
    assert order["mounts"] == [("/usr/bin/env", "/usr/bin/env", ["ro"])]
    assert order["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert order["hooks"] == [("createContainer", {"path": "/bin/true", "args": ["true", "x"]})]
    assert order["additional_gids"] == [44]
    assert order["cdi"] == [
        ("nvidia.com/gpu=0", str(tmp_path / "nvidia.json")),
        ("nvidia.com/gpu=1", str(tmp_path / "nvidia.json")),
    ]


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        ({"netDevices": [{"hostInterfaceName": "eth0", "name": "eth1"}]}, "netDevices"),
        ({"mounts": [{"hostPath": "t", "containerPath": "/t", "type": "tmpfs"}]}, "tmpfs"),
        ({"deviceNodes": [{"path": "/dev/missing-nvct-node"}]}, "cannot be read"),
        ({"hooks": [{"hookName": "sometime", "path": "/bin/true"}]}, "unknown hook stage"),
    ],
)
def test_edits_nvct_cannot_carry_out_are_refused(tmp_path: Path, edits, message) -> None:
    write_spec(tmp_path, "x.json", "example.com/x", {"a": edits})
    with pytest.raises(RequestError, match=message):
        cdi_order(["example.com/x=a"], load_cdi_specs([tmp_path]), CONFIG)
