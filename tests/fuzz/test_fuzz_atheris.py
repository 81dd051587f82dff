"""A 10-second smoke run of the atheris target in fuzz/ (issue 7, item 7)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TARGET = Path(__file__).resolve().parents[2] / "fuzz" / "fuzz_parsers.py"


@pytest.mark.slow
def test_atheris_smoke(tmp_path: Path) -> None:
    if importlib.util.find_spec("atheris") is None:
        pytest.skip("needs atheris: pip install atheris")
    result = subprocess.run(
        [sys.executable, str(TARGET), "-max_total_time=10", f"-artifact_prefix={tmp_path}/"],
        capture_output=True,
        text=True,
        cwd=TARGET.parent.parent,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done" in result.stderr, result.stderr[-3000:]
