"""The CI scripts name files that exist: a test moved without its line in .ci/unprivileged made
the unprivileged job fail with "file or directory not found" only in CI."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_test_file_the_unprivileged_job_runs_exists() -> None:
    script = (REPO / ".ci" / "unprivileged").read_text()
    match = re.search(r"^TESTS=\((.*)\)$", script, re.M)
    assert match is not None, "no TESTS=(...) line in .ci/unprivileged"
    files = shlex.split(match.group(1))
    assert files, "TESTS is empty"
    assert [f for f in files if not (REPO / f).is_file()] == []
