"""What a container asks for: NVIDIA's env semantics and nvct's policy."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvct.base.errors import RequestError, RequirementError
from nvct.config import CAPABILITIES, Config
from nvct.config.container import RequestRules
from nvct.request.inputs import is_privileged, request_inputs
from nvct.request.parse import parse_request, request_from_spec

CONFIG = Config()


@pytest.mark.parametrize(
    ("env", "visible", "devices"),
    [
        ({}, "void", ()),
        ({"NVIDIA_VISIBLE_DEVICES": ""}, "void", ()),
        ({"NVIDIA_VISIBLE_DEVICES": "void"}, "void", ()),
        ({"NVIDIA_VISIBLE_DEVICES": "0,void"}, "void", ()),
        ({"NVIDIA_VISIBLE_DEVICES": "none"}, "none", ()),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, "all", ()),
        ({"NVIDIA_VISIBLE_DEVICES": "0,all"}, "all", ()),
        ({"NVIDIA_VISIBLE_DEVICES": "none,0"}, "none", ()),
        ({"NVIDIA_VISIBLE_DEVICES": " 1, ,GPU-abc,1 "}, "list", ("1", "GPU-abc")),
        ({"NVIDIA_VISIBLE_DEVICES": "0:1,MIG-x"}, "list", ("0:1", "MIG-x")),
        ({"CUDA_VERSION": "12.2.0"}, "all", ()),
        ({"CUDA_VERSION": "12.2.0", "NVIDIA_REQUIRE_CUDA": "cuda>=12.2"}, "void", ()),
    ],
)
def test_visible_devices(env: dict[str, str], visible: str, devices: tuple[str, ...]) -> None:
    request = parse_request(env, config=CONFIG)
    assert (request.visible, request.devices) == (visible, devices)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, {"utility", "compute"}),
        ("", {"utility", "compute"}),
        ("all", set(CAPABILITIES)),
        ("graphics,display", {"graphics", "display"}),
        (" video , utility", {"video", "utility"}),
    ],
)
def test_capabilities(value: str | None, expected: set[str]) -> None:
    env = {"NVIDIA_VISIBLE_DEVICES": "all"}
    if value is not None:
        env["NVIDIA_DRIVER_CAPABILITIES"] = value
    assert parse_request(env, config=CONFIG).capabilities == expected


def test_legacy_image_gets_all_capabilities_and_a_cuda_requirement() -> None:
    request = parse_request({"CUDA_VERSION": "11.8.0"}, config=CONFIG)
    assert request.capabilities == set(CAPABILITIES)
    assert [(r.source, r.expression) for r in request.requirements] == [
        ("CUDA_VERSION", "cuda>=11.8")
    ]


def test_unknown_capability_is_an_error_naming_it() -> None:
    with pytest.raises(RequestError, match="'gaming'"):
        parse_request(
            {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "compute,gaming"},
            config=CONFIG,
        )


def test_requirements_collected_and_disabled() -> None:
    env = {
        "NVIDIA_VISIBLE_DEVICES": "0",
        "NVIDIA_REQUIRE_CUDA": "cuda>=12",
        "NVIDIA_REQUIRE_X": "brand=tesla",
    }
    assert len(parse_request(env, config=CONFIG).requirements) == 2
    env["NVIDIA_DISABLE_REQUIRE"] = "true"
    assert parse_request(env, config=CONFIG).requirements == ()
    del env["NVIDIA_DISABLE_REQUIRE"]
    assert (
        parse_request(env, config=Config(request=RequestRules(disable_require=True))).requirements
        == ()
    )


def test_too_many_devices_and_garbage() -> None:
    with pytest.raises(RequestError, match="10000 devices"):
        parse_request({"NVIDIA_VISIBLE_DEVICES": ",".join(["0"] * 10000)}, config=CONFIG)
    with pytest.raises(RequestError, match="non-printable"):
        parse_request({"NVIDIA_VISIBLE_DEVICES": "0\x00\x07\xff"}, config=CONFIG)


def _spec(env: list[str], caps: list[str], mounts: list[str] = ()) -> dict:
    return {
        "process": {"env": env, "capabilities": {"bounding": caps}},
        "mounts": [{"destination": m, "source": "/dev/null"} for m in mounts],
    }


def test_unprivileged_policy_and_volume_mounts() -> None:
    strict = Config(
        request=RequestRules(accept_envvar_when_unprivileged=False, accept_volume_mounts=True)
    )
    spec = _spec(["NVIDIA_VISIBLE_DEVICES=all"], ["CAP_CHOWN"])
    assert not is_privileged(spec)
    request = request_from_spec(spec, strict)
    assert request.visible == "void"
    assert "unprivileged" in request.decisions[0]
    privileged = _spec(["NVIDIA_VISIBLE_DEVICES=all"], ["CAP_SYS_ADMIN"])
    assert request_from_spec(privileged, strict).visible == "all"
    plugin = _spec(
        ["NVIDIA_VISIBLE_DEVICES=all"],
        ["CAP_CHOWN"],
        ["/var/run/nvidia-container-devices/GPU-1", "/var/run/nvidia-container-devices/2"],
    )
    request = request_from_spec(plugin, strict)
    assert (request.visible, request.devices) == ("list", ("GPU-1", "2"))
    # Mounts are ignored unless the config accepts them.
    assert request_from_spec(plugin, Config()).visible == "all"


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "NVIDIA_VISIBLE_DEVICES",
                "NVIDIA_DRIVER_CAPABILITIES",
                "NVIDIA_REQUIRE_CUDA",
                "NVIDIA_DISABLE_REQUIRE",
                "CUDA_VERSION",
            ]
        ),
        st.text(max_size=60),
    )
)
def test_fuzz_env_raises_only_nvct_errors(env: dict[str, str]) -> None:
    with contextlib.suppress(RequestError, RequirementError):
        parse_request(env, config=CONFIG)


def test_every_nvidia_input_not_acted_on_is_named_once() -> None:
    env = {
        "NVIDIA_VISIBLE_DEVICES": "0",
        "NVIDIA_REQUIRE_CUDA": "cuda>=12.0",
        "NVIDIA_REQUIRE_JETPACK": "csv-mounts=all",
        "NVIDIA_FABULOUS": "1",
        "NVIDIA_CTK_DEBUG": "true",
        "NVIDIA_BUILD_ID": "123",
        "NVIDIA_PYTORCH_VERSION": "24.05",
        "DOCKER_RESOURCE_GPU": "GPU-1",
        "CUDA_VERSION": "12.4.0",
        "PATH": "/bin",
    }
    request = parse_request(env, config=CONFIG)
    assert request.visible == "list"
    ignored = {line.split()[0]: line for line in request.ignored}
    assert set(ignored) == {
        "NVIDIA_REQUIRE_JETPACK",
        "NVIDIA_FABULOUS",
        "NVIDIA_CTK_DEBUG",
        "DOCKER_RESOURCE_GPU",
        "image",
    }
    assert "CSV mode" in ignored["NVIDIA_REQUIRE_JETPACK"]
    assert "swarm-resource" in ignored["DOCKER_RESOURCE_GPU"]
    assert ignored["image"].endswith("NVIDIA_BUILD_ID, NVIDIA_PYTORCH_VERSION")
    # Each is an explain decision too, once.
    assert all(request.decisions.count(line) == 1 for line in request.ignored)


def test_nothing_ignored_for_the_inputs_nvct_reads() -> None:
    env = {
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "compute",
        "NVIDIA_REQUIRE_CUDA": "cuda>=12.0",
        "NVIDIA_DISABLE_REQUIRE": "false",
    }
    request = parse_request(env, config=CONFIG)
    assert request.ignored == () and request.decisions == ()


def test_swarm_resource_replaces_visible_devices_when_configured() -> None:
    swarm = Config(
        request=RequestRules(swarm_resources=("DOCKER_RESOURCE_GPU", "DOCKER_RESOURCE_NVIDIA"))
    )
    env = {"DOCKER_RESOURCE_GPU": "GPU-1,GPU-2", "NVIDIA_VISIBLE_DEVICES": "all"}
    request = parse_request(env, config=swarm)
    assert (request.visible, request.devices, request.source) == (
        "list",
        ("GPU-1", "GPU-2"),
        "DOCKER_RESOURCE_GPU",
    )
    assert request.ignored == (
        "NVIDIA_VISIBLE_DEVICES ignored: DOCKER_RESOURCE_GPU (request.swarm-resource) wins",
    )
    # Without the resource in the environment, NVIDIA_VISIBLE_DEVICES is read as usual.
    assert parse_request({"NVIDIA_VISIBLE_DEVICES": "1"}, config=swarm).devices == ("1",)


def test_device_mounts_the_config_refuses_are_reported() -> None:
    plugin = _spec(
        ["NVIDIA_VISIBLE_DEVICES=all"], ["CAP_CHOWN"], ["/var/run/nvidia-container-devices/2"]
    )
    request = request_from_spec(plugin, Config())
    assert request.visible == "all"
    assert request.ignored == (
        "1 volume mount(s) under /var/run/nvidia-container-devices/ ignored: "
        "request.accept-volume-mounts is false",
    )


@pytest.mark.parametrize("guard", ["only_allocated_gpus", "accept_volume_mounts"])
def test_only_dev_null_mounts_under_the_device_dir_are_a_gpu_request(guard: str) -> None:
    """NVIDIA's rule: the device plugin mounts /dev/null there; a directory of the pod's own
    (an emptyDir at .../all) or any other file is no GPU request, and is reported."""
    config = Config(request=RequestRules(**{guard: True}))
    emptydir = "/var/lib/kubelet/pods/p/volumes/kubernetes.io~empty-dir/x"
    spec = {
        "process": {"env": [], "capabilities": {"bounding": []}},
        "mounts": [
            {"destination": "/var/run/nvidia-container-devices/all", "source": emptydir},
            {"destination": "/var/run/nvidia-container-devices/0", "source": "/etc/hostname"},
        ],
    }
    request = request_from_spec(spec, config)
    assert request.visible == "void"
    assert request.ignored == (
        "2 volume mount(s) under /var/run/nvidia-container-devices/ ignored: their source is "
        "not /dev/null (a device plugin's volume-mounts answer mounts /dev/null there)",
    )
    # The plugin's answer beside it still counts, and only it (Go's Clean: //dev/null too).
    spec["mounts"].append(
        {"destination": "/var/run/nvidia-container-devices/GPU-7", "source": "//dev/./null"}
    )
    request = request_from_spec(spec, config)
    assert (request.visible, request.devices) == ("list", ("GPU-7",))
    # The work-order cache must not take one for the other.
    spec["mounts"][-1]["source"] = emptydir
    assert request_from_spec(spec, config).visible == "void"
    dev_null = {**spec, "mounts": [{**m, "source": "/dev/null"} for m in spec["mounts"]]}
    assert request_inputs(spec) != request_inputs(dev_null)


def test_features_without_a_gpu_request_are_reported() -> None:
    request = parse_request({"NVIDIA_IMEX_CHANNELS": "0", "NVIDIA_GDS": "enabled"}, config=CONFIG)
    assert request.visible == "void"
    assert request.ignored == (
        "NVIDIA_GDS ignored: the container asks for no GPU (NVIDIA_VISIBLE_DEVICES unset or void)",
        "NVIDIA_IMEX_CHANNELS ignored: the container asks for no GPU "
        "(NVIDIA_VISIBLE_DEVICES unset or void)",
    )
    assert request.decisions == request.ignored
