"""Time-slice intervals per claim: nvct-dra-plugin, the real process on the simulated driver,
sets a claim's interval on its GPUs with the driver's nvidia-smi compute-policy (which the
simulated driver keeps and reports back) and sets Default again at unprepare; a time-sliced
claim's GPUs are put in DEFAULT compute mode (nvidia-smi -c, which NVML then reports) and given
the mode they had back at unprepare; a plugin without CAP_SYS_ADMIN is refused by the driver
and says how to fix it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.apiserver.server import APIServer
from integration.harness.apiserver import apiserver, kube_certs  # noqa: F401 - fixtures
from integration.harness.dra import (
    DRIVER,
    allocated_claim,
    dra_node,
    gpu_config,
    node_plugin,
    nvml_modes,
    put_claim,
    without_sys_admin,
)
from integration.harness.processes import until
from integration.kubelet.dra import DraKubelet
from integration.simdriver import inject

pytestmark = [pytest.mark.root]


def sliced(interval: str) -> list[dict[str, Any]]:
    """A claim's config entry time-slicing its GPUs at ``interval``."""
    return gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}})


@pytest.fixture
def node(apiserver: APIServer) -> Iterator[tuple[DraKubelet, Path]]:  # noqa: F811
    with dra_node(apiserver) as node:
        yield node


def listed(sim: Any, control: Path) -> list[str]:
    """Each GPU's interval as the driver's nvidia-smi compute-policy --list reports it."""
    env = os.environ | sim.env() | {inject.ENV_CONTROL_DIR: str(control)}
    done = subprocess.run(
        [str(sim.bin_dir / "nvidia-smi"), "compute-policy", "--list"],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return [line.rpartition(" ")[2] for line in done.stdout.splitlines()]


def test_a_claims_interval_is_set_on_its_gpus_and_default_restored_at_unprepare(
    tmp_path: Path,
    sim_driver: Any,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    node: tuple[DraKubelet, Path],
) -> None:
    kubelet, plugins = node
    plugin = node_plugin(tmp_path / "plugin", sim_driver, apiserver, node, tmp_path / "cdi")
    plugin.start()
    control = plugin.control
    long = put_claim(
        apiserver, allocated_claim("long", {"g": ["gpu-1", "gpu-2"]}, config=sliced("Long"))
    )
    short = put_claim(apiserver, allocated_claim("short", {"g": ["gpu-3"]}, config=sliced("Short")))
    default = put_claim(
        apiserver, allocated_claim("default", {"g": ["gpu-0"]}, config=sliced("Default"))
    )
    # an administrator's compute modes: gpu-0 PROHIBITED, gpu-3 EXCLUSIVE_PROCESS
    inject.set_compute_mode(control, 0, 2)
    inject.set_compute_mode(control, 3, 3)
    try:
        assert until(lambda: kubelet.registrations >= 1, 30), plugin.output()
        answers = kubelet.prepare(DRIVER, [long, short, default])
        assert {uid: a.error for uid, a in answers.items()} == {
            c[1]: "" for c in (long, short, default)
        }
        assert listed(sim_driver, control) == ["Default", "Long", "Long", "Short"]
        assert not (control / "timeslice" / "0").exists()  # Default runs nothing
        checkpoint = json.loads((plugins / DRIVER / "checkpoint.json").read_text())
        uuids = [g.uuid for g in sim_driver.spec.gpus]
        assert checkpoint["claims"][long[1]]["timeslice"] == [
            [uuids[1], "Long"],
            [uuids[2], "Long"],
        ]
        assert [inject.compute_mode(control, g) for g in range(4)] == [0, 0, 0, 0]
        assert nvml_modes(sim_driver, control) == [0, 0, 0, 0]
        modes = {c[1]: checkpoint["claims"][c[1]]["compute_mode"] for c in (long, short, default)}
        assert modes == {
            long[1]: [[uuids[1], "DEFAULT", "DEFAULT"], [uuids[2], "DEFAULT", "DEFAULT"]],
            short[1]: [[uuids[3], "DEFAULT", "EXCLUSIVE_PROCESS"]],
            default[1]: [[uuids[0], "DEFAULT", "PROHIBITED"]],
        }

        # A claim that cannot be prepared after its interval was set gives the GPU back.
        mixed = sliced("Medium")
        mixed[0]["requests"] = ["a"]
        mps = gpu_config({"strategy": "MPS"})
        mps[0]["requests"] = ["b"]
        bad = put_claim(apiserver, allocated_claim(
            "mixed", {"a": ["gpu-0"], "b": ["gpu-3"]}, config=mixed + mps))  # fmt: skip
        error = kubelet.prepare(DRIVER, [bad])[bad[1]].error
        assert "1 MPS config(s) and 1 device(s) without MPS" in error
        assert inject.timeslice(control, 0) == 0

        # A reboot: the driver forgot the interval, /var/run/cdi is empty; the kubelet's
        # prepare (from the checkpoint) sets it again with the spec.
        inject.reset(control)
        (tmp_path / "cdi" / f"nvct-dra-claim-{long[1]}.json").unlink()
        assert kubelet.prepare(DRIVER, [long])[long[1]].error == ""
        assert listed(sim_driver, control) == ["Default", "Long", "Long", "Default"]

        # A crashed plugin's successor sets Default back from its checkpoint.
        plugin.kill()
        plugin.start()
        assert until(lambda: kubelet.registrations >= 2, 30), plugin.output()
        assert kubelet.unprepare(DRIVER, [long])[long[1]].error == ""
        assert listed(sim_driver, control) == ["Default", "Default", "Default", "Default"]
        assert kubelet.unprepare(DRIVER, [short, default])[short[1]].error == ""
        assert [inject.timeslice(control, g) for g in range(4)] == [0, 0, 0, 0]
        # the compute modes the claims found, from the checkpoint (by the successor)
        assert nvml_modes(sim_driver, control) == [2, 0, 0, 3]
    finally:
        assert plugin.stop() == 0, plugin.output()


def test_without_cap_sys_admin_the_driver_refuses_and_the_claim_says_the_fix(
    tmp_path: Path,
    sim_driver: Any,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    node: tuple[DraKubelet, Path],
) -> None:
    kubelet, _ = node
    plugin = node_plugin(
        tmp_path / "plugin", sim_driver, apiserver, node, tmp_path / "cdi", *without_sys_admin()
    ).start()
    claim = put_claim(
        apiserver, allocated_claim("medium", {"g": ["gpu-2"]}, config=sliced("Medium"))
    )
    try:
        assert until(lambda: kubelet.registrations >= 1, 30), plugin.output()
        error = kubelet.prepare(DRIVER, [claim])[claim[1]].error
        assert "--set-timeslice 2 failed: Insufficient Permissions" in error, error
        assert "(fix: give nvct-dra-plugin CAP_SYS_ADMIN (the chart's dra.sharing=true)" in error
        assert "\n" not in error
        assert inject.timeslice(plugin.control, 2) == 0
        assert not list((tmp_path / "cdi").glob("*.json"))
    finally:
        assert plugin.stop() == 0, plugin.output()
