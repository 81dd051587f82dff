"""deployments/admission.yaml: the ValidatingAdmissionPolicies' CEL, run by a real CEL
implementation (cel-python) the way the API server runs a policy (variables in order, then
each validation; a pod is admitted when every validation is true), against the pods nvct's
DaemonSets make and against pods that ask for more."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

DEPLOYMENTS = Path(__file__).resolve().parents[2] / "deployments"
celpy = pytest.importorskip("celpy")
# the policies' CEL as the API server runs it (the stand-in server runs it the same way)
from integration.apiserver.admission import refusals  # noqa: E402


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOYMENTS / name).read_text()) if d]


def _policy(name: str) -> dict[str, Any]:
    (policy,) = [
        d
        for d in _docs("admission.yaml")
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == name
    ]
    return policy


def shipped_pods() -> dict[str, dict[str, Any]]:
    """Each DaemonSet's pod as the controller creates it (the template's metadata and spec)."""
    pods = {}
    for path in sorted(DEPLOYMENTS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "DaemonSet":
                pods[doc["metadata"]["name"]] = copy.deepcopy(doc["spec"]["template"])
    return pods


PODS = "nvct-system-pods"
RUNTIME_CLASS = "nvct-system-runtimeclass"


def test_the_bindings_name_the_policies_and_deny() -> None:
    docs = _docs("admission.yaml")
    policies = {d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert {b["spec"]["policyName"] for b in bindings} == policies == {PODS, RUNTIME_CLASS}
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Deny"]
    (pods,) = [b for b in bindings if b["spec"]["policyName"] == PODS]
    selector = pods["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
    (namespace,) = _docs("namespace.yaml")
    assert selector == {"kubernetes.io/metadata.name": namespace["metadata"]["name"]}
    # the runtime class rule holds in every namespace
    (runtime_class,) = [b for b in bindings if b["spec"]["policyName"] == RUNTIME_CLASS]
    assert "matchResources" not in runtime_class["spec"]


@pytest.mark.parametrize("name", sorted(shipped_pods()))
def test_every_shipped_daemonset_pod_is_admitted(name: str) -> None:
    pod = shipped_pods()[name]
    assert refusals(_policy(PODS), pod, "nvct-system") == []
    assert refusals(_policy(RUNTIME_CLASS), pod, "nvct-system") == []


def _unprivileged() -> dict[str, Any]:
    return shipped_pods()["nvct-device-plugin"]


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod["spec"]["containers"][0]
    return container


def _privileged(pod: dict[str, Any]) -> None:
    _container(pod)["securityContext"] = {"privileged": True}


def _adds_sys_admin(pod: dict[str, Any]) -> None:
    _container(pod)["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]


def _keeps_capabilities(pod: dict[str, Any]) -> None:
    del _container(pod)["securityContext"]["capabilities"]


def _escalates(pod: dict[str, Any]) -> None:
    _container(pod)["securityContext"]["allowPrivilegeEscalation"] = True


def _mounts_etc(pod: dict[str, Any]) -> None:
    pod["spec"]["volumes"].append({"name": "etc", "hostPath": {"path": "/etc"}})


def _mounts_a_parent(pod: dict[str, Any]) -> None:  # exact paths, no prefixes
    pod["spec"]["volumes"].append({"name": "d", "hostPath": {"path": "/run/nvct"}})


def _host_pid(pod: dict[str, Any]) -> None:
    pod["spec"]["hostPID"] = True


def _host_network(pod: dict[str, Any]) -> None:
    pod["spec"]["hostNetwork"] = True


def _privileged_init_container(pod: dict[str, Any]) -> None:
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox", "securityContext": {"privileged": True}}
    ]


def _privileged_debug_container(pod: dict[str, Any]) -> None:
    pod["spec"]["ephemeralContainers"] = [
        {"name": "debug", "image": "busybox", "securityContext": {"privileged": True}}
    ]


def _another_app(pod: dict[str, Any]) -> None:
    pod["metadata"]["labels"]["app.kubernetes.io/name"] = "miner"


def _no_labels(pod: dict[str, Any]) -> None:
    del pod["metadata"]["labels"]


@pytest.mark.parametrize(
    "change, refused",
    [
        (_privileged, "only nvct-installer and nvct-mps-control run privileged"),
        (_adds_sys_admin, "drop ALL capabilities, add none"),
        (_keeps_capabilities, "drop ALL capabilities, add none"),
        (_escalates, "forbid privilege escalation"),
        (_mounts_etc, "a hostPath volume this DaemonSet does not have"),
        (_mounts_a_parent, "a hostPath volume this DaemonSet does not have"),
        (_host_pid, "only nvct-installer shares the node's PID namespace"),
        (_host_network, "no nvct pod shares its network"),
        (_privileged_init_container, "only nvct-installer and nvct-mps-control run privileged"),
        (_privileged_debug_container, "only nvct-installer and nvct-mps-control run privileged"),
        (_another_app, "only nvct's DaemonSets run in nvct-system"),
        (_no_labels, "only nvct's DaemonSets run in nvct-system"),
    ],
    ids=lambda v: getattr(v, "__name__", "")[1:] or None,
)
def test_a_pod_asking_for_more_than_its_daemonset_has_is_refused(change: Any, refused: str) -> None:
    pod = _unprivileged()
    change(pod)
    messages = refusals(_policy(PODS), pod, "nvct-system")
    assert any(refused in m for m in messages), messages


def test_the_installers_host_pid_and_privilege_are_its_own() -> None:
    """Labelled as the installer, a pod may be privileged with hostPID, but gets no host path
    the installer does not have; the labeller may not borrow the installer's hostPID."""
    installer = shipped_pods()["nvct-installer"]
    assert installer["spec"]["hostPID"] is True
    assert refusals(_policy(PODS), installer, "nvct-system") == []
    _mounts_etc(installer)
    assert refusals(_policy(PODS), installer, "nvct-system") != []
    labeller = shipped_pods()["nvct-labeller"]
    _host_pid(labeller)
    assert refusals(_policy(PODS), labeller, "nvct-system") != []


def _workload(runtime_class: str | None) -> dict[str, Any]:
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "cuda", "env": env}]}
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    # A forged namespace annotation changes nothing: admission reads the request's namespace.
    annotations = {"io.kubernetes.cri.sandbox-namespace": "nvct-system"}
    return {"metadata": {"name": "w", "annotations": annotations}, "spec": spec}


@pytest.mark.parametrize("namespace", ["default", "team-a", "kube-system"])
def test_the_nvct_system_runtime_class_is_refused_outside_nvcts_namespace(
    namespace: str,
) -> None:
    policy = _policy(RUNTIME_CLASS)
    (message,) = refusals(policy, _workload("nvct-system"), namespace)
    assert "the RuntimeClass nvct-system" in message
    assert refusals(policy, _workload("nvidia"), namespace) == []
    assert refusals(policy, _workload(None), namespace) == []
    assert refusals(policy, _workload("nvct-system"), "nvct-system") == []
