"""NVIDIA config-manager's rules for which ConfigMap entry a node gets
(cmd/config-manager/main.go updateConfigName), case by case."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvct.configmanager.__main__ import nvidia_bool_flags
from nvct.configmanager.choose import EMPTY, SelectError, check_fallbacks, choose, entries

ALL = ["a100", "default", "h100"]


@pytest.mark.parametrize(
    ("label", "available", "default", "fallbacks", "expected"),
    [
        ("h100", ALL, "a100", ("empty",), "h100"),  # a set label wins over everything
        ("", ALL, "a100", ("named",), "a100"),  # then an explicit default
        ("", ALL, "", ("named", "single"), "default"),  # then "named": the entry "default"
        ("", ["only"], "", ("named", "single"), "only"),  # "single": the only entry
        ("", ["x", "y"], "", ("single", "empty"), EMPTY),  # "empty": the plugin's defaults
        ("", ["x", "default"], "", ("single", "named"), "default"),  # in the order given
    ],
)
def test_nvidias_order_label_default_fallbacks(
    label: str, available: list[str], default: str, fallbacks: tuple[str, ...], expected: str
) -> None:
    assert choose(label, available, default, fallbacks) == expected


@pytest.mark.parametrize(
    ("label", "available", "default", "fallbacks", "says"),
    [
        ("v100", ALL, "", (), "the node label names config 'v100'"),
        ("", ALL, "v100", (), "the default config 'v100' is not in the ConfigMap"),
        ("", ["x", "y"], "", ("named", "single"), "every fallback failed"),
        ("", ["x", "y"], "", (), "strategies: none"),
        ("", [], "", ("empty",), "holds no configuration"),
    ],
)
def test_no_entry_is_one_line_with_its_fix(
    label: str, available: list[str], default: str, fallbacks: tuple[str, ...], says: str
) -> None:
    with pytest.raises(SelectError) as raised:
        choose(label, available, default, fallbacks)
    line = raised.value.one_line()
    assert says in line and "(fix: " in line and "\n" not in line


def test_an_unknown_fallback_is_refused_by_name() -> None:
    check_fallbacks(("named", "single", "empty"))
    with pytest.raises(SelectError, match="unknown fallback strategy 'first'"):
        check_fallbacks(("named", "first"))


def test_entries_are_the_configmap_keys_not_the_kubelets_bookkeeping(tmp_path: Path) -> None:
    # what a ConfigMap volume looks like: ..<timestamp>/ with the files, ..data -> it, and one
    # symlink per key into ..data
    stamp = tmp_path / "..2026_01_01_00_00_00.1"
    stamp.mkdir()
    for key in ("default", "ts4"):
        (stamp / key).write_text(key)
    (tmp_path / "..data").symlink_to(stamp.name)
    for key in ("default", "ts4"):
        (tmp_path / key).symlink_to(f"..data/{key}")
    (tmp_path / "subdir").mkdir()
    assert entries(tmp_path) == ["default", "ts4"]


def test_an_unreadable_directory_names_it(tmp_path: Path) -> None:
    with pytest.raises(SelectError, match=r"cannot read the config directory .*/absent"):
        entries(tmp_path / "absent")


@pytest.mark.parametrize(
    ("args", "clicks"),
    [
        (["--oneshot"], ["--oneshot"]),
        (["--oneshot=false", "--send-signal=true"], ["--no-oneshot", "--send-signal"]),
        (["--send-signal=0", "--node-name=a=b"], ["--no-send-signal", "--node-name=a=b"]),
    ],
)
def test_nvidias_boolean_flags_with_a_value(args: list[str], clicks: list[str]) -> None:
    assert nvidia_bool_flags(args) == clicks
