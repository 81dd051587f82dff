"""bench/chaos.py's run in CI (about 15 s): 200 Allocate calls while the kubelet stand-in
restarts 10 times, one GPU's NVML queries fail intermittently, XIDs arrive on the others and
the plugin is SIGKILLed and started again twice; then every check of the run must hold."""

from __future__ import annotations

from typing import Any

import pytest

from bench.chaos import Settings, run_chaos

pytestmark = [pytest.mark.root]


def test_a_chaos_run_leaves_every_device_right_and_no_unhealthy_allocation(
    tmp_path, sim_driver: Any
) -> None:
    results = run_chaos(tmp_path, sim_driver, Settings())
    assert results["violations"] == [], results
    assert results["allocate_calls"] == 200 and results["plugin_kills"] == 2
    assert results["allocate_answers"]["OK"] >= 50, results  # the node kept serving
    assert results["allocate_answers"]["FAILED_PRECONDITION"] >= 10, results
    assert results["allocations_checked_in_unhealthy_windows"] >= 5, results
    assert results["status_reads"] > 1000 and results["status_reads_unparsed"] == 0
    latency = results["health_event_to_list_and_watch_ms"]
    # the goal is 100 ms (README reports the bench's figure); CI machines are shared
    assert latency["n"] >= 10 and latency["p99"] < 250, latency
