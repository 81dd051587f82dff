"""The installer's node label against the stand-in API server over HTTPS, with the chart's
RBAC rules and admission policy: ``nvct-cli node-label`` (the real process, in-cluster with the
installer's token) sets and removes the label on its own Node and nothing else, re-reads and
retries when another writer overtakes it, and is refused (one line, non-zero) for another node;
node-install.sh labels the node only once nvct is installed on a GPU node, and takes the label
off when it undoes the install."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from integration.apiserver.server import NODES, APIServer
from integration.apiserver.store import Kind
from integration.harness.apiserver import apiserver, kube_certs  # noqa: F401 - fixtures
from integration.harness.nodelabel import (
    INSTALLER_USER,
    LABEL,
    NODE,
    installer_account,
    installer_env,
)
from integration.harness.nvct_config import NVCT_BIN
from integration.harness.processes import terminate, until

SCRIPT = Path(__file__).resolve().parents[1] / "deployments" / "node-install.sh"
pytest.importorskip("celpy")  # the stand-in runs the chart's admission policy with it
OWN = {"kubernetes.io/hostname": NODE, "nvidia.com/gpu.present": "true"}


def node_label(env: dict[str, str], change: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(NVCT_BIN / "nvct-cli"), "node-label", change],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def labels(server: APIServer, node: str = NODE) -> dict[str, str]:
    return dict(server.store.get(NODES, "", node)["metadata"].get("labels", {}))


def patches(server: APIServer) -> int:
    return sum(1 for a in server.auth.log if a.user == INSTALLER_USER and a.verb == "patch")


@pytest.fixture
def env(tmp_path: Path, apiserver: APIServer) -> dict[str, str]:  # noqa: F811
    apiserver.put_node(NODE, OWN)
    apiserver.put_node("gpu-node-2", {"kubernetes.io/hostname": "gpu-node-2"})
    return installer_env(apiserver, installer_account(apiserver, tmp_path / "sa"))


def test_the_label_is_set_and_removed_on_its_own_node_and_nothing_else(
    env: dict[str, str],
    apiserver: APIServer,  # noqa: F811
) -> None:
    before = apiserver.store.get(NODES, "", NODE)
    done = node_label(env, f"{LABEL}=true")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"node {NODE}: {LABEL}=true done\n"
    assert labels(apiserver) == {**OWN, LABEL: "true"}
    again = node_label(env, f"{LABEL}=true")
    assert again.returncode == 0 and "(already so)" in again.stdout
    assert patches(apiserver) == 1  # read, found so, nothing written
    gone = node_label(env, f"{LABEL}-")
    assert gone.returncode == 0, gone.stderr
    after = apiserver.store.get(NODES, "", NODE)
    assert after["metadata"]["labels"] == OWN
    assert after["spec"] == before["spec"]
    assert apiserver.auth.used_by(INSTALLER_USER) == {("get", "", "nodes"), ("patch", "", "nodes")}


def test_another_node_is_refused_in_one_line(
    env: dict[str, str],
    apiserver: APIServer,  # noqa: F811
) -> None:
    done = node_label({**env, "NODE_NAME": "gpu-node-2"}, f"{LABEL}=true")
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("nvct-cli: error: ")
    assert f"nvct-installer on node {NODE} may not change Node gpu-node-2" in line
    assert "403 Forbidden" in line and "(fix: " in line
    assert LABEL not in labels(apiserver, "gpu-node-2")


def test_another_label_is_refused_by_the_policy(
    env: dict[str, str],
    apiserver: APIServer,  # noqa: F811
) -> None:
    done = node_label(env, "nvidia.com/gpu.present-")
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert "may only set its Node's label nvct.io/runtime.ready" in line
    assert labels(apiserver) == OWN


def test_a_write_overtaken_by_another_is_read_again_and_retried(
    env: dict[str, str],
    apiserver: APIServer,  # noqa: F811
) -> None:
    """Another writer (NFD, say) changes the Node between the command's read and its patch:
    the patch's resourceVersion is stale (409 Conflict), the command reads again and writes."""
    overtaken: list[str] = []

    def another_writer(kind: Kind, _namespace: str, name: str) -> None:
        if kind is NODES and not overtaken:
            overtaken.append(name)
            apiserver.set_node_labels(name, {"feature.node.kubernetes.io/x": "1"})

    apiserver.before_write = another_writer
    done = node_label(env, f"{LABEL}=true")
    assert done.returncode == 0, done.stderr
    assert overtaken == [NODE] and patches(apiserver) == 2
    assert labels(apiserver) == {**OWN, "feature.node.kubernetes.io/x": "1", LABEL: "true"}


def test_a_bad_change_is_one_line_naming_the_fix(env: dict[str, str]) -> None:
    done = node_label(env, "nvct.io/runtime.ready")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "nvct-cli: error: label change 'nvct.io/runtime.ready' is neither KEY=VALUE nor KEY- "
        "(fix: write e.g. nvct.io/runtime.ready=true to set it, nvct.io/runtime.ready- to "
        "remove it)"
    ]


# node-install.sh with the chart's installer environment (tests/deployments' node root)
@pytest.fixture
def node_root(tmp_path: Path) -> Path:
    from tests.deployments.test_deployments import node_root as make

    return make(tmp_path)


def _installer(
    node: Path, tmp_path: Path, env: dict[str, str]
) -> tuple[dict[str, str], Callable[[str], subprocess.CompletedProcess[str]]]:
    from tests.deployments.test_deployments import installer_env as node_env
    from tests.deployments.test_deployments import packaged_image

    full = {**node_env(node, packaged_image(tmp_path / "image"), tmp_path / "restarts"), **env}

    def run(action: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), action], env=full, capture_output=True, text=True, check=False
        )

    return full, run


def test_node_install_labels_after_installing_and_unlabels_on_uninstall(
    node_root: Path,
    tmp_path: Path,
    env: dict[str, str],
    apiserver: APIServer,  # noqa: F811
) -> None:
    _, node_install = _installer(node_root, tmp_path, env)
    done = node_install("install")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (node_root / "usr/bin/nvct-runtime").exists()
    assert labels(apiserver)[LABEL] == "true"
    done = node_install("uninstall")
    assert done.returncode == 0, done.stdout + done.stderr
    assert LABEL not in labels(apiserver) and labels(apiserver) == OWN
    # a node whose GPU is gone: a label an earlier install left is taken off
    apiserver.set_node_labels(NODE, {LABEL: "true"})
    (node_root / "dev/nvidia0").unlink()
    done = node_install("install")
    assert done.returncode == 0 and "no NVIDIA GPU" in done.stdout
    assert LABEL not in labels(apiserver)


def test_node_install_run_unlabels_a_gpu_less_node_and_labels_once_a_gpu_is_there(
    node_root: Path,
    tmp_path: Path,
    env: dict[str, str],
    apiserver: APIServer,  # noqa: F811
) -> None:
    (node_root / "dev/nvidia0").unlink()
    apiserver.set_node_labels(NODE, {LABEL: "true"})  # an earlier install's, the GPU gone since
    full, _ = _installer(node_root, tmp_path, env)
    proc = subprocess.Popen(
        [str(SCRIPT), "run"],
        env={**full, "GPU_POLL": "0.1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert until(lambda: LABEL not in labels(apiserver), 30)
        time.sleep(1)
        assert proc.poll() is None and patches(apiserver) == 1  # the removal, nothing set
        assert LABEL not in labels(apiserver) and not (node_root / "usr").exists()
        (node_root / "dev/nvidia0").touch()
        assert until(lambda: labels(apiserver).get(LABEL) == "true", 30)
        assert (node_root / "usr/bin/nvct-runtime").exists()  # installed before labelled
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    finally:
        terminate(proc, timeout=5)  # type: ignore[arg-type]  # text mode
    assert proc.returncode == 0, out
    assert LABEL not in labels(apiserver) and "nvct removed from the node" in out


def test_node_install_without_api_access_says_so_once_and_installs(
    node_root: Path,
    tmp_path: Path,
    env: dict[str, str],
    apiserver: APIServer,  # noqa: F811
) -> None:
    no_token = {**env, "NVCT_SERVICE_ACCOUNT_DIR": str(tmp_path / "none")}
    _, node_install = _installer(node_root, tmp_path, no_token)
    for action in ("install", "uninstall"):
        done = node_install(action)
        assert done.returncode == 0, done.stdout + done.stderr
        said = [line for line in done.stdout.splitlines() if "no Kubernetes API access" in line]
        assert len(said) == 1, done.stdout
    assert patches(apiserver) == 0
    # labelNodes false: no label, and nothing said about it
    _, node_install = _installer(node_root, tmp_path, {"NODE_LABEL": ""})
    done = node_install("install")
    assert done.returncode == 0 and "API access" not in done.stdout
