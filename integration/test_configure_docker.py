"""nvct-cli configure --runtime docker against a real, private dockerd.

The daemon.json nvct-cli writes is the one dockerd is restarted with; ``docker info`` and a
GPU container on the simulated driver are the evidence.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from integration.harness.dockerd import DockerdFactory
from integration.harness.images import GLIBC_TAG, ImageImporter
from integration.harness.nvct_config import NVCT_BIN

pytestmark = [pytest.mark.docker, pytest.mark.root]

UNRELATED = {
    "log-level": "warn",
    "default-ulimits": {"nofile": {"Name": "nofile", "Hard": 4096, "Soft": 4096}},
    "runtimes": {"crun": {"path": "/usr/bin/crun"}},
}


def nvct_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("start", [{}, UNRELATED], ids=["fresh", "unrelated-keys"])
def test_configure_restart_run(
    dockerd_factory: DockerdFactory,
    import_glibc_image: ImageImporter,
    nvct_config: Path,
    sim_driver: Any,
    start: dict[str, Any],
) -> None:
    dockerd = dockerd_factory(start)
    import_glibc_image(dockerd)
    daemon_json = dockerd.config_file
    if not start:
        daemon_json.unlink()  # a host where daemon.json does not exist yet
    done = nvct_cli("configure", "--config", str(daemon_json), "--nvct-config", str(nvct_config))
    assert done.returncode == 0, done.stderr
    assert f"{daemon_json}: written" in done.stdout
    assert f"next: kill -HUP <pid of the dockerd started with --config-file {daemon_json}>" in (
        done.stdout
    )
    # The running daemon has not read it yet, and nvct says so.
    assert "does not list runtime 'nvidia' yet" in done.stderr
    written = json.loads(daemon_json.read_text())
    for key, value in start.items():
        if key != "runtimes":
            assert written[key] == value
    assert written["runtimes"]["nvidia"] == {
        "path": str(NVCT_BIN / "nvct-runtime"),
        "runtimeArgs": ["--nvct-config", str(nvct_config)],
    }
    if start:
        assert written["runtimes"]["crun"] == {"path": "/usr/bin/crun"}

    dockerd.restart(written)  # the harness writes this same content back before starting
    assert "nvidia" in dockerd.info()["Runtimes"]
    again = nvct_cli("configure", "--config", str(daemon_json), "--nvct-config", str(nvct_config))
    assert again.returncode == 0 and "already as wanted" in again.stdout
    assert "does not list" not in again.stderr

    result = dockerd.docker(
        "run", "--rm", "--runtime=nvidia", "--network", "none",
        "-e", "NVIDIA_VISIBLE_DEVICES=1", GLIBC_TAG, "nvidia-smi", "-L",
        check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("UUID: ") == 1
    assert f"(UUID: {sim_driver.spec.gpus[1].uuid})" in result.stdout

    undo = nvct_cli("configure", "--config", str(daemon_json), "--undo")
    assert undo.returncode == 0, undo.stderr
    remaining = json.loads(daemon_json.read_text()) if daemon_json.exists() else {}
    assert remaining == start
