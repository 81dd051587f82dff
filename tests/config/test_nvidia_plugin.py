"""NVIDIA's device-plugin config, flags and environment names as nvct's [device-plugin]:
what each documented shape maps to, what is named as not honoured, NVIDIA's precedence, and one
line naming the key for each invalid input."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from nvct.base.errors import ConfigError
from nvct.config import Config
from nvct.config.flags import bool_values
from nvct.config.nvidia_plugin import apply, environment, parse_plugin_config
from nvct.deviceplugin.settings import Inputs, settle

DEFAULT_XIDS = (13, 31, 43, 45, 68, 109)


def mapped(text: str) -> Config:
    return apply(Config(), parse_plugin_config(text.encode(), source="cm.yaml"))


def test_flags_map_onto_device_plugin_keys() -> None:
    config = mapped(
        """
version: v1
flags:
  migStrategy: single
  failOnInitError: false
  mpsRoot: /run/nvidia/mps
  nvidiaDriverRoot: /run/nvidia/driver
  nvidiaDevRoot: /
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: [envvar, cdi-annotations, envvar]
    deviceIDStrategy: index
    cdiAnnotationPrefix: custom.cdi.k8s.io/
    containerDriverRoot: /driver-root
"""
    )
    dp = config.device_plugin
    assert (dp.mig_strategy, dp.fail_on_init_error, dp.pass_device_specs) == ("single", False, True)
    assert dp.device_list_strategy == ("envvar", "cdi-annotations")
    assert (dp.device_id_strategy, dp.cdi_annotation_prefix) == ("index", "custom.cdi.k8s.io/")
    assert (dp.sharing.mps_root, dp.host_driver_root) == ("/run/nvidia/mps", "/run/nvidia/driver")
    assert (config.driver_root, dp.host_dev_root) == (Path("/driver-root"), "/")


def test_json_is_read_as_yaml_is() -> None:
    doc = {
        "version": "v1",
        "flags": {"migStrategy": "mixed", "plugin": {"deviceListStrategy": "envvar"}},
    }
    config = mapped(json.dumps(doc))
    assert config.device_plugin.mig_strategy == "mixed"
    assert config.device_plugin.device_list_strategy == ("envvar",)


def test_sharing_becomes_rules_selecting_the_resource() -> None:
    text = """
version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: gpu
      replicas: 4
    - name: nvidia.com/mig-1g.10gb
      replicas: 2
      rename: nvidia.com/tiny
"""
    result = parse_plugin_config(text.encode(), source="cm.yaml")
    sharing = apply(Config(), result).device_plugin.sharing
    assert sharing.rename_by_default and sharing.fail_requests_greater_than_one
    assert [(r.devices, r.strategy, r.replicas) for r in sharing.gpus] == [
        (("nvidia.com/gpu",), "time-slicing", 4),
        (("nvidia.com/mig-1g.10gb",), "time-slicing", 2),
    ]
    assert [k for k, _, _ in result.unmapped] == ["sharing.timeSlicing.resources[1].rename"]


def test_mps_wins_over_time_slicing_and_says_so() -> None:
    text = """
version: v1
sharing:
  timeSlicing:
    resources: [{name: nvidia.com/gpu, replicas: 4}]
  mps:
    resources: [{name: nvidia.com/gpu, replicas: 2}]
resources:
  gpus: [{pattern: "*", name: gpu}]
"""
    result = parse_plugin_config(text.encode(), source="cm.yaml")
    rules = apply(Config(), result).device_plugin.sharing.gpus
    assert [(r.strategy, r.replicas) for r in rules] == [("mps", 2)]
    assert sorted(k for k, _, _ in result.unmapped) == ["resources", "sharing.timeSlicing"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: v1\nflags: {migStrategy: all}\n", "flags.migStrategy"),
        ("version: v1\nflags: {failOnInitError: maybe}\n", "flags.failOnInitError"),
        ("version: v1\nflags: {nvidiaDriverRoot: run/nvidia}\n", "absolute path"),
        ("version: v1\nsharing: {timeSlicing: {resources: []}}\n", "timeSlicing.resources"),
        (
            "version: v1\nsharing: {mps: {resources: [{name: Bad_Name, replicas: 2}]}}\n",
            "sharing.mps.resources[0].name",
        ),
        (
            "version: v1\nsharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, "
            "devices: [banana]}]}}\n",
            "resources[0].devices",
        ),
        ("[not, a, mapping]\n", "(the document)"),
        ("version: v1\nflags: {migStrategy: [\n", "not YAML or JSON"),
    ],
)
def test_invalid_input_is_one_line_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        mapped(text)
    line = err.value.one_line()
    assert "\n" not in line and message in line and line.startswith("cm.yaml: ")


def test_environment_names_and_the_health_variables() -> None:
    env = {
        "MIG_STRATEGY": "mixed",
        "PASS_DEVICE_SPECS": "True",
        "NVIDIA_CTK_PATH": "/usr/bin/nvidia-ctk",
        "DEVICE_LIST_STRATEGY": "envvar,cdi-cri",
        "DP_DISABLE_HEALTHCHECKS": "48, 94,x",
        "DP_ENABLE_HEALTHCHECKS": "13",
        "KUBELET_SOCKET": "/var/lib/k/device-plugins/kubelet.sock",
        "GDS_ENABLED": "true",
        "NVIDIA_MIG_MONITOR_DEVICES": "all",
    }
    result = environment(env, ignored_xids=DEFAULT_XIDS)
    dp = apply(Config(), result).device_plugin
    assert (dp.mig_strategy, dp.pass_device_specs, dp.plugin_dir) == (
        "mixed",
        True,
        "/var/lib/k/device-plugins",
    )
    assert dp.device_list_strategy == ("envvar", "cdi-cri")
    assert dp.ignored_xids == (31, 43, 45, 68, 109, 48, 94)  # 13 enabled again
    assert {k for k, _, _ in result.unmapped} == {
        "NVIDIA_CTK_PATH",
        "DP_DISABLE_HEALTHCHECKS",  # "x"
        "GDS_ENABLED",
        "NVIDIA_MIG_MONITOR_DEVICES",
    }
    off = environment({"DP_DISABLE_HEALTHCHECKS": "all"}, ignored_xids=DEFAULT_XIDS)
    assert apply(Config(), off).device_plugin.health_checks is False
    both = environment(
        {"DP_DISABLE_HEALTHCHECKS": "xids", "DP_ENABLE_HEALTHCHECKS": "all"},
        ignored_xids=DEFAULT_XIDS,
    )
    assert apply(Config(), both).device_plugin.ignored_xids == ()
    with pytest.raises(ConfigError, match="FAIL_ON_INIT_ERROR"):
        environment({"FAIL_ON_INIT_ERROR": "yes"}, ignored_xids=())


def test_precedence_flag_over_environment_over_file_over_default(tmp_path: Path) -> None:
    (tmp_path / "nvct.toml").write_text('[device-plugin]\ndevice-id-strategy = "index"\n')
    (tmp_path / "cm.yaml").write_text(
        "version: v1\nflags:\n  migStrategy: single\n  failOnInitError: false\n"
        "  plugin: {deviceListStrategy: volume-mounts}\n"
    )
    env = {"CONFIG_FILE": str(tmp_path / "cm.yaml"), "MIG_STRATEGY": "mixed"}
    flags = {"mig_strategy": None, "device_list_strategy": "envvar"}
    settled = settle(Inputs(str(tmp_path / "nvct.toml"), env, flags))
    dp = settled.config.device_plugin
    assert dp.device_id_strategy == "index"  # nvct's file, nothing above it
    assert dp.fail_on_init_error is False  # NVIDIA's file
    assert dp.mig_strategy == "mixed"  # the environment over the file
    assert dp.device_list_strategy == ("envvar",)  # the flag over the file
    assert not settled.nvidia_chose("device-plugin.device-list-strategy")
    assert settled.nvidia_chose("device-plugin.mig-strategy")


def test_bool_flags_take_go_style_values() -> None:
    @click.command()
    @click.option("--fail-on-init-error/--no-fail-on-init-error", default=None)
    @click.option("--gds-enabled", is_flag=True, default=None)
    def command(**_: object) -> None: ...

    args = ["--fail-on-init-error=false", "--gds-enabled=false", "--x=false", "--gds-enabled=1"]
    assert bool_values(args, command) == ["--no-fail-on-init-error", "--x=false", "--gds-enabled"]
    with pytest.raises(click.BadParameter, match="--fail-on-init-error=maybe"):
        bool_values(["--fail-on-init-error=maybe"], command)
