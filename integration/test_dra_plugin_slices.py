"""nvct-dra-plugin, the real process on the simulated driver, publishing its node's
ResourceSlice to the stand-in API server: every GPU of the node in it when it starts, an XID
tainting its device within a second, and the slice left in place when the plugin exits (the
kubelet wipes it, after its delay); a plugin whose account may not write slices says so in one
line and still serves the kubelet."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.apiserver.server import APIServer
from integration.harness.apiserver import apiserver, kube_certs  # noqa: F401 - fixtures
from integration.harness.dra import CLAIMS, PLUGIN_USER, DraPluginProcess
from integration.harness.processes import until
from integration.harness.slices import published
from integration.kubelet.dra import DraKubelet
from integration.simdriver import inject

pytestmark = [pytest.mark.root]


@contextlib.contextmanager
def node(
    tmp_path: Path, sim: Any, server: APIServer
) -> Iterator[tuple[DraPluginProcess, DraKubelet]]:
    """The kubelet stand-in and a plugin (not started) for it, its quiet period 1 s; both
    stopped after."""
    short = Path(tempfile.mkdtemp(prefix="dra-"))  # sockets' paths: at most 107 bytes
    kubelet = DraKubelet(short / "plugins_registry").start()
    server.add_kind(CLAIMS)
    process = DraPluginProcess(
        tmp_path / "plugin", sim, server, registry_dir=kubelet.registry_dir,
        plugins_dir=short / "plugins", cdi_root=tmp_path / "cdi",
        **{"device-plugin.quiet-period": "1"},
    )  # fmt: skip
    try:
        yield process, kubelet
    finally:
        if process.proc is not None:
            process.stop()
        kubelet.stop()
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
def plugin(
    tmp_path: Path,
    sim_driver: Any,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
) -> Iterator[DraPluginProcess]:
    with node(tmp_path, sim_driver, apiserver) as (process, _kubelet):
        process.start()
        yield process


def devices(server: APIServer) -> dict[str, list[str]]:
    return {
        d["name"]: [t["value"] for t in d.get("taints", ())]
        for s in published(server)
        for d in s["spec"]["devices"]
    }


def test_the_node_s_gpus_are_published_tainted_on_an_xid_and_kept_on_exit(
    plugin: DraPluginProcess,
    apiserver: APIServer,  # noqa: F811
    sim_driver: Any,
) -> None:
    gpus = {f"gpu-{g.minor}" for g in sim_driver.spec.gpus}
    assert until(lambda: set(devices(apiserver)) == gpus, 30), plugin.output()
    (only,) = published(apiserver)
    assert only["spec"]["nodeName"] == "gpu-node-1" and only["spec"]["driver"] == "gpu.nvct.io"
    time.sleep(0.5)  # the health feed's first look
    start = time.monotonic()
    inject.xid(plugin.control, sim_driver.spec.gpus[1].minor, 94)
    assert until(lambda: devices(apiserver)["gpu-1"] == ["xid-94"], 1.0), plugin.output()
    assert time.monotonic() - start < 1.0
    assert plugin.stop() == 0
    assert set(devices(apiserver)) == gpus  # not deleted on a plain exit
    used = apiserver.auth.used_by(PLUGIN_USER)
    assert ("delete", "resource.k8s.io", "resourceslices") not in used


def test_a_lost_gpu_is_tainted_within_a_second_and_held_until_reset(
    plugin: DraPluginProcess,
    apiserver: APIServer,  # noqa: F811
    sim_driver: Any,
) -> None:
    assert until(lambda: len(devices(apiserver)) == len(sim_driver.spec.gpus), 30)
    time.sleep(0.5)
    start = time.monotonic()
    inject.lose(plugin.control, sim_driver.spec.gpus[2].minor)
    assert until(lambda: devices(apiserver)["gpu-2"] != [], 1.0), plugin.output()
    assert time.monotonic() - start < 1.0
    # the driver's XID 79 comes with it: the policy holds the GPU until it was reset, as the
    # device plugin does, even once it answers again and the quiet period is over (the taint
    # names the last reason said)
    inject.recover(plugin.control, sim_driver.spec.gpus[2].minor)
    time.sleep(1.5)  # it answers again, and the quiet period (1 s here) is over
    assert devices(apiserver)["gpu-2"] in (["gpu-lost"], ["xid-79"]), plugin.output()[-2000:]
    assert devices(apiserver)["gpu-0"] == []


def test_without_the_rules_for_slices_it_says_so_and_still_serves(
    tmp_path: Path,
    sim_driver: Any,
    apiserver: APIServer,  # noqa: F811
) -> None:
    with node(tmp_path, sim_driver, apiserver) as (process, kubelet):
        ((token, (user, rules)),) = apiserver.auth.tokens.items()
        kept = tuple(r for r in rules if r.resource != "resourceslices")
        apiserver.auth.tokens[token] = (user, kept)
        process.start()
        line = "nvct-dra-plugin: error: ResourceSlices not published:"
        assert until(lambda: line in process.output(), 30), process.output()
        assert "403" in process.output() or "forbidden" in process.output()
        assert until(lambda: kubelet.registrations >= 1, 30)  # the kubelet side goes on
        assert published(apiserver) == []
