"""The labeller's NodeFeature output (``nvct.kubeapi.client.nodefeature``) against the stand-in
API server over HTTPS, serving NFD's NodeFeature kind and checking each write against NFD's
published CRD schema: GFD's object (name, namespace, node label, ``spec.labels``), written only
when the labels changed, a vanished label gone, a 409 retried, and the refusals (403, no CRD)
as one line naming the fix. Then ``nvct-cli labels --use-node-feature-api`` as a process on the
simulated driver, as the chart's labeller runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.apiserver import cluster_env, service_account
from integration.apiserver.crds import NODE_FEATURES, WRITER, problems, validating
from integration.apiserver.server import APIServer
from integration.apiserver.store import Kind, NotFound
from integration.harness.apiserver import (
    apiserver,  # noqa: F401 - fixture
    kube_certs,  # noqa: F401 - fixture
)
from integration.harness.nvct_config import NVCT_BIN
from integration.harness.processes import terminate, until
from nvct.kubeapi.client.access import ClusterAccess
from nvct.kubeapi.client.errors import KubeApiError
from nvct.kubeapi.client.nodefeature import NodeFeatureWriter, node_feature
from tests.cli.test_cli import roots

NODE, NAMESPACE = "gpu-node-1", "nvct-system"
OBJECT = f"nvidia-features-for-{NODE}"
USER = "system:serviceaccount:nvct-system:nvct-labeller"
N = "nvidia.com/"
LABELS = {f"{N}gpu.present": "true", f"{N}gpu.count": "4", f"{N}gfd.timestamp": "1700000000"}


def serve_node_features(server: APIServer) -> None:
    """``server`` as a cluster with NFD's CRD installed."""
    server.add_kind(NODE_FEATURES)
    server.defaults.append(validating(NODE_FEATURES))


@pytest.fixture
def account(
    tmp_path: Path,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    for name, value in cluster_env(apiserver.url).items():
        monkeypatch.setenv(name, value)
    apiserver.auth.add("labeller-token", USER, WRITER)
    return service_account(tmp_path / "sa", apiserver.certs, "labeller-token", NAMESPACE)


def writer(account: Path) -> NodeFeatureWriter:
    access = ClusterAccess(service_account_dir=str(account))
    client = access.connect()
    return NodeFeatureWriter(
        client, NODE, client.namespace, server=access.server(), token_file=access.token_file
    )


def stored(server: APIServer) -> dict[str, Any]:
    return server.store.get(NODE_FEATURES, NAMESPACE, OBJECT)


def writes(server: APIServer) -> list[str]:
    return [a.verb for a in server.auth.log if a.verb in ("create", "update", "patch")]


def test_the_object_is_gfds_and_valid_by_nfds_crd() -> None:
    obj = node_feature(NODE, NAMESPACE, LABELS)
    assert problems(NODE_FEATURES, obj) == []
    assert obj["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1" and obj["kind"] == "NodeFeature"
    assert obj["metadata"] == {
        "name": OBJECT,
        "namespace": NAMESPACE,
        "labels": {"nfd.node.kubernetes.io/node-name": NODE},
    }
    assert obj["spec"]["labels"] == LABELS
    # the check is not vacuous: a misspelt or mistyped field is refused, as the server would
    assert problems(NODE_FEATURES, {**obj, "spec": {"lables": {}}})
    assert problems(NODE_FEATURES, {**obj, "spec": {"labels": {"a": 1}}})


def test_created_then_written_only_when_the_labels_change(
    account: Path,
    apiserver: APIServer,  # noqa: F811
) -> None:
    serve_node_features(apiserver)
    out = writer(account)
    assert out.publish(LABELS) == "created"
    first = stored(apiserver)
    assert first["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": NODE}
    assert first["spec"]["labels"] == LABELS
    # same labels, a newer timestamp: nothing written (the timestamp says the last change)
    assert out.publish({**LABELS, f"{N}gfd.timestamp": "1700000060"}) == "unchanged"
    assert stored(apiserver)["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert writes(apiserver) == ["create"]
    # a GPU gone: its labels go (the spec is replaced, never merged)
    fewer = {f"{N}gpu.present": "true", f"{N}gpu.count": "3", f"{N}gfd.timestamp": "1700000120"}
    assert out.publish(fewer) == "updated"
    assert stored(apiserver)["spec"]["labels"] == fewer
    assert writes(apiserver) == ["create", "update"]
    assert {a.verb for a in apiserver.auth.log if a.user == USER} <= {"get", "create", "update"}


def test_a_concurrent_change_is_a_409_and_a_new_get(
    account: Path,
    apiserver: APIServer,  # noqa: F811
) -> None:
    serve_node_features(apiserver)
    out = writer(account)
    out.publish(LABELS)
    bumped: list[int] = []

    def another_writer(kind: Kind, obj: dict[str, Any]) -> None:
        # between the labeller's get and its update, someone else updates the object
        if kind == NODE_FEATURES and not bumped:
            current = stored(apiserver)
            current["metadata"]["annotations"] = {"someone": "else"}
            bumped.append(int(apiserver.store.update(kind, NAMESPACE, current)["metadata"][
                "resourceVersion"]))  # fmt: skip

    apiserver.defaults.append(another_writer)
    assert out.publish({**LABELS, f"{N}gpu.count": "2"}) == "updated"
    after = stored(apiserver)
    assert bumped and int(after["metadata"]["resourceVersion"]) > bumped[0]
    assert after["spec"]["labels"][f"{N}gpu.count"] == "2"
    assert after["metadata"]["annotations"] == {"someone": "else"}  # theirs kept
    assert writes(apiserver) == ["create", "update", "update"]  # the 409, then the retry


def test_refusals_are_one_line_naming_the_fix(
    account: Path,
    apiserver: APIServer,  # noqa: F811
) -> None:
    out = writer(account)
    with pytest.raises(KubeApiError) as no_crd:
        out.publish(LABELS)  # the cluster has no NodeFeature CRD
    assert no_crd.value.code == 404
    line = no_crd.value.one_line()
    assert "nodefeatures.nfd.k8s-sigs.io" in line and "CRD is not installed" in line
    assert "nfd.enableNodeFeatureApi=false" in line and "\n" not in line
    serve_node_features(apiserver)
    apiserver.auth.add("labeller-token", USER, ())  # its Role gone
    with pytest.raises(KubeApiError) as forbidden:
        out.publish(LABELS)
    assert forbidden.value.code == 403
    assert "403 Forbidden" in str(forbidden.value)
    assert "Role nvct-labeller-nodefeatures" in str(forbidden.value)


# --- nvct-cli labels as the chart's labeller runs it ---------------------------------------

TIME_SLICED = (
    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
    "    - name: nvidia.com/gpu\n      replicas: 4\n"
)


def _cli(sim: Any, tmp: Path) -> list[str]:
    return [str(NVCT_BIN / "nvct-cli"), *roots(sim, tmp), "--no-cache"]


def printed(sim: Any, tmp: Path, config: Path) -> dict[str, str]:
    """What ``nvct-cli labels`` prints for the preset with ``config``, as a dict."""
    argv = [*_cli(sim, tmp), "labels", "--no-timestamp", "--config-file", str(config)]
    env = {**os.environ, **sim.env()}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


@pytest.fixture
def labeller(
    sim_driver: Any,
    tmp_path: Path,
    account: Path,
    apiserver: APIServer,  # noqa: F811
) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    """The labeller process: GFD's environment names, the pod's service account files."""
    serve_node_features(apiserver)
    config, log = tmp_path / "config.yaml", tmp_path / "labeller.log"
    config.write_text("version: v1\nflags:\n  migStrategy: none\n")
    env = {
        **os.environ,
        **sim_driver.env(),
        **cluster_env(apiserver.url),
        "GFD_USE_NODE_FEATURE_API": "true",
        "NODE_NAME": NODE,
        "NAMESPACE": NAMESPACE,
        "NVCT_SERVICE_ACCOUNT_DIR": str(account),
        "CONFIG_FILE": str(config),
    }
    argv = [*_cli(sim_driver, tmp_path), "labels", "--interval", "2"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc, config, log
    finally:
        terminate(proc, timeout=10)


def _lines(log: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in log.read_text().splitlines() if ln.startswith("{")]


def _labels(server: APIServer) -> dict[str, str]:
    try:
        return dict(stored(server)["spec"]["labels"])
    except NotFound:  # not created yet
        return {}


def test_the_labeller_keeps_its_nodes_nodefeature_as_nvct_cli_labels_prints_it(
    sim_driver: Any,
    tmp_path: Path,
    apiserver: APIServer,  # noqa: F811
    labeller: tuple[subprocess.Popen[bytes], Path, Path],
) -> None:
    proc, config, log = labeller
    untimed = printed(sim_driver, tmp_path, config)
    assert until(lambda: _labels(apiserver), 30), log.read_text()
    first = _labels(apiserver)
    assert first.pop(f"{N}gfd.timestamp").isdigit()
    assert first == untimed and first[f"{N}gpu.count"] == "4"
    # rounds with nothing new write nothing
    rounds = len([a for a in apiserver.auth.log if a.verb == "get"])
    assert until(lambda: len([a for a in apiserver.auth.log if a.verb == "get"]) >= rounds + 2, 10)
    assert writes(apiserver) == ["create"]

    # the node's config changes (the config-manager's file and SIGHUP): the labels follow
    changed = tmp_path / "next.yaml"
    changed.write_text(TIME_SLICED)
    sliced = printed(sim_driver, tmp_path, changed)
    assert sliced[f"{N}gpu.replicas"] == "4" and sliced != untimed
    changed.replace(config)
    proc.send_signal(signal.SIGHUP)
    assert until(lambda: _labels(apiserver).get(f"{N}gpu.replicas") == "4", 10), log.read_text()
    now = _labels(apiserver)
    now.pop(f"{N}gfd.timestamp")
    assert now == sliced
    assert writes(apiserver) == ["create", "update"]

    # the API refuses: one line per try, the labeller goes on, and writes once allowed again
    apiserver.auth.add("labeller-token", USER, ())
    config.write_text("version: v1\nflags:\n  migStrategy: none\n")
    proc.send_signal(signal.SIGHUP)
    failed = lambda: [ln for ln in _lines(log) if ln.get("event") == "nodefeature_failed"]  # noqa: E731
    assert until(failed, 10), log.read_text()
    line = failed()[0]
    assert line["level"] == "warning" and "403 Forbidden" in line["error"]
    assert proc.poll() is None
    apiserver.auth.add("labeller-token", USER, WRITER)
    assert until(lambda: _labels(apiserver).get(f"{N}gpu.replicas") == "1", 10), log.read_text()
    said = lambda: [ln["event"] for ln in _lines(log) if ln.get("level") == "info"]  # noqa: E731
    assert until(lambda: len(said()) == 3, 5), log.read_text()  # logged after the answer
    assert said() == ["nodefeature_created", "nodefeature_updated", "nodefeature_updated"]
    # a config that does not read: one JSON line, the object keeps the last labels
    before = writes(apiserver)
    config.write_text("version: v9\n")
    proc.send_signal(signal.SIGHUP)
    kept = lambda: [ln for ln in _lines(log) if ln.get("event") == "labels_kept"]  # noqa: E731
    assert until(kept, 10), log.read_text()
    assert "version" in kept()[0]["error"] and writes(apiserver) == before
    assert _labels(apiserver).get(f"{N}gpu.replicas") == "1" and proc.poll() is None
    # on SIGTERM it exits cleanly and the object stays (NFD keeps the node's labels)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert _labels(apiserver).get(f"{N}gpu.present") == "true"


def test_the_api_output_needs_a_node_name_and_excludes_a_file(tmp_path: Path) -> None:
    env = {**os.environ, "GFD_USE_NODE_FEATURE_API": "true"}
    env.pop("NODE_NAME", None)
    base = [str(NVCT_BIN / "nvct-cli"), "labels"]
    for extra, said in (
        (["--output", str(tmp_path / "f")], "--output and --use-node-feature-api"),
        ([], "set --node-name or NODE_NAME"),
    ):
        done = subprocess.run([*base, *extra], env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 2, done.stderr
        (error,) = [ln for ln in done.stderr.splitlines() if ln.startswith("Error: ")]
        assert said in error  # click's usage error: one line with the fix
    assert not (tmp_path / "f").exists()
