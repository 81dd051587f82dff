"""nvct-dra-plugin as a real process on the simulated driver, against the DRA kubelet stand-in
(integration/kubelet/dra.py) and the stand-in API server holding the ResourceClaims it reads;
ResourceClaims in their real ``resource.k8s.io/v1`` shape, allocated as the scheduler writes
them."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from integration.apiserver import cluster_env, service_account
from integration.apiserver.rbac import Rule
from integration.apiserver.server import RESOURCE_SLICES, APIServer
from integration.apiserver.store import Kind
from integration.harness.deviceplugin import SimProcess
from integration.harness.nvct_config import write_nvct_config
from integration.harness.slices import SLICE_WRITER
from integration.simdriver import inject

MPS_PID_FILE = "nvidia-cuda-mps-control.pid"
CLAIMS = Kind("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", namespaced=True)
DRIVER = "gpu.nvct.io"
NODE = "gpu-node-1"
PLUGIN_USER = "system:serviceaccount:nvct:nvct-dra-plugin"
# What the plugin's kubelet side reads: claims, nothing else.
CLAIM_READER = (Rule("resource.k8s.io", "resourceclaims", frozenset({"get"})),)


def allocated_claim(
    name: str,
    devices: dict[str, list[str]],
    *,
    namespace: str = "default",
    config: list[dict[str, Any]] | None = None,
    pool: str = NODE,
) -> dict[str, Any]:
    """A ResourceClaim whose requests (name -> device names) the scheduler allocated on
    ``pool``, with ``config`` as ``status.allocation.devices.config``."""
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {"name": r, "exactly": {"deviceClassName": DRIVER, "count": len(d)}}
                    for r, d in devices.items()
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": r, "driver": DRIVER, "pool": pool, "device": d}
                        for r, names in devices.items()
                        for d in names
                    ],
                    "config": config or [],
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [NODE]}
                            ]
                        }
                    ]
                },
            }
        },
    }


def put_claim(server: APIServer, claim: dict[str, Any]) -> tuple[str, str, str]:
    """Store ``claim``; (namespace, uid, name) as the kubelet names it."""
    stored = server.store.create(CLAIMS, claim["metadata"]["namespace"], claim)
    meta = stored["metadata"]
    return meta["namespace"], meta["uid"], meta["name"]


class DraPluginProcess(SimProcess):
    """``python -m nvct.dra`` (or ``program``) for the simulated driver, in-cluster against
    ``server`` with a service account that may get claims and write slices, as the chart's
    ClusterRole; ``toml``: config.toml keys
    (``section.key`` = TOML value)."""

    def __init__(
        self,
        work: Path,
        sim: Any,
        server: APIServer,
        *,
        registry_dir: Path,
        plugins_dir: Path,
        cdi_root: Path,
        program: tuple[str, ...] = (sys.executable, "-m", "nvct.dra"),
        **toml: str,
    ) -> None:
        from integration.simdriver import make_dev_nodes

        self.work = work
        self.dev_root = work / "devroot"
        if not (self.dev_root / "dev").exists():
            make_dev_nodes(sim.spec, self.dev_root)
        self.config = write_nvct_config(work / "nvct" / "config.toml", sim, **toml)
        token = f"dra-{uuid.uuid4().hex}"
        server.add_kind(RESOURCE_SLICES)
        server.auth.add(token, PLUGIN_USER, CLAIM_READER + SLICE_WRITER)
        account = service_account(work / "serviceaccount", server.certs, token, "nvct")
        self.cdi_root = cdi_root
        self.argv = [
            *program, "--config", str(self.config), "--dev-root", str(self.dev_root),
            "--sysfs-root", str(sim.sys_root), "--node-name", NODE,
            "--registry-dir", str(registry_dir), "--plugins-dir", str(plugins_dir),
            "--cdi-root", str(cdi_root), "--mps-root", str(mps_root(plugins_dir)),
        ]  # fmt: skip
        self.extra_env = {**cluster_env(server.url), "NVCT_SERVICE_ACCOUNT_DIR": str(account)}
        self.log = work / "dra-plugin.log"
        self.control = work / "nvml-control"
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: a crash, or the node's OOM killer, with nothing cleaned up."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()


def mps_root(plugins_dir: Path) -> Path:
    """The MPS claims' directories beside ``plugins_dir`` (the chart's ``/run/nvct/dra-mps``:
    short, as pipes' socket paths need)."""
    return plugins_dir.parent / "dra-mps"


def nvml_modes(sim: Any, control: Path) -> list[int]:
    """Each GPU's compute mode as NVML's nvmlDeviceGetComputeMode reports it (pynvml in a
    subprocess: the simulated NVML must not stay loaded in the test's process)."""
    code = (
        "import pynvml as n; n.nvmlInit(); print(*[n.nvmlDeviceGetComputeMode("
        "n.nvmlDeviceGetHandleByIndex(i)) for i in range(n.nvmlDeviceGetCount())])"
    )
    env = os.environ | sim.env() | {inject.ENV_CONTROL_DIR: str(control)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30,
        check=True,
    )  # fmt: skip
    return [int(v) for v in done.stdout.split()]


def claim_specs(cdi_root: Path) -> list[str]:
    """The per-claim CDI spec files in ``cdi_root``."""
    return (
        sorted(p.name for p in cdi_root.glob("nvct-dra-claim-*.json")) if cdi_root.exists() else []
    )


def gpu_config(sharing: dict[str, Any]) -> list[dict[str, Any]]:
    """A claim's config entry (every request) of a ``GpuConfig`` with ``sharing``."""
    parameters = {"apiVersion": "dra.nvct.io/v1alpha1", "kind": "GpuConfig", "sharing": sharing}
    opaque = {"driver": DRIVER, "parameters": parameters}
    return [{"source": "FromClaim", "requests": [], "opaque": opaque}]


@contextmanager
def dra_node(server: APIServer) -> Iterator[tuple[Any, Path]]:
    """The DRA kubelet stand-in watching a private plugins_registry, and the plugins directory
    beside it (short, as the kubelet's own: sockets' paths have at most 107 bytes; MPS claims'
    pipes live beside it, in ``mps_root``). Afterwards an MPS daemon a failed test left there
    is killed by its pid."""
    from integration.kubelet.dra import DraKubelet

    short = Path(tempfile.mkdtemp(prefix="dra-"))
    kubelet = DraKubelet(short / "plugins_registry").start()
    server.add_kind(CLAIMS)
    try:
        yield kubelet, short / "plugins"
    finally:
        kubelet.stop()
        for pid_file in mps_root(short / "plugins").glob(f"*/pipe/{MPS_PID_FILE}"):
            pid = int(pid_file.read_text())
            try:
                argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if argv0.endswith(b"nvidia-cuda-mps-control"):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(short, ignore_errors=True)


def node_plugin(
    work: Path, sim: Any, server: APIServer, node: tuple[Any, Path], cdi: Path, *program: str
) -> DraPluginProcess:
    """``DraPluginProcess`` for ``dra_node``'s kubelet and plugins directory (``program``: the
    command, default ``python -m nvct.dra``)."""
    kubelet, plugins = node
    return DraPluginProcess(
        work, sim, server, registry_dir=kubelet.registry_dir, plugins_dir=plugins,
        cdi_root=cdi, program=program or (sys.executable, "-m", "nvct.dra"),
    )  # fmt: skip


def without_sys_admin() -> tuple[str, ...]:
    """``python -m nvct.dra`` without CAP_SYS_ADMIN (as the chart runs it unless
    dra.sharing), through setpriv; the test is skipped where setpriv is missing."""
    import pytest

    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("no setpriv (util-linux)")
    return (setpriv, "--bounding-set=-sys_admin", sys.executable, "-m", "nvct.dra")
