"""nvct-cli as a whole process: info, list, errors, help of every subcommand; info and list
read the simulated drivers' recorded inventories (tests/inventories.py) from the cache."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvct.cli.main import SUBCOMMANDS
from tests.inventories import RecordedDriver


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=60,
    )


def roots(sim, tmp) -> list[str]:
    """Options for a simulated driver's roots (a recorded one's inventory goes to the cache)."""
    if isinstance(sim, RecordedDriver):
        sim.seed_cache(tmp / "cache")
    cfg = tmp / "config.toml"
    cfg.write_text(f"cache-dir = '{tmp / 'cache'}'\n[log]\nfile = '{tmp / 'log'}'\n")
    return [
        "--config",
        str(cfg),
        "--driver-root",
        str(sim.driver_root),
        "--dev-root",
        str(sim.dev_root),
        "--proc-root",
        str(sim.proc_root),
    ]


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_help_of_every_subcommand(name: str) -> None:
    assert "Usage:" in cli(name, "--help").stdout


def test_info_lists_gpus_and_mig(recorded_a100mig, tmp_path) -> None:
    data = json.loads(cli(*roots(recorded_a100mig, tmp_path), "info", "--json").stdout)
    assert data["driver_version"] == "570.86.15"
    assert data["cuda_version"] == "12.8"
    assert [g["uuid"] for g in data["gpus"]] == [g.uuid for g in recorded_a100mig.spec.gpus]
    assert [m["uuid"] for m in data["gpus"][0]["migs"]] == [
        m.uuid for m in recorded_a100mig.spec.gpus[0].migs
    ]
    text = cli(*roots(recorded_a100mig, tmp_path), "info").stdout
    assert "Driver version:      570.86.15" in text and "MIG 0:1" in text


def test_list_json_and_text(recorded_h100x4, tmp_path) -> None:
    data = json.loads(cli(*roots(recorded_h100x4, tmp_path), "list", "--json", "-d", "1").stdout)
    assert [d["path"] for d in data["devices"]] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia1",
    ]
    assert len(data["libraries"]) == 11
    text = cli(*roots(recorded_h100x4, tmp_path), "list", "-d", "1").stdout.splitlines()
    assert "# libraries" in text and f"{recorded_h100x4.dev_root}/dev/nvidia1" in text


def test_list_ignores_the_container_input_policies(recorded_h100x4, tmp_path) -> None:
    """``only-allocated-gpus`` voids what an image asks for, not what the operator lists."""
    args = roots(recorded_h100x4, tmp_path)
    config = Path(args[args.index("--config") + 1])
    config.write_text(config.read_text() + "[request]\nonly-allocated-gpus = true\n")
    data = json.loads(cli(*args, "list", "--json", "-d", "1").stdout)
    assert [d["path"] for d in data["devices"]][-1] == "/dev/nvidia1"


def test_unknown_device_is_one_line_and_nonzero(recorded_h100x4, tmp_path) -> None:
    result = cli(*roots(recorded_h100x4, tmp_path), "list", "-d", "9", check=False)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert (
        "unknown device '9'" in result.stderr and recorded_h100x4.spec.gpus[3].uuid in result.stderr
    )


def test_missing_driver_is_a_clear_error(tmp_path) -> None:
    result = cli("--driver-root", str(tmp_path), "--dev-root", str(tmp_path), "info", check=False)
    assert result.returncode == 1
    assert "ld.so.cache" in result.stderr and "fix:" in result.stderr


@pytest.mark.root
def test_list_is_fast_once_cached(h100x4, tmp_path) -> None:
    """Not a benchmark: a generous bound that catches an accidental rediscovery per call."""
    args = [*roots(h100x4, tmp_path), "list"]
    cli(*args)
    start = time.perf_counter()
    cli(*args)
    assert time.perf_counter() - start < 2.0
    assert len(list((tmp_path / "cache").glob("inventory-*.json"))) == 1


def test_host_changes_are_logged_as_json_lines(tmp_path) -> None:
    """configure writes one structlog JSON object per change to the configured log file."""
    log = tmp_path / "nvct.log"
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"cache-dir = '{tmp_path / 'cache'}'\n[log]\nfile = '{log}'\n")
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"log-level": "warn"}\n')
    args = [
        "--config",
        str(cfg),
        "configure",
        "--runtime",
        "docker",
        "--config",
        str(daemon),
        "--runtime-path",
        "/usr/bin/nvct-runtime",
    ]
    cli(*args)
    cli(*args)  # unchanged: nothing more to log
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["event"] for e in events] == ["engine_configured"]
    assert events[0]["file"] == str(daemon) and events[0]["level"] == "info"
    assert events[0]["component"] == "nvct-cli" and "ts" in events[0]
    assert json.loads(daemon.read_text())["runtimes"]["nvidia"]["path"] == "/usr/bin/nvct-runtime"
