"""nvct-cli configure --runtime containerd, checked by the real containerd's ``config dump``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from integration.harness.skips import need_binary, require
from nvct.engines.containerd import dump_config, effective_handler
from tests.engines.test_configure_containerd import DEBIAN_DEFAULT

SYSTEMD = """# hand-written
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "example.com/pause:9"  # pinned
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
"""

RUNTIME = "/opt/nvct/bin/nvct-runtime"


def dump(path: Path) -> str:
    done = subprocess.run(
        ["containerd", "--config", str(path), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout


@pytest.mark.parametrize(
    "start", [None, DEBIAN_DEFAULT, SYSTEMD], ids=["missing", "debian", "systemd"]
)
def test_config_dump_shows_the_handler(tmp_path: Path, start: str | None) -> None:
    require(need_binary("containerd"))
    path = tmp_path / "config.toml"
    if start is not None:
        path.write_text(start)
    args = [
        "configure",
        "--runtime",
        "containerd",
        "--config",
        str(path),
        "--runtime-path",
        RUNTIME,
    ]
    done = subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", *args, "--set-as-default"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "next: systemctl restart containerd" in done.stdout
    assert "config dump` does not show" not in done.stderr
    if start is not None:
        assert path.read_text().startswith(start)  # comments and layout untouched

    effective = dump(path)
    nvidia = effective_handler(effective, "nvidia")
    assert nvidia is not None
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == RUNTIME
    runc = effective_handler(effective, "runc")
    assert runc is not None and runc["runtime_type"] == "io.containerd.runc.v2"  # kept alive
    assert 'default_runtime_name = "nvidia"' in effective
    if start == SYSTEMD:
        assert nvidia["options"]["SystemdCgroup"] is True
        assert 'sandbox_image = "example.com/pause:9"' in effective

    undo = subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", *args, "--undo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert undo.returncode == 0, undo.stderr
    if start is None:
        assert not path.exists()
    else:
        assert path.read_text() == start
        assert effective_handler(dump(path), "nvidia") is None


def test_validation_uses_the_real_containerd(tmp_path: Path) -> None:
    require(need_binary("containerd"))
    verdict = dump_config(SYSTEMD, tmp_path)
    assert verdict is not None and verdict[0] == 0
    verdict = dump_config("version = 2\n[plugins.x]\n[plugins.x]\n", tmp_path)
    assert verdict is not None and verdict[0] != 0
