"""nvct-dra-plugin's command line: what it needs before it touches the node."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_without_a_node_name_it_exits_2_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nvct.dra", "--config", str(tmp_path / "none.toml")],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "nvct-dra-plugin: error: no node name (fix: set NODE_NAME from the pod's spec.nodeName, "
        "or --node-name)"
    ]


def test_a_missing_config_named_on_the_command_line_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nvct.dra", "--config", str(tmp_path / "none.toml"),
         "--node-name", "n1", "--plugins-dir", str(tmp_path / "p")],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(
        f"nvct-dra-plugin: error: config file {tmp_path / 'none.toml'} does not exist"
    )
