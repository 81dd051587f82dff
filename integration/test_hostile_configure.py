"""``nvct-cli configure`` killed with SIGKILL at random points (issue 7, item 8): the engine's
config file is always the whole old or the whole new file, never a torn or empty one."""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path

import pytest

from integration.harness.nvct_config import NVCT_BIN

KILLS = 200


def daemon_json(keys: int) -> str:
    """A large daemon.json (unrelated keys) so that writing it takes a while."""
    data = {f"unrelated-{i}": {"value": "x" * 40, "n": i} for i in range(keys)}
    data["log-level"] = "info"
    return json.dumps(data, indent=2) + "\n"


@pytest.mark.slow
def test_configure_killed_anywhere_leaves_old_or_new_file(tmp_path: Path) -> None:
    target = tmp_path / "daemon.json"
    old = daemon_json(20_000)  # ~1.5 MB
    argv = [str(NVCT_BIN / "nvct-cli"), "configure", "--runtime", "docker"]
    argv += ["--config", str(target)]
    target.write_text(old)
    start = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True, timeout=60)
    full = time.monotonic() - start
    new = target.read_text()
    assert new != old and json.loads(new)["runtimes"]["nvidia"]["path"]
    rng = random.Random(7)  # noqa: S311 - kill timing, not secrets
    seen = {"old": 0, "new": 0}
    for _ in range(KILLS):
        target.write_text(old)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Most kills land in the last part of a run, where the file is written.
        delay = rng.uniform(0.5, 1.05) * full if rng.random() < 0.7 else rng.uniform(0, full)
        time.sleep(delay)
        proc.kill()
        proc.wait()
        text = target.read_text()
        assert text in (old, new), f"torn daemon.json after SIGKILL at {delay:.3f}s ({len(text)} B)"
        json.loads(text)
        seen["old" if text == old else "new"] += 1
    assert seen["old"] and seen["new"], seen  # kills landed both before and after the rename
