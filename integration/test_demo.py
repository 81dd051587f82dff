"""``make demo`` shows the main job: a container asking for one GPU sees exactly that one."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from integration.harness.skips import need_binary, need_busybox, need_root, require

pytestmark = [pytest.mark.runc, pytest.mark.root]


def test_the_demo_container_lists_exactly_the_gpu_it_asked_for(sim_driver) -> None:
    require(need_root(), need_binary("runc"), need_busybox())
    done = subprocess.run(
        [sys.executable, "-m", "integration.demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    listed = re.findall(r"^GPU \d+: .* \(UUID: (GPU-[0-9a-f-]+)\)$", done.stdout, re.M)
    assert listed == [sim_driver.spec.gpus[1].uuid], done.stdout
    assert "(container exited 0" in done.stdout
    assert re.search(r"^GPUs:\s+4$", done.stdout, re.M), done.stdout  # then nvct-cli info
