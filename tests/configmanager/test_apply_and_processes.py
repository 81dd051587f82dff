"""Writing the chosen entry (atomic, only on change) and finding the plugin by name."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvct.configmanager.apply import ApplyError, apply
from nvct.configmanager.choose import EMPTY
from nvct.configmanager.processes import SignalError, find, program, send


def test_apply_copies_the_entry_and_reports_a_change_only_once(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "config.yaml"
    src.mkdir()
    (src / "a").write_text("version: v1\n")
    assert apply(src, "a", dst) is True
    assert dst.read_text() == "version: v1\n" and not dst.is_symlink()
    assert apply(src, "a", dst) is False  # same content: nothing to tell the plugin
    assert apply(src, EMPTY, dst) is True and dst.read_bytes() == b""
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_apply_replaces_a_symlink_left_by_nvidias_config_manager(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "config.yaml"
    src.mkdir()
    (src / "a").write_text("A")
    dst.symlink_to(src / "a")  # NVIDIA's links the entry; nvct's writes a file of its own
    assert apply(src, "a", dst) is True
    assert not dst.is_symlink() and dst.read_text() == "A" and (src / "a").read_text() == "A"


def test_apply_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ApplyError, match=r"cannot read config 'gone'"):
        apply(tmp_path, "gone", tmp_path / "dst")
    (tmp_path / "a").write_text("A")
    with pytest.raises(ApplyError, match=r"cannot write the config file .*/no/such/dir/c"):
        apply(tmp_path, "a", tmp_path / "no" / "such" / "dir" / "c")


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["nvidia-device-plugin"], "nvidia-device-plugin"),
        (["/usr/bin/nvct-device-plugin", "--x"], "nvct-device-plugin"),
        # a packaged nvct command: the interpreter runs the launcher script
        (["/usr/bin/python3", "-IS", "/usr/bin/nvct-device-plugin"], "nvct-device-plugin"),
        (["/opt/venv/bin/python3.11", "/opt/venv/bin/nvct-device-plugin"], "nvct-device-plugin"),
        (["/bin/sh", "-c", "x"], "x"),
        (["/usr/bin/python3"], "python3"),
    ],
)
def test_the_program_a_process_runs(argv: list[str], name: str) -> None:
    assert program(argv) == name


def test_send_signals_the_named_process_and_says_when_none_runs(tmp_path: Path) -> None:
    script = tmp_path / "plugin-under-test-7f3a"
    ready = tmp_path / "ready"
    script.write_text(
        f"#!{sys.executable}\nimport signal, sys, time\n"
        "signal.signal(signal.SIGHUP, lambda *_: sys.exit(42))\n"
        f"open({str(ready)!r}, 'w').close()\ntime.sleep(60)\n"
    )
    script.chmod(0o755)
    proc = subprocess.Popen([str(script)])
    try:
        deadline = time.monotonic() + 10
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert find(script.name) == [proc.pid]
        assert send(script.name, int(signal.SIGHUP)) == [proc.pid]
        assert proc.wait(timeout=10) == 42
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with pytest.raises(SignalError, match=r"no process named 'plugin-under-test-7f3a'"):
        send(script.name, int(signal.SIGHUP))
    assert os.getpid() not in find(Path(sys.argv[0]).name)  # never itself
