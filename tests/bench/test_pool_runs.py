"""Pooling several goal runs (bench.pool_runs) and moving native entries aside (bench.bench)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import pool_runs
from bench.bench import entries_aside


def _run(path: Path, ratio: float, rounds: int, podman: bool = False) -> Path:
    runc = [200.0 + i % 5 for i in range(rounds)]
    samples = {"runc": runc, "1 GPU": [x * ratio for x in runc]}
    if podman:
        samples |= {"podman": runc, "podman hooks.d, 1 GPU": [x * ratio for x in runc]}
    path.write_text(json.dumps({"date": "d", "rounds": rounds, "install_paths": {
        "venv": {"samples": samples}, "wheel": {"samples": samples}}}))  # fmt: skip
    return path


def test_the_rounds_of_every_run_and_install_are_pooled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _run(tmp_path / "a.json", 1.04, 10)
    second = _run(tmp_path / "b.json", 1.06, 30, podman=True)
    out = tmp_path / "pooled.json"
    assert pool_runs.main([str(first), str(second), "--output", str(out)]) == 0
    goals = json.loads(out.read_text())["goals"]
    assert goals["1 GPU"]["rounds"] == 80  # 2 installs of 10 and of 30 rounds
    assert goals["1 GPU"]["verdict"] == "not met"  # 60 of the 80 rounds read 1.06
    assert goals["podman hooks.d, 1 GPU"]["rounds"] == 60  # only the run that measured it
    assert "--gpus device=0" not in goals  # measured by neither
    assert "1 GPU  " in capsys.readouterr().out


def test_a_file_that_is_no_goal_run_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.json"
    other.write_text("{}")
    assert pool_runs.main([str(other)]) == 1
    assert capsys.readouterr().err == (
        f"bench.pool_runs: {other} is not a bench.gpus_goal results file\n"
    )


def test_entries_aside_hides_them_for_one_start_and_drops_what_it_wrote(tmp_path: Path) -> None:
    entries = tmp_path / "native"
    entries.mkdir()
    (entries / "kept").write_text("an entry")
    with entries_aside(entries):
        assert not entries.exists()  # the start finds none
        entries.mkdir()
        (entries / "new").write_text("what the start wrote")
    assert sorted(p.name for p in entries.iterdir()) == ["kept"]
    with entries_aside(None):
        assert (entries / "kept").exists()
