"""A table declared once (nvct.config.declare): its schema, loading, record and flags all come
from the one declaration, shown on a table made up here and on [device-plugin] itself."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from nvct.base.errors import ConfigError
from nvct.config import Config, config_schema, parse_config, with_settings
from nvct.config.declare import (
    declared,
    from_toml,
    key,
    recorded,
    schema_of,
    section,
    table,
    with_values,
)
from nvct.config.flags import flag_options, with_flags
from nvct.config.kubernetes import DevicePlugin, Sharing, SharingRule
from nvct.node.status import SETTINGS


@dataclass(frozen=True, kw_only=True)
class Rule:
    name: str = key(schema={"type": "string"})
    weight: int = key(1, {"type": "integer", "minimum": 1})


@dataclass(frozen=True, kw_only=True)
class Inner:
    depth: float = key(2.0, {"type": "number", "minimum": 0}, flag="How deep.")
    rules: tuple[Rule, ...] = key((), items=Rule)


@dataclass(frozen=True, kw_only=True)
class Outer:
    mode: str = key("a", {"enum": ["a", "b"]}, flag="Which mode.", recorded=True)
    tags: tuple[str, ...] = key(("x",), {"type": "array", "items": {"type": "string"}})
    inner: Inner = table(Inner)  # noqa: RUF009 - a field(default_factory=Inner)


def test_the_schema_is_the_declarations() -> None:
    schema = schema_of(Outer)
    assert schema["additionalProperties"] is False
    assert list(schema["properties"]) == ["mode", "tags", "inner"]
    assert schema["properties"]["mode"] == {"enum": ["a", "b"]}
    rules = schema["properties"]["inner"]["properties"]["rules"]
    assert rules["type"] == "array" and rules["items"]["required"] == ["name"]


def test_a_table_loads_over_the_defaults_or_a_base() -> None:
    data: dict[str, Any] = {"tags": ["p", "q"], "inner": {"rules": [{"name": "r", "weight": 3}]}}
    loaded = from_toml(Outer, data)
    assert loaded.tags == ("p", "q") and loaded.mode == "a"
    assert loaded.inner == Inner(rules=(Rule(name="r", weight=3),))
    over = from_toml(Outer, {"inner": {"depth": 5.0}}, loaded)
    assert over.inner.depth == 5.0 and over.inner.rules == loaded.inner.rules
    assert over.tags == ("p", "q")


def test_values_by_field_name_reach_nested_tables() -> None:
    changed = with_values(Outer(), {"mode": "b", "depth": 1.5})
    assert (changed.mode, changed.inner.depth) == ("b", 1.5)
    with pytest.raises(KeyError, match="nope"):
        with_values(Outer(), {"nope": 1})


def test_the_record_is_the_keys_declared_recorded() -> None:
    assert recorded(Outer(mode="b")) == {"mode": "b"}
    assert tuple(recorded(DevicePlugin())) == SETTINGS
    assert "quiet-period" in SETTINGS and "plugin-dir" not in SETTINGS


def test_config_toml_validates_against_the_declared_tables() -> None:
    props = config_schema()["properties"]["device-plugin"]["properties"]
    assert props["sharing"]["properties"]["gpus"]["items"]["required"] == ["devices", "replicas"]
    with pytest.raises(ConfigError, match=r"unknown key \[device-plugin\] 'quiet'"):
        parse_config(b"[device-plugin]\nquiet = 1\n", source="f")
    config = parse_config(
        b"[exporter]\nport = 1\n[device-plugin.sharing]\nmps-root = '/m'\n", source="f"
    )
    assert config.exporter.port == 1 and config.device_plugin.sharing.mps_root == "/m"
    assert with_settings(config, "exporter", port=2).exporter.port == 2


def test_flags_come_from_the_declarations() -> None:
    seen: list[Config] = []

    @click.command()
    @flag_options("device-plugin")
    def command(**flags: Any) -> None:
        seen.append(with_flags(Config(), "device-plugin", flags))

    runner = CliRunner()
    result = runner.invoke(
        command,
        ["--mig-strategy", "mixed", "--no-fail-on-init-error", "--quiet-period", "2",
         "--mps-root", "rel", "--device-list-strategy", "envvar, cdi-cri"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    plugin = seen[0].device_plugin
    assert (plugin.mig_strategy, plugin.fail_on_init_error, plugin.quiet_period) == (
        "mixed", False, 2.0,
    )  # fmt: skip
    assert plugin.device_list_strategy == ("envvar", "cdi-cri")
    assert plugin.sharing.mps_root.startswith("/") and plugin.sharing.mps_root.endswith("/rel")
    assert runner.invoke(command, ["--mig-strategy", "bogus"]).exit_code == 2
    assert "--ignored-xids" not in runner.invoke(command, ["--help"]).output  # no flag declared
    with pytest.raises(ConfigError, match="--device-list-strategy 'nope': use one or more of"):
        with_flags(Config(), "device-plugin", {"device_list_strategy": "nope"})


def test_tables_compare_hash_and_show_by_their_fields() -> None:
    """Table gives the declared dataclasses a dataclass's value semantics (source is not
    compared: field(compare=False))."""
    assert Config(source="a") == Config(source="b") and hash(Config(source="a")) == hash(Config())
    changed = with_settings(Config(), "device-plugin", mps_root="/m")
    assert changed != Config() and changed.device_plugin.sharing != Config().device_plugin.sharing
    assert len({Outer(), Outer(), Outer(mode="b")}) == 2
    assert repr(Outer(mode="b")).startswith("Outer(mode='b', tags=('x',), inner=Inner(depth=2.0")
    assert Outer() != Inner()


def test_a_section_is_a_frozen_keyword_only_dataclass_generating_no_methods() -> None:
    """@section makes a dataclass whose __init__, __setattr__, __eq__ and __repr__ are Table's:
    a dataclass compiles each from source at import, per table, and the hook and the shim
    import every table on each container start."""
    import dataclasses

    from nvct.config.declare import Table

    tables, seen = [Config], []
    while tables:  # every table config.toml has, nested ones and arrays of tables included
        cls = tables.pop()
        seen.append(cls)
        tables += [d.table or d.items for _, _, d in declared(cls) if d.table or d.items]
    assert {Config, Sharing, SharingRule} < set(seen) and len(seen) >= 10
    for cls in seen:
        assert dataclasses.is_dataclass(cls) and issubclass(cls, Table), cls
        generated = {"__init__", "__setattr__", "__delattr__", "__eq__", "__repr__"}
        assert generated.isdisjoint(vars(cls)), cls
    plugin = DevicePlugin(quiet_period=5.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plugin.quiet_period = 1.0  # type: ignore[misc]
    assert dataclasses.replace(plugin, mig_strategy="mixed").quiet_period == 5.0
    assert plugin.sharing == Sharing() and plugin.ignored_xids == DevicePlugin().ignored_xids
    with pytest.raises(TypeError, match="unexpected keyword arguments: quiet"):
        DevicePlugin(quiet=1.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing keyword arguments: devices, replicas"):
        SharingRule()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"derive it from nvct\.config\.declare\.Table"):
        section(Rule)


def test_the_top_level_flags_come_from_the_declarations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Config] = []

    @click.command()
    @flag_options("")
    def command(**flags: Any) -> None:
        seen.append(with_flags(Config(), "", flags))

    runner = CliRunner()
    help_text = runner.invoke(command, ["--help"]).output
    assert "--driver-root" in help_text and "--ldconfig" not in help_text  # no flag declared
    assert "--mig-strategy" not in help_text  # a table's flags are its own
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(command, ["--driver-root", "drv", "--proc-root", "/p"])
    assert result.exit_code == 0, result.output
    roots = seen[0]
    assert isinstance(roots.driver_root, Path) and roots.driver_root.is_absolute()
    assert roots.driver_root == tmp_path / "drv"  # absolute: containers mount from it
    assert (roots.proc_root, roots.dev_root) == (Path("/p"), Path("/"))
