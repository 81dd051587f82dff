"""``nvct-cli device-plugin-health``: the latched GPUs, and ``clear``, which the running plugin
picks up from the latch file (tests/deviceplugin/test_health.py covers the plugin's side)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvct.cli.main import main
from nvct.node.health.latches import LatchFile
from nvct.node.health.policy import RESET, SERVICE


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    path = tmp_path / "proc/sys/kernel/random/boot_id"
    path.parent.mkdir(parents=True)
    path.write_text("boot-now\n")
    return tmp_path / "proc"


def run(proc: Path, plugin_dir: Path, *args: str) -> int:
    return main(
        ["--proc-root", str(proc), "device-plugin-health", "--plugin-dir", str(plugin_dir), *args]
    )


def test_list_and_clear(tmp_path: Path, proc: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugins = tmp_path / "plugins"
    assert run(proc, plugins) == 0
    assert capsys.readouterr().out == "no GPU is latched\n"
    LatchFile(plugins, "boot-now").add("GPU-a", "XID 48 (…): reset the GPU", RESET)
    LatchFile(plugins, "boot-before").add("GPU-old", "XID 79 (…): reboot the node", RESET)
    LatchFile(plugins, "boot-before").add("GPU-rma", "row remapping failed", SERVICE)
    assert run(proc, plugins) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == ["GPU-a", "GPU-rma"]  # GPU-old: rebooted
    assert "reset the GPU" in listed[0] and "service" in listed[1]
    assert run(proc, plugins, "clear", "GPU-a", "GPU-rma") == 0
    assert capsys.readouterr().out.splitlines() == [
        "cleared GPU-a (XID 48 (…): reset the GPU)",
        "cleared GPU-rma (row remapping failed)",
    ]
    assert LatchFile(plugins, "boot-now").accepted() == {"GPU-rma"}


def test_clearing_what_is_not_latched_is_one_line(
    tmp_path: Path, proc: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(proc, tmp_path, "clear", "GPU-nope") == 1
    err = capsys.readouterr().err
    assert err.startswith("nvct-cli: error: not latched: GPU-nope") and err.count("\n") == 1
    (tmp_path / "nvct-health").mkdir()
    bad = [
        "{broken",
        '{"latched": []}',
        '{"latched": {"GPU-a": {"reason": "x", "hold": "reset", "boot_id": "b", "since": "now"}}}',
        '{"latched": {"GPU-a": {"reason": "x", "hold": "forever", "boot_id": "b", "since": 1}}}',
        '{"latched": {}, "accepted": [1]}',
    ]
    for text in bad:
        (tmp_path / "nvct-health/latched.json").write_text(text)
        assert run(proc, tmp_path) == 1, text
        err = capsys.readouterr().err
        assert "latched.json" in err and "remove it" in err and err.count("\n") == 1, err
