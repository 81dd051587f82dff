"""nvct-dra-plugin, the real process on the simulated driver, against the DRA kubelet stand-in
(plugin watcher, NodePrepareResources/NodeUnprepareResources in v1 and v1beta1) and the stand-in
API server holding the ResourceClaims it reads: registration, per-claim CDI specs, the
kubelet's retries, bad claims refused one line each, and a restarted plugin (and kubelet)
unpreparing what the first one prepared."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.apiserver.server import APIServer
from integration.harness.apiserver import apiserver, kube_certs  # noqa: F401 - fixtures
from integration.harness.dra import (
    CLAIMS,
    DRIVER,
    DraPluginProcess,
    allocated_claim,
    claim_specs,
    put_claim,
)
from integration.harness.podman import CDI_DIR, podman_run
from integration.harness.processes import until
from integration.kubelet.dra import DraKubelet

pytestmark = [pytest.mark.root]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[DraKubelet, Path, Path]]:
    """The kubelet stand-in watching a private plugins_registry; the plugins dir beside it (a
    short directory, as the kubelet's own: sockets' paths have at most 107 bytes)."""
    short = Path(tempfile.mkdtemp(prefix="dra-"))
    kubelet = DraKubelet(short / "plugins_registry").start()
    try:
        yield kubelet, short / "plugins", tmp_path / "cdi"
    finally:
        kubelet.stop()
        shutil.rmtree(short, ignore_errors=True)


def _plugin(tmp_path: Path, sim: Any, server: APIServer, node: Any) -> DraPluginProcess:
    kubelet, plugins, cdi = node
    return DraPluginProcess(
        tmp_path / "plugin", sim, server, registry_dir=kubelet.registry_dir,
        plugins_dir=plugins, cdi_root=cdi,
    )  # fmt: skip


def _registered(kubelet: DraKubelet, plugin: DraPluginProcess, count: int) -> None:
    assert until(lambda: kubelet.registrations >= count, 30), (kubelet.refused, plugin.output())


def _claim_gets(server: APIServer) -> int:
    return sum(1 for a in server.auth.log if a.resource == "resourceclaims" and a.verb == "get")


def test_prepare_and_unprepare_survive_retries_and_restarts(
    tmp_path: Path,
    sim_driver: Any,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    node: tuple[DraKubelet, Path, Path],
) -> None:
    kubelet, plugins, cdi = node
    server = apiserver
    server.add_kind(CLAIMS)
    plugin = _plugin(tmp_path, sim_driver, server, node).start()
    try:
        _registered(kubelet, plugin, 1)
        registered = kubelet.driver(DRIVER)
        assert registered.version == "v1.DRAPlugin"
        assert set(registered.versions) == {"v1.DRAPlugin", "v1beta1.DRAPlugin"}
        assert registered.endpoint == str(plugins / DRIVER / "dra.sock")

        one = put_claim(server, allocated_claim("one-gpu", {"gpu": ["gpu-1"]}))
        answer = kubelet.prepare(DRIVER, [one])[one[1]]
        assert answer.error == ""
        [device] = answer.devices
        assert (device.pool_name, device.device_name) == ("gpu-node-1", "gpu-1")
        assert list(device.request_names) == ["gpu"]
        assert list(device.cdi_device_ids) == [f"k8s.gpu.nvct.io/claim={one[1]}-gpu-1"]
        spec = json.loads((cdi / f"nvct-dra-claim-{one[1]}.json").read_text())
        assert spec["kind"] == "k8s.gpu.nvct.io/claim"
        [entry] = spec["devices"]
        assert [n["path"] for n in entry["containerEdits"]["deviceNodes"]] == ["/dev/nvidia1"]
        assert "/dev/nvidiactl" in [n["path"] for n in spec["containerEdits"]["deviceNodes"]]

        # The kubelet's retry: the same answer, from the checkpoint (the claim is read once).
        gets = _claim_gets(server)
        again = kubelet.prepare(DRIVER, [one])[one[1]]
        assert list(again.devices) == list(answer.devices)
        assert _claim_gets(server) == gets

        # v1beta1 (a 1.32/1.33 kubelet), two requests, and refused claims in the same call.
        two = put_claim(server, allocated_claim("two", {"a": ["gpu-2"], "b": ["gpu-3"]}))
        bad = put_claim(server, allocated_claim("bad-config", {"gpu": ["gpu-0"]}, config=[
            {"source": "FromClaim", "requests": [],
             "opaque": {"driver": DRIVER, "parameters": {"apiVersion": "dra.nvct.io/v1alpha1",
                        "kind": "GpuConfig", "sharing": {"strategy": "Spatial"}}}},
        ]))  # fmt: skip
        stale = ("default", "0d6ab1c4-0000-4000-8000-000000000000", "two")
        answers = kubelet.prepare(DRIVER, [two, bad, stale], version="v1beta1.DRAPlugin")
        assert answers[two[1]].error == ""
        assert [d.device_name for d in answers[two[1]].devices] == ["gpu-2", "gpu-3"]
        assert "sharing strategy 'Spatial' is not one of TimeSlicing, MPS" in answers[bad[1]].error
        assert "\n" not in answers[bad[1]].error
        assert "deleted and created again" in answers[stale[1]].error
        assert claim_specs(cdi) == sorted(f"nvct-dra-claim-{c[1]}.json" for c in (one, two))

        # A crashed plugin and a restarted kubelet: the new plugin unprepares what the first
        # one prepared, from its checkpoint.
        plugin.kill()
        kubelet.restart()
        plugin.start()
        _registered(kubelet, plugin, 2)
        assert kubelet.unprepare(DRIVER, [one])[one[1]].error == ""
        assert kubelet.unprepare(DRIVER, [one])[one[1]].error == ""  # a retry: still done
        answer = kubelet.unprepare(DRIVER, [two, bad], version="v1beta1.DRAPlugin")
        assert {uid: a.error for uid, a in answer.items()} == {two[1]: "", bad[1]: ""}
        assert claim_specs(cdi) == []
        checkpoint = json.loads((plugins / DRIVER / "checkpoint.json").read_text())
        assert checkpoint["claims"] == {}

        # Its sockets wiped (a cleaned directory): served and registered again, by itself.
        (kubelet.registry_dir / f"{DRIVER}-reg.sock").unlink()
        (plugins / DRIVER / "dra.sock").unlink()
        _registered(kubelet, plugin, 3)
        three = put_claim(server, allocated_claim("after-wipe", {"gpu": ["gpu-0"]}))
        assert kubelet.prepare(DRIVER, [three])[three[1]].error == ""
        assert kubelet.unprepare(DRIVER, [three])[three[1]].error == ""
    finally:
        assert plugin.stop() == 0, plugin.output()
    assert not (kubelet.registry_dir / f"{DRIVER}-reg.sock").exists()


@pytest.mark.podman
def test_a_prepared_claim_runs_a_container_that_sees_exactly_its_gpus(
    tmp_path: Path,
    sim_driver: Any,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    podman: list[str],
) -> None:
    """The kubelet hands DRA's CDI ids to the engine in the CRI's CDI field only (1.31+): an
    engine with CDI runs the pod. Podman here, resolving the claim's spec from /var/run/cdi
    (podman 4.3 reads no other directory); claim UIDs make the files unique to this test."""
    short = Path(tempfile.mkdtemp(prefix="dra-"))
    kubelet = DraKubelet(short / "plugins_registry").start()
    apiserver.add_kind(CLAIMS)
    plugin = DraPluginProcess(
        tmp_path / "plugin", sim_driver, apiserver, registry_dir=kubelet.registry_dir,
        plugins_dir=short / "plugins", cdi_root=CDI_DIR,
    ).start()  # fmt: skip
    claim = put_claim(apiserver, allocated_claim("pair", {"gpus": ["gpu-1", "gpu-3"]}))
    spec = CDI_DIR / f"nvct-dra-claim-{claim[1]}.json"
    try:
        _registered(kubelet, plugin, 1)
        answer = kubelet.prepare(DRIVER, [claim])[claim[1]]
        assert answer.error == ""
        ids = [i for d in answer.devices for i in d.cdi_device_ids]
        result = podman_run(podman, ids, "nvidia-smi -L; echo ===; ls /dev")
        assert result.returncode == 0, result.stderr
        smi, devs = result.stdout.split("===")
        uuids = [
            line.split("UUID: ")[1].rstrip(")") for line in smi.splitlines() if "UUID:" in line
        ]
        assert sorted(uuids) == sorted(sim_driver.spec.gpus[i].uuid for i in (1, 3))
        gpus = sorted(d for d in devs.split() if d.startswith("nvidia") and d[6:].isdigit())
        assert gpus == ["nvidia1", "nvidia3"]

        assert kubelet.unprepare(DRIVER, [claim])[claim[1]].error == ""
        assert not spec.exists()
        after = podman_run(podman, ids, "true")
        assert after.returncode != 0  # the ids name nothing any more
    finally:
        assert plugin.stop() == 0, plugin.output()
        kubelet.stop()
        spec.unlink(missing_ok=True)
        shutil.rmtree(short, ignore_errors=True)


def _published_domains(name: str, tmp_path: Path) -> tuple[list[Any], Any]:
    """The devices the plugin makes of preset ``name`` with the topology it reads from the
    simulated NVML (a subprocess: NVML stays loaded in a process), and the preset."""
    import pickle
    import subprocess
    import sys

    from integration.harness.nvct_config import write_nvct_config
    from integration.simdriver import cached_driver, preset

    sim = cached_driver(preset(name), Path("/tmp/nvct-test-simdrivers"))
    config = write_nvct_config(tmp_path / "config.toml", sim)
    script = (
        "import pickle, sys\n"
        "from pathlib import Path\n"
        "from nvct.config import load_config\n"
        "from nvct.dra.devices import dra_devices\n"
        "from nvct.dra.setup import topology\n"
        "from nvct.host.load import load_inventory\n"
        "config = load_config(sys.argv[1], use_cache=False)\n"
        "inventory = load_inventory(config, use_cache=False)\n"
        "links = topology(config, inventory)\n"
        "devices = dra_devices(inventory, sysfs_root=Path(sys.argv[2]), nvlinks=links.nvlinks,\n"
        "                      switches=links.switches)\n"
        "sys.stdout.buffer.write(pickle.dumps([dict(d.attributes) for d in devices]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(config), str(sim.sys_root)],
        env=os.environ | sim.env(), capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    return pickle.loads(done.stdout), sim  # noqa: S301 - our own child's output


def test_nvlink_pairs_read_through_nvml_make_one_domain_per_pair(
    sim_driver: Any, tmp_path: Path
) -> None:
    """On 8 H100 PCIe bridged in pairs (0-1, 2-3, ...), what the plugin reads from the
    simulated NVML gives each pair a domain of its own: a claim's matchAttribute on
    nvlinkDomain gets a bridged pair."""
    # sim_driver: root and gcc checked; the same cache, another preset
    attributes, _ = _published_domains("h100pcie-x8-nvlink-pairs", tmp_path)
    domains = [a["nvlinkDomain"]["string"] for a in attributes]
    assert len(domains) == 8
    assert [domains[i] == domains[i ^ 1] for i in range(8)] == [True] * 8
    assert len(set(domains)) == 4
    roots = {a["resource.kubernetes.io/pcieRoot"]["string"] for a in attributes}
    assert roots == {"pci0000:00", "pci0000:01"}  # two host bridges, four GPUs each
    assert [a["numaNode"]["int"] for a in attributes] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_an_hgx_boards_gpus_reach_the_same_nvswitches_and_share_one_domain(
    sim_driver: Any, tmp_path: Path
) -> None:
    """8 H100 SXM on 4 NVSwitches: NVML names no GPU at the far end of any link, only
    switches (NvLinkRemoteDeviceType SWITCH); all eight are one NVLink domain."""
    attributes, sim = _published_domains("h100x8-nvswitch", tmp_path)
    domains = {a["nvlinkDomain"]["string"] for a in attributes}
    assert len(attributes) == 8
    assert domains == {sim.spec.gpus[0].uuid}


def test_a_driver_container_node_gets_specs_with_the_hosts_paths(
    tmp_path: Path,
    sim_driver: Any,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    node: tuple[DraKubelet, Path, Path],
) -> None:
    """``[device-plugin] host-driver-root``: the plugin sees the driver under its own mount,
    the engine under the host's path (NVIDIA's nvidiaDriverRoot); the claim's spec names the
    host's, as the device plugin's spec does."""
    kubelet, plugins, cdi = node
    apiserver.add_kind(CLAIMS)
    host = "/run/nvidia/driver"
    plugin = DraPluginProcess(
        tmp_path / "plugin", sim_driver, apiserver, registry_dir=kubelet.registry_dir,
        plugins_dir=plugins, cdi_root=cdi, **{"device-plugin.host-driver-root": f'"{host}"'},
    ).start()  # fmt: skip
    try:
        _registered(kubelet, plugin, 1)
        claim = put_claim(apiserver, allocated_claim("host-paths", {"gpu": ["gpu-0"]}))
        assert kubelet.prepare(DRIVER, [claim])[claim[1]].error == ""
        spec = json.loads((cdi / f"nvct-dra-claim-{claim[1]}.json").read_text())
        sources = [m["hostPath"] for m in spec["containerEdits"]["mounts"]]
        assert sources and all(s.startswith(f"{host}/") for s in sources), sources
        assert not [s for s in sources if s.startswith(str(sim_driver.driver_root))]
        assert kubelet.unprepare(DRIVER, [claim])[claim[1]].error == ""
    finally:
        assert plugin.stop() == 0, plugin.output()


def test_claims_are_read_in_the_version_the_api_server_serves(
    tmp_path: Path,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 1.32 control plane serves resource.k8s.io/v1beta1 only: the claim is read there (the
    fields a driver reads are the same); a claim that exists in no version is one 404 line."""
    from integration.apiserver import cluster_env, service_account
    from integration.apiserver.store import Kind
    from integration.harness.dra import CLAIM_READER
    from nvct.kubeapi.client.access import ClusterAccess
    from nvct.kubeapi.client.claims import claim_reader
    from nvct.kubeapi.client.errors import KubeApiError

    beta = Kind("resource.k8s.io", "v1beta1", "resourceclaims", "ResourceClaim", namespaced=True)
    apiserver.add_kind(beta)
    apiserver.auth.add("reader", "system:serviceaccount:nvct:nvct-dra-plugin", CLAIM_READER)
    account = service_account(tmp_path / "sa", apiserver.certs, "reader", "nvct")
    for key, value in cluster_env(apiserver.url).items():
        monkeypatch.setenv(key, value)
    stored = apiserver.store.create(beta, "default", allocated_claim("old", {"gpu": ["gpu-0"]}))
    read = claim_reader(ClusterAccess("", str(account)))
    claim = read("default", "old")
    assert claim["metadata"]["uid"] == stored["metadata"]["uid"]
    assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    assert read("default", "old")["metadata"]["name"] == "old"  # again, v1beta1 first now
    with pytest.raises(KubeApiError, match=r"ResourceClaim default/gone does not exist \(404"):
        read("default", "gone")
