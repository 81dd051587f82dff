"""The installer's node label (installer.labelNodes): its token may change only its own Node,
and of it only the label nvct.io/runtime.ready, as the admission policy's CEL (run by
cel-python the way the API server runs it) decides; RBAC gives it get and patch on nodes,
nothing else; turned off, the installer has no token and nothing requires the label."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.deployments.test_admission import refusals
from tests.deployments.test_chart import (
    FRESH_GPU_NODE,
    READY_LABEL,
    UNBOUND,
    admitted,
    containers,
    daemonset_pods,
    env_of,
    find,
    rendered,
)

ACCOUNT = "system:serviceaccount:nvct-system:nvct-installer"
NODE_NAME = "authentication.kubernetes.io/node-name"
POLICY = "nvct-installer-node-label"


def _node(name: str = "gpu-1", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **labels},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": "10.0.0.0/24"},
    }


def _as(node: str | None, user: str = ACCOUNT) -> dict[str, Any]:
    extra = {NODE_NAME: [node]} if node else {}
    return {"operation": "UPDATE", "userInfo": {"username": user, "extra": extra}}


def _labelled(node: dict[str, Any], **labels: str | None) -> dict[str, Any]:
    changed = copy.deepcopy(node)
    for key, value in labels.items():
        if value is None:
            changed["metadata"]["labels"].pop(key, None)
        else:
            changed["metadata"]["labels"][key] = value
    return changed


def _tainted(node: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(node)
    changed["spec"]["taints"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    return changed


def _annotated(node: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(node)
    changed["metadata"]["annotations"]["x"] = "y"
    return changed


READY = {"nvct.io/runtime.ready": "true"}
PLAIN = _node()
LABELLED = _node(**READY)
OTHER = _node("gpu-2")


@pytest.mark.parametrize(
    ("request_", "old", "new", "refused"),
    [
        (_as("gpu-1"), PLAIN, LABELLED, ""),  # set on its own node
        (_as("gpu-1"), LABELLED, PLAIN, ""),  # removed from its own node
        (_as("gpu-1"), PLAIN, PLAIN, ""),  # no change at all
        (_as("gpu-1"), OTHER, _node("gpu-2", **READY), "may not change Node gpu-2"),
        (_as("gpu-1"), _node("gpu-2", **READY), OTHER, "may not change Node gpu-2"),
        (_as("gpu-1"), PLAIN, _node(**{"nvct.io/runtime.ready": "false"}), 'to "true"'),
        (_as("gpu-1"), PLAIN, _labelled(PLAIN, **{"nvidia.com/gpu.present": "true"}), "no other"),
        (_as("gpu-1"), PLAIN, _labelled(PLAIN, **{"kubernetes.io/hostname": None}), "no other"),
        (_as("gpu-1"), PLAIN, _labelled(PLAIN, **{"kubernetes.io/hostname": "x"}), "no other"),
        (_as("gpu-1"), PLAIN, _tainted(_labelled(PLAIN, **READY)), "spec (taints"),
        (_as("gpu-1"), PLAIN, _annotated(PLAIN), "annotations"),
        (_as(None), PLAIN, LABELLED, "names no node"),
        # other users (the kubelet, NFD, an admin) are not this policy's
        (_as("gpu-1", "system:node:gpu-1"), PLAIN, _tainted(PLAIN), ""),
    ],
)
def test_the_installer_changes_only_its_own_nodes_label(
    request_: dict[str, Any], old: dict[str, Any], new: dict[str, Any], refused: str
) -> None:
    docs = rendered({})
    policy = find(docs, "ValidatingAdmissionPolicy", POLICY)
    binding = find(docs, "ValidatingAdmissionPolicyBinding", POLICY)
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}
    said = refusals(policy, new, "", request=request_, old=old)
    if refused:
        assert said and refused in " ".join(said), said
    else:
        assert said == []


def test_the_installer_may_get_and_patch_nodes_and_nothing_else() -> None:
    docs = rendered({})
    role = find(docs, "ClusterRole", "nvct-installer")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    binding = find(docs, "ClusterRoleBinding", "nvct-installer")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "nvct-installer", "namespace": "nvct-system"}
    ]
    # the policy judges every UPDATE (patch's admission) of a Node by that account
    rules = find(docs, "ValidatingAdmissionPolicy", POLICY)["spec"]["matchConstraints"]
    assert rules["resourceRules"][0]["operations"] == ["UPDATE"]
    # the rules the labelling command's tests run under are these (integration/test_node_label)
    from integration.harness.nodelabel import INSTALLER_RULES

    assert {(r.api_group, r.resource, v) for r in INSTALLER_RULES for v in r.verbs} == {
        ("", "nodes", "get"),
        ("", "nodes", "patch"),
    }


def test_the_installer_gets_its_node_and_a_token_naming_it() -> None:
    pod = daemonset_pods(rendered({}))["nvct-installer"]
    env = env_of(containers(pod)["installer"])
    assert env["NODE_LABEL"] == READY_LABEL
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    account = env["NVCT_SERVICE_ACCOUNT_DIR"]
    mounts = containers(pod)["installer"]["volumeMounts"]
    (mount,) = [m for m in mounts if m["mountPath"] == account]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    sources = volume["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}
    assert pod["automountServiceAccountToken"] is False


def test_label_nodes_off_takes_the_token_the_rights_and_the_requirement_away() -> None:
    docs = rendered({"installer": {"labelNodes": False}})
    pods = daemonset_pods(docs)
    installer = pods["nvct-installer"]
    assert env_of(containers(installer)["installer"]) == {
        "HOST": "/host", "ENGINE": "containerd", "NODE_LABEL": ""}  # fmt: skip
    assert "serviceAccountToken" not in str(installer["volumes"])
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert not {n for n in names if n[1].startswith("nvct-installer") and n[0] != "DaemonSet"} - {
        ("ServiceAccount", "nvct-installer")
    }
    assert "scheduling" not in find(docs, "RuntimeClass", "nvct-system")
    # as before the label: every DaemonSet on a fresh node (they then wait for the handler)
    for name, pod in pods.items():
        assert admitted(docs, pod, FRESH_GPU_NODE) == [], name


def test_the_label_is_required_whatever_affinity_or_nfd_say() -> None:
    """A nodeSelector ANDs with any affinity: the affinity value (which replaces nvct's own)
    cannot drop it, and neither can NFD's rules."""
    anywhere = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}}  # fmt: skip
    for values in ({"affinity": anywhere}, {"nfd": {"enabled": True}}):
        docs = rendered(values)
        for name, pod in daemonset_pods(docs).items():
            assert (pod.get("nodeSelector", {}).get(READY_LABEL) == "true") is (
                name not in UNBOUND
            ), (values, name)
    docs = rendered({"affinity": anywhere})
    plugin = daemonset_pods(docs)["nvct-device-plugin"]
    assert admitted(docs, plugin, FRESH_GPU_NODE) == [f"nodeSelector {READY_LABEL}=true"]
