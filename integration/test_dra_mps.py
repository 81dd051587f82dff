"""MPS per claim: nvct-dra-plugin, the real process on the simulated driver, gives a claim
configured for MPS a control daemon of its own (the simulated driver's nvidia-cuda-mps-control,
which records every command it takes), supervised, found again by a restarted plugin, stopped
by pid at unprepare; a real podman container of the claim is its client."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.apiserver.server import APIServer
from integration.harness.apiserver import apiserver, kube_certs  # noqa: F401 - fixtures
from integration.harness.dra import (
    DRIVER,
    MPS_PID_FILE,
    allocated_claim,
    dra_node,
    gpu_config,
    mps_root,
    node_plugin,
    nvml_modes,
    put_claim,
    without_sys_admin,
)
from integration.harness.podman import CDI_DIR, podman_run
from integration.harness.processes import process_alive, until
from integration.kubelet.dra import DraKubelet
from integration.simdriver import inject

pytestmark = [pytest.mark.root]


def mps_config(**fields: Any) -> list[dict[str, Any]]:
    """A claim's config entry asking for MPS with ``fields`` (mpsConfig)."""
    return gpu_config({"strategy": "MPS", "mpsConfig": fields})


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_text().split("\0")
    return dict(e.split("=", 1) for e in raw if "=" in e)


@pytest.fixture
def node(apiserver: APIServer) -> Iterator[tuple[DraKubelet, Path]]:  # noqa: F811
    with dra_node(apiserver) as node:
        yield node


def test_an_mps_claim_gets_its_own_supervised_daemon_stopped_at_unprepare(
    tmp_path: Path,
    sim_driver: Any,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    node: tuple[DraKubelet, Path],
) -> None:
    kubelet, plugins = node
    cdi = tmp_path / "cdi"
    gpus = sim_driver.spec.gpus
    plugin = node_plugin(tmp_path / "plugin", sim_driver, apiserver, node, cdi).start()
    config = mps_config(
        defaultActiveThreadPercentage=30,
        defaultPinnedDeviceMemoryLimit="10Gi",
        defaultPerDevicePinnedMemoryLimit={"gpu-2": "20Gi"},
    )
    claim = put_claim(
        apiserver, allocated_claim("mps", {"gpus": ["gpu-1", "gpu-2"]}, config=config)
    )
    uid = claim[1]
    base = mps_root(plugins) / uid
    pipe = str(base / "pipe")

    def sets_seen() -> list[str]:
        return [
            c for p, c in inject.mps_commands(plugin.control) if p == pipe and c.startswith("set_")
        ]

    inject.set_compute_mode(plugin.control, 2, 2)  # an administrator's PROHIBITED
    try:
        assert until(lambda: kubelet.registrations >= 1, 30), plugin.output()
        answer = kubelet.prepare(DRIVER, [claim])[uid]
        assert answer.error == "", answer.error
        # the claim's GPUs in EXCLUSIVE_PROCESS before the daemon started, as NVIDIA's driver
        assert nvml_modes(sim_driver, plugin.control) == [0, 3, 3, 0]
        said = plugin.output()
        assert said.index('"compute_mode_set"') < said.index('"mps_daemon_started"')
        first = int((base / "pipe" / MPS_PID_FILE).read_text())
        assert process_alive(first)
        env = environ(first)
        assert env["CUDA_VISIBLE_DEVICES"] == f"{gpus[1].uuid},{gpus[2].uuid}"
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == pipe
        mine = [c for p, c in inject.mps_commands(plugin.control) if p == pipe]
        sets = [
            f"set_default_device_pinned_mem_limit {gpus[1].uuid} 10240M",
            f"set_default_device_pinned_mem_limit {gpus[2].uuid} 20480M",
            "set_default_active_thread_percentage 30",
        ]
        assert mine[:3] == sets, mine
        assert f"get_default_device_pinned_mem_limit {gpus[2].uuid}" in mine  # read back
        spec = json.loads((cdi / f"nvct-dra-claim-{uid}.json").read_text())
        edits = spec["containerEdits"]
        assert {
            "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M,1=20480M",
        } <= set(edits["env"])
        mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
        assert mounts["/tmp/nvidia-mps"] == pipe
        assert mounts["/dev/shm"] == str(base / "shm")
        checkpoint = json.loads((plugins / DRIVER / "checkpoint.json").read_text())
        assert checkpoint["claims"][uid]["mps"]["pid"] == first
        assert checkpoint["claims"][uid]["compute_mode"] == [
            [gpus[1].uuid, "EXCLUSIVE_PROCESS", "DEFAULT"],
            [gpus[2].uuid, "EXCLUSIVE_PROCESS", "PROHIBITED"],
        ]

        # The kubelet's retry: the same daemon, nothing set again.
        assert list(kubelet.prepare(DRIVER, [claim])[uid].devices) == list(answer.devices)
        assert int((base / "pipe" / MPS_PID_FILE).read_text()) == first
        assert len(sets_seen()) == 3

        # A dead daemon is started again, with the claim's limits.
        os.kill(first, signal.SIGKILL)

        def restarted() -> int | None:
            try:
                pid = int((base / "pipe" / MPS_PID_FILE).read_text())
            except (OSError, ValueError):
                return None
            return pid if pid != first and process_alive(pid) else None

        assert until(lambda: restarted() is not None, 10), plugin.output()
        second = restarted()
        assert until(lambda: len(sets_seen()) == 6, 5), sets_seen()

        # A crashed plugin's successor takes the daemon over (adopted: same pid, nothing set)
        # and stops it, by pid, at unprepare; the claim's directories go with it.
        ready = plugin.output().count('"mps_daemon_ready"')
        plugin.kill()
        plugin.start()
        assert until(lambda: kubelet.registrations >= 2, 30), plugin.output()
        assert until(lambda: plugin.output().count('"mps_daemon_ready"') > ready, 10)
        assert int((base / "pipe" / MPS_PID_FILE).read_text()) == second
        assert len(sets_seen()) == 6
        assert kubelet.unprepare(DRIVER, [claim])[uid].error == ""
        assert second is not None and not process_alive(second)
        assert not base.exists()
        assert nvml_modes(sim_driver, plugin.control) == [0, 0, 2, 0]  # as the claim found them
        assert [c for p, c in inject.mps_commands(plugin.control) if p == pipe][-1] == "quit"
        assert kubelet.unprepare(DRIVER, [claim])[uid].error == ""  # a retry: still done

        # Limits a GPU cannot take: one line, and no daemon left.
        big = put_claim(apiserver, allocated_claim("too-big", {"gpu": ["gpu-0"]}, config=mps_config(
            defaultPinnedDeviceMemoryLimit="1Ti")))  # fmt: skip
        refused = kubelet.prepare(DRIVER, [big])[big[1]]
        assert "pinned-memory limit 1048576Mi exceeds gpu-0's" in refused.error
        assert "\n" not in refused.error
        assert not (mps_root(plugins) / big[1]).exists()
        assert inject.compute_mode(plugin.control, 0) == 0  # refused before any mode was set
    finally:
        assert plugin.stop() == 0, plugin.output()


@pytest.mark.podman
def test_an_mps_claims_container_is_a_client_of_its_daemon(
    tmp_path: Path,
    sim_driver: Any,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    node: tuple[DraKubelet, Path],
    podman: list[str],
) -> None:
    """Podman resolves the claim's spec from /var/run/cdi: the container's MPS client (the
    driver's nvidia-cuda-mps-control, as CUDA's would) reaches the claim's daemon through the
    mounted pipe and is told the claim's limits; /dev/shm is the claim's shm directory."""
    kubelet, plugins = node
    plugin = node_plugin(tmp_path / "plugin", sim_driver, apiserver, node, CDI_DIR).start()
    uuid = sim_driver.spec.gpus[3].uuid
    config = mps_config(defaultActiveThreadPercentage=25, defaultPinnedDeviceMemoryLimit="4Gi")
    claim = put_claim(apiserver, allocated_claim("mps-pod", {"gpu": ["gpu-3"]}, config=config))
    spec = CDI_DIR / f"nvct-dra-claim-{claim[1]}.json"
    try:
        assert until(lambda: kubelet.registrations >= 1, 30), plugin.output()
        answer = kubelet.prepare(DRIVER, [claim])[claim[1]]
        assert answer.error == "", answer.error
        (mps_root(plugins) / claim[1] / "shm" / "marker").write_text("claim's shm\n")
        ids = [i for d in answer.devices for i in d.cdi_device_ids]
        script = (
            "echo env=$CUDA_MPS_PIPE_DIRECTORY,$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,"
            "$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT; cat /dev/shm/marker; "
            "printf 'get_default_active_thread_percentage\\n"
            f"get_default_device_pinned_mem_limit {uuid}\\n' | nvidia-cuda-mps-control; echo rc=$?"
        )
        result = podman_run(podman, ids, script)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.split()
        assert "env=/tmp/nvidia-mps,25,0=4096M" in lines, result.stdout
        assert "shm" in lines  # the marker: the claim's directory is the container's /dev/shm
        assert lines[-3:] == ["25.0", "4G", "rc=0"], result.stdout
        assert kubelet.unprepare(DRIVER, [claim])[claim[1]].error == ""
        assert not spec.exists()
    finally:
        assert plugin.stop() == 0, plugin.output()
        spec.unlink(missing_ok=True)


def test_without_cap_sys_admin_an_mps_claim_is_refused_naming_the_fix(
    tmp_path: Path,
    sim_driver: Any,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    node: tuple[DraKubelet, Path],
) -> None:
    """The chart's plugin drops every capability unless dra.sharing: the driver refuses the
    GPU's EXCLUSIVE_PROCESS compute mode, and on a GPU an administrator put in it already the
    daemon's mount namespace cannot be made; each time the claim says what to give the
    plugin."""
    kubelet, plugins = node
    plugin = node_plugin(
        tmp_path / "plugin", sim_driver, apiserver, node, tmp_path / "cdi", *without_sys_admin()
    ).start()
    claim = put_claim(apiserver, allocated_claim("no-cap", {"gpu": ["gpu-0"]}, config=mps_config()))
    try:
        assert until(lambda: kubelet.registrations >= 1, 30), plugin.output()
        error = kubelet.prepare(DRIVER, [claim])[claim[1]].error
        assert "-c EXCLUSIVE_PROCESS failed: Insufficient Permissions" in error, error
        assert "(fix: give nvct-dra-plugin CAP_SYS_ADMIN (the chart's dra.sharing=true)" in error
        assert "\n" not in error
        assert inject.compute_mode(plugin.control, 0) == 0
        inject.set_compute_mode(plugin.control, 0, 3)
        error = kubelet.prepare(DRIVER, [claim])[claim[1]].error
        assert "(fix: give nvct-dra-plugin CAP_SYS_ADMIN (the chart's dra.sharing=true))" in error
        assert "compute mode" not in error and "\n" not in error
        assert inject.compute_mode(plugin.control, 0) == 3  # the administrator's, left alone
        assert not (mps_root(plugins) / claim[1]).exists()
        assert not list((tmp_path / "cdi").glob("*.json"))
    finally:
        assert plugin.stop() == 0, plugin.output()


def test_a_mig_device_claim_gets_a_daemon_of_its_mig_device(
    tmp_path: Path,
    sim_driver: Any,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    node: tuple[DraKubelet, Path],
) -> None:
    """MigDeviceConfig with MPS (as NVIDIA's driver takes it): the daemon's device is the MIG
    device (its UUID), its limits within the MIG device's memory; the MIG device's GPU is put
    in EXCLUSIVE_PROCESS, kept there while another MPS claim of its MIG devices holds it and
    given back as it was after the last."""
    from integration.simdriver import cached_driver, preset

    # sim_driver: root and gcc checked; the same cache, another preset
    sim = cached_driver(preset("a100x8-570-mig"), Path("/tmp/nvct-test-simdrivers"))
    mig, other = sim.spec.gpus[0].migs[:2]
    name, second = (f"gpu-0-mig-{m.profile.replace('.', '-')}-{m.gi}-{m.ci}" for m in (mig, other))
    kubelet, plugins = node
    plugin = node_plugin(tmp_path / "plugin", sim, apiserver, node, tmp_path / "cdi").start()

    def mig_config(**fields: Any) -> list[dict[str, Any]]:
        config = gpu_config({"strategy": "MPS", "mpsConfig": fields})
        config[0]["opaque"]["parameters"]["kind"] = "MigDeviceConfig"
        return config

    config = mig_config(defaultActiveThreadPercentage=40, defaultPinnedDeviceMemoryLimit="5Gi")
    claim = put_claim(apiserver, allocated_claim("mig-mps", {"mig": [name]}, config=config))
    too_big = put_claim(apiserver, allocated_claim("mig-big", {"mig": [name]}, config=mig_config(
        defaultPinnedDeviceMemoryLimit=f"{mig.memory_mib + 1}Mi")))  # fmt: skip
    sharing = put_claim(apiserver, allocated_claim("mig-2", {"mig": [second]}, config=mig_config()))
    base = mps_root(plugins) / claim[1]
    try:
        assert until(lambda: kubelet.registrations >= 1, 30), plugin.output()
        answer = kubelet.prepare(DRIVER, [claim])[claim[1]]
        assert answer.error == "", answer.error
        pid = int((base / "pipe" / MPS_PID_FILE).read_text())
        assert environ(pid)["CUDA_VISIBLE_DEVICES"] == mig.uuid
        mine = [c for p, c in inject.mps_commands(plugin.control) if p == str(base / "pipe")]
        assert mine[:2] == [
            f"set_default_device_pinned_mem_limit {mig.uuid} 5120M",
            "set_default_active_thread_percentage 40",
        ]
        refused = kubelet.prepare(DRIVER, [too_big])[too_big[1]].error
        assert f"pinned-memory limit {mig.memory_mib + 1}Mi exceeds {name}'s" in refused
        assert inject.compute_mode(plugin.control, 0) == 3  # the MIG device's GPU's mode
        assert kubelet.prepare(DRIVER, [sharing])[sharing[1]].error == ""
        assert kubelet.unprepare(DRIVER, [claim])[claim[1]].error == ""
        assert not process_alive(pid) and not base.exists()
        assert inject.compute_mode(plugin.control, 0) == 3  # still the other claim's
        assert kubelet.unprepare(DRIVER, [sharing])[sharing[1]].error == ""
        assert inject.compute_mode(plugin.control, 0) == 0
    finally:
        assert plugin.stop() == 0, plugin.output()
