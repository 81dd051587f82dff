"""podman's hooks.d path: nvct's OCI hook entry (``hooks/oci-nvct-hook.json``, as the
nvct-oci-hook package installs it) in a private hooks directory gives a container that asks
with ``NVIDIA_VISIBLE_DEVICES`` exactly that GPU, on both hook paths (``HOOK_PATHS``): the
Python hook, or the native hook whose work a shim daemon's worker does."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from integration.harness.podman import RUN_FLAGS, TAG
from integration.harness.shimd import HOOK_PATHS, expected_via

pytestmark = [pytest.mark.podman, pytest.mark.root]

ENTRY = Path(__file__).resolve().parents[1] / "hooks" / "oci-nvct-hook.json"


def hooks_dir(tmp_path: Path, hook: Path, config: Path) -> Path:
    """A private hooks directory holding nvct's entry, naming ``hook`` and ``config``."""
    entry = json.loads(ENTRY.read_text())
    entry["hook"]["path"] = str(hook)  # the packages' /usr/bin/nvct-hook
    entry["hook"]["env"].append(f"NVCT_CONFIG={config}")
    hooks = tmp_path / "hooks.d"
    hooks.mkdir()
    (hooks / ENTRY.name).write_text(json.dumps(entry))
    return hooks


@pytest.mark.parametrize("how", HOOK_PATHS)
def test_hooksd_entry_gives_the_asked_gpu(
    podman: list[str],
    nvct_config: Path,
    sim_driver: Any,
    hook_path: Callable[[str], Path],
    tmp_path: Path,
    how: str,
) -> None:
    hooks = hooks_dir(tmp_path, hook_path(how), nvct_config)
    result = subprocess.run(
        [
            *podman, "--hooks-dir", str(hooks), "run", "--rm", *RUN_FLAGS,
            "-e", "NVIDIA_VISIBLE_DEVICES=2", TAG, "/bin/sh", "-c", "ls /dev; nvidia-smi -L",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "nvidia2" in result.stdout.split() and "nvidia0" not in result.stdout.split()
    assert sim_driver.spec.gpus[2].uuid in result.stdout
    log = nvct_config.parent / "nvct.log"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    ran = [e["via"] for e in events if e["event"] == "container_configured"]
    assert ran[-1:] == expected_via(how)


@pytest.mark.parametrize("how", HOOK_PATHS)
def test_a_container_asking_for_no_gpu_never_reaches_nvct(
    podman: list[str],
    hook_path: Callable[[str], Path],
    tmp_path: Path,
    how: str,
) -> None:
    """The entry runs the hook for every container: one that asks for nothing starts even
    with nvct's config unreadable (the native hook ended before any of nvct's Python, the
    daemon's or its own, read it), while a GPU container is refused over that config."""
    config = tmp_path / "broken" / "config.toml"
    config.parent.mkdir()
    config.write_text("this is [not toml\n")
    hooks = hooks_dir(tmp_path, hook_path(how), config)
    run = [*podman, "--hooks-dir", str(hooks), "run", "--rm", *RUN_FLAGS]
    plain = subprocess.run(
        [*run, TAG, "/bin/sh", "-c", "echo started; ls /dev"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr
    assert "started" in plain.stdout and "nvidiactl" not in plain.stdout.split()
    gpu = subprocess.run(
        [*run, "-e", "NVIDIA_VISIBLE_DEVICES=0", TAG, "true"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert gpu.returncode != 0 and str(config) in gpu.stderr, gpu.stderr
