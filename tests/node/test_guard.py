"""The plugin's answers against the node's leak guard: only an envvar-only answer is lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvct.base.errors import ConfigError
from nvct.config import Config
from nvct.config.container import RequestRules
from nvct.config.kubernetes import DevicePlugin
from nvct.node.guard import envvar_without_guard_pass, node_guard


@pytest.mark.parametrize(
    ("strategies", "guarded", "lost"),
    [
        (("envvar",), True, True),
        (("envvar",), False, False),
        (("envvar", "cdi-annotations"), True, False),  # the annotation passes the guard
        (("envvar", "volume-mounts"), True, False),
        (("cdi-cri",), True, False),
    ],
)
def test_only_an_envvar_only_answer_is_lost(
    strategies: tuple[str, ...], guarded: bool, lost: bool
) -> None:
    problem = envvar_without_guard_pass(strategies, guarded, "/etc/nvct/config.toml")
    assert (problem is not None) == lost


def test_the_node_guard_comes_from_runtime_config_else_the_plugins_own(tmp_path: Path) -> None:
    guarded = RequestRules(only_allocated_gpus=True)
    assert node_guard(Config(request=guarded), "/etc/nvct/config.toml") == (
        True,
        "/etc/nvct/config.toml",
    )
    node = tmp_path / "host/etc/nvct/config.toml"
    pointed = Config(request=guarded, device_plugin=DevicePlugin(runtime_config=str(node)))
    assert node_guard(pointed, "/cm/config.toml") == (False, str(node))  # nvct not there yet
    node.parent.mkdir(parents=True)
    node.write_text("[request]\nonly-allocated-gpus = true\n")
    assert node_guard(Config(device_plugin=DevicePlugin(runtime_config=str(node))), None) == (
        True,
        str(node),
    )
    node.write_text("[request]\nonly-allocated-gpus = 1\n")
    with pytest.raises(ConfigError, match=rf"^\[device-plugin\] runtime-config {node}: "):
        node_guard(Config(device_plugin=DevicePlugin(runtime_config=str(node))), None)
