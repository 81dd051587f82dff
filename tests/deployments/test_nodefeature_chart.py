"""The chart's ``nfd.enableNodeFeatureApi`` (NVIDIA's value): the labeller writes its node's
NodeFeature object instead of the features.d file. Off by default (the plain manifests do not
change); on, every object validates strictly (the built-in kinds; NodeFeature is NFD's CRD,
checked in integration/test_nodefeature.py against NFD's schema), the labeller container alone
gets a token and no features.d hostPath, its Role is get/create/update on nodefeatures in the
release's namespace only, and the admission policy's CEL (cel-python) lets a node's labeller
write only its own node's object."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deployments.test_admission import refusals
from tests.deployments.test_chart import (
    CHART,
    containers,
    env_of,
    find,
    helm,
    rendered,
)
from tests.deployments.test_deployments import VERSIONS, invalid

ON = {"nfd": {"enableNodeFeatureApi": True}}
PER_NODE = {**ON, "config": {"map": {"default": "version: v1\n"}}}
ACCOUNT = "system:serviceaccount:nvct-system:nvct-labeller"
NODE_NAME = "authentication.kubernetes.io/node-name"
FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"
ADDED = {
    ("Role", "nvct-labeller-nodefeatures"),
    ("RoleBinding", "nvct-labeller-nodefeatures"),
    ("ValidatingAdmissionPolicy", "nvct-labeller-own-node"),
    ("ValidatingAdmissionPolicyBinding", "nvct-labeller-own-node"),
    ("NetworkPolicy", "nvct-labeller"),
}


def _names(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


def _labeller(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return find(docs, "DaemonSet", "nvct-labeller")["spec"]["template"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("values", [ON, PER_NODE], ids=["on", "on-with-per-node-configs"])
def test_with_the_node_feature_api_every_object_validates_strictly(
    values: dict[str, Any], version: str
) -> None:
    named = [(f"nodefeature: {d['kind']} {d['metadata']['name']}", d) for d in rendered(values)]
    assert invalid(named, version) == []


@pytest.mark.parametrize("values", [ON, PER_NODE], ids=["on", "on-with-per-node-configs"])
def test_the_chart_with_the_node_feature_api_lints_without_a_finding_above_info(
    values: dict[str, Any],
) -> None:
    report = helm.lint(CHART, values, namespace="nvct-system", strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] > 1] == []


def test_off_by_default_and_on_it_brings_a_role_a_policy_and_egress() -> None:
    off, on = rendered({}), rendered(ON)
    assert _names(on) - _names(off) == ADDED and _names(off) - _names(on) == set()
    assert not [d for d in off if d["kind"] in ("Role", "RoleBinding")]
    # without the labeller there is nothing to write the object
    assert _names(rendered({**ON, "gfd": {"enabled": False}})) & ADDED == set()
    # the egress comes with the namespace's default deny, not without it
    loose = rendered({**ON, "networkPolicy": {"enabled": False}})
    assert ("NetworkPolicy", "nvct-labeller") not in _names(loose)


def test_the_labeller_writes_the_object_with_gfds_names_and_no_feature_file() -> None:
    pod = _labeller(rendered(ON))["spec"]
    labeller = containers(pod)["labeller"]
    assert "--output" not in labeller["command"]
    env = env_of(labeller)
    assert env["GFD_USE_NODE_FEATURE_API"] == "true"
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    # the token only where the labeller reads it; none by the pod's automount
    assert pod["automountServiceAccountToken"] is False
    mounts = {m["mountPath"]: m for m in labeller["volumeMounts"]}
    token = mounts[env["NVCT_SERVICE_ACCOUNT_DIR"]]
    assert token["name"] == "api-access" and token["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    sources = volumes["api-access"]["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["path"] == "token"
    # no features.d: no hostPath but the node's root, read-only, and no probe on the file
    assert [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v] == ["/"]
    assert FEATURES_D not in mounts and mounts["/host"]["readOnly"] is True
    assert "readinessProbe" not in labeller and "livenessProbe" not in labeller
    # by default: the file, and no token at all
    default = _labeller(rendered({}))["spec"]
    plain = containers(default)["labeller"]
    assert FEATURES_D in {m["mountPath"] for m in plain["volumeMounts"]}
    assert "api-access" not in {v["name"] for v in default["volumes"]}
    assert "GFD_USE_NODE_FEATURE_API" not in env_of(plain)


def test_with_per_node_configs_the_token_volume_is_shared_and_the_policy_admits_the_pod() -> None:
    docs = rendered(PER_NODE)
    template = _labeller(docs)
    pod = template["spec"]
    assert [v["name"] for v in pod["volumes"]].count("api-access") == 1
    mounted = {n for n, c in containers(pod).items() if "api-access" in
               {m["name"] for m in c["volumeMounts"]}}  # fmt: skip
    assert mounted == {"labeller", "config-manager", "config-manager-init"}
    for values in (ON, PER_NODE):
        docs = rendered(values)
        policy = find(docs, "ValidatingAdmissionPolicy", "nvct-system-pods")
        assert refusals(policy, _labeller(docs), "nvct-system") == []


def test_the_role_is_the_objects_verbs_in_the_release_namespace_only() -> None:
    docs = rendered(ON)
    role = find(docs, "Role", "nvct-labeller-nodefeatures")
    assert role["metadata"]["namespace"] == "nvct-system"
    assert role["rules"] == [
        {
            "apiGroups": ["nfd.k8s-sigs.io"],
            "resources": ["nodefeatures"],
            "verbs": ["get", "create", "update"],
        }
    ]
    binding = find(docs, "RoleBinding", "nvct-labeller-nodefeatures")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "nvct-labeller-nodefeatures",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "nvct-labeller", "namespace": "nvct-system"}
    ]
    # the rules the labeller's tests run under (integration/test_nodefeature.py) are these
    from integration.apiserver.crds import WRITER

    assert {(r.api_group, r.resource, v) for r in WRITER for v in r.verbs} == {
        ("nfd.k8s-sigs.io", "nodefeatures", v) for v in role["rules"][0]["verbs"]
    }
    # the installer's ClusterRole (node-ready.yaml) is its own; none is the labeller's
    assert not [
        d
        for d in docs
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding")
        and "labeller" in d["metadata"]["name"]
    ]


def _feature(name: str, node: str | None) -> dict[str, Any]:
    from nvct.kubeapi.client.nodefeature import node_feature

    obj = node_feature(node or "x", "nvct-system", {"nvidia.com/gpu.present": "true"})
    obj["metadata"]["name"] = name
    if node is None:
        del obj["metadata"]["labels"]
    return obj


def _as(user: str, node: str | None, operation: str = "CREATE") -> dict[str, Any]:
    extra = {NODE_NAME: [node]} if node else {}
    return {"operation": operation, "userInfo": {"username": user, "extra": extra}}


OWN = "nvidia-features-for-gpu-1"


@pytest.mark.parametrize(
    ("request_", "obj", "refused"),
    [
        (_as(ACCOUNT, "gpu-1"), _feature(OWN, "gpu-1"), ""),
        (_as(ACCOUNT, "gpu-1", "UPDATE"), _feature(OWN, "gpu-1"), ""),
        # another node's object, by name or by NFD's node label
        (_as(ACCOUNT, "gpu-1"), _feature("nvidia-features-for-gpu-2", "gpu-2"), "not nvidia-"),
        (_as(ACCOUNT, "gpu-1", "UPDATE"), _feature(OWN, "gpu-2"), "for node gpu-2"),
        (_as(ACCOUNT, "gpu-1"), _feature(OWN, None), "for node (none)"),
        (_as(ACCOUNT, "gpu-1"), _feature("my-features", "gpu-1"), "not my-features"),
        (_as(ACCOUNT, None), _feature(OWN, "gpu-1"), "names no node"),
        # other writers (nfd-worker, an admin) are not this policy's
        (_as("system:serviceaccount:nfd:nfd-worker", "gpu-1"), _feature(OWN, "gpu-2"), ""),
    ],
)
def test_a_nodes_labeller_writes_only_its_own_nodes_object(
    request_: dict[str, Any], obj: dict[str, Any], refused: str
) -> None:
    docs = rendered(ON)
    policy = find(docs, "ValidatingAdmissionPolicy", "nvct-labeller-own-node")
    binding = find(docs, "ValidatingAdmissionPolicyBinding", "nvct-labeller-own-node")
    assert binding["spec"] == {
        "policyName": "nvct-labeller-own-node",
        "validationActions": ["Deny"],
    }
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules[0]["resources"] == ["nodefeatures"] and rules[0]["apiGroups"] == [
        "nfd.k8s-sigs.io"
    ]
    said = refusals(policy, obj, "nvct-system", request=request_)
    if refused:
        assert said and refused in " ".join(said), said
    else:
        assert said == []


def test_the_value_is_in_the_schema() -> None:
    from helm_python.errors import HelmError

    with pytest.raises(HelmError, match="enableNodeFeatureApi"):
        rendered({"nfd": {"enableNodeFeatureApi": "yes"}})
