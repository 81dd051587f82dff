"""The chart's DRA switch (``dra.enabled``) and the example claims of deployments/dra/examples:
every object validates strictly against Kubernetes 1.34 (resource.k8s.io/v1 GA) and the newest
schema; nvct-dra-plugin and nvct-device-plugin never run on one node; the plugin's RBAC is what
it reads and writes; the admission policy's CEL (cel-python) lets a node's plugin write only its
own node's slices; the namespace's pod policy admits the DRA plugin's pod."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deployments.scheduling import refusals as scheduling_refusals
from tests.deployments.test_admission import refusals
from tests.deployments.test_chart import READY_GPU_NODE, admitted, daemonset_pods, find, rendered
from tests.deployments.test_deployments import invalid

EXAMPLES = Path(__file__).resolve().parents[2] / "deployments" / "dra" / "examples"
# DRA's v1 API is GA (and served by default) from 1.34
DRA_VERSIONS = ("1.34.0", "1.37.0")
ON = {"dra": {"enabled": True}}
LABEL = "nvct.io/gpu.dra"
ACCOUNT = "system:serviceaccount:nvct-system:nvct-dra-plugin"
NODE_NAME = "authentication.kubernetes.io/node-name"


def examples() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}#{i}", doc)
        for path in sorted(EXAMPLES.glob("*.yaml"))
        for i, doc in enumerate(yaml.safe_load_all(path.read_text()))
        if doc
    ]


def dra_docs() -> list[dict[str, Any]]:
    return [
        d for d in rendered(ON) if d["metadata"]["name"].startswith(("nvct-dra", "gpu.", "mig."))
    ]


@pytest.mark.parametrize("version", DRA_VERSIONS)
def test_the_dra_objects_and_examples_validate_strictly(version: str) -> None:
    named = [(f"dra: {d['kind']} {d['metadata']['name']}", d) for d in rendered(ON)]
    assert invalid(named + examples(), version) == []
    kinds = {d["kind"] for _, d in examples()}
    assert kinds == {"ResourceClaimTemplate", "ResourceClaim", "Pod"}
    assert len([n for n, _ in examples() if n.endswith("#0")]) == 6


def test_every_examples_config_is_one_the_plugin_applies() -> None:
    """The opaque configs of the examples (and of the chart's classes) parse as nvct-dra-plugin
    parses them at prepare: an example a user copies is never refused."""
    from nvct.dra.config import DeviceConfig, MpsConfig, parse_config

    found = {}
    for name, doc in [*examples(), *((d["metadata"]["name"], d) for d in dra_docs())]:
        spec = doc.get("spec") or {}
        spec = spec.get("spec", spec)  # a template's claim spec
        # a claim's config is in spec.devices, a DeviceClass's in its spec
        entries = (spec.get("devices") or {}).get("config") or spec.get("config") or ()
        for n, entry in enumerate(entries):
            opaque = entry.get("opaque") or {}
            if opaque.get("driver") == "gpu.nvct.io":
                found[name] = parse_config(opaque["parameters"], where=f"{name} config[{n}]")
    assert found == {
        "mps-gpu.yaml#0": DeviceConfig("gpu", "MPS", MpsConfig(50, 20480)),
        "shared-gpu.yaml#0": DeviceConfig("gpu", "TimeSlicing"),
    }


def test_off_by_default_and_on_it_brings_the_plugin_classes_rbac_and_policy() -> None:
    off = {(d["kind"], d["metadata"]["name"]) for d in rendered({})}
    on = {(d["kind"], d["metadata"]["name"]) for d in rendered(ON)}
    assert on - off == {
        ("ServiceAccount", "nvct-dra-plugin"),
        ("ClusterRole", "nvct-dra-plugin"),
        ("ClusterRoleBinding", "nvct-dra-plugin"),
        ("ValidatingAdmissionPolicy", "nvct-dra-plugin-own-node"),
        ("ValidatingAdmissionPolicyBinding", "nvct-dra-plugin-own-node"),
        ("DeviceClass", "gpu.nvct.io"),
        ("DeviceClass", "mig.gpu.nvct.io"),
        ("DaemonSet", "nvct-dra-plugin"),
        ("NetworkPolicy", "nvct-dra-plugin"),
    }
    assert off - on == set()


def test_a_node_runs_the_dra_plugin_or_the_device_plugin_never_both() -> None:
    docs = rendered(ON)
    pods = daemonset_pods(docs)
    dra_node = {
        **READY_GPU_NODE,
        "metadata": {
            "name": "gpu-9",
            "labels": {**READY_GPU_NODE["metadata"]["labels"], LABEL: "true"},
        },
    }
    on_plain = {n for n, p in pods.items() if not admitted(docs, p, READY_GPU_NODE)}
    on_dra = {n for n, p in pods.items() if not admitted(docs, p, dra_node)}
    assert "nvct-device-plugin" in on_plain and "nvct-dra-plugin" not in on_plain
    assert "nvct-dra-plugin" in on_dra and "nvct-device-plugin" not in on_dra
    # what else runs is the same on both: labeller, exporter, installer, MPS control
    assert on_plain - {"nvct-device-plugin"} == on_dra - {"nvct-dra-plugin"}
    assert scheduling_refusals(pods["nvct-device-plugin"], dra_node) == [
        "required node affinity: no term matches"
    ]


def test_the_plugin_may_read_claims_and_write_slices_and_nothing_else() -> None:
    role = find(rendered(ON), "ClusterRole", "nvct-dra-plugin")
    rules = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    slices = {"get", "list", "watch", "create", "update", "delete"}
    assert rules == {("resource.k8s.io", "resourceclaims", "get")} | {
        ("resource.k8s.io", "resourceslices", v) for v in slices
    }
    # the rules the publisher's tests run under (integration/test_dra_publish.py) are these
    from integration.harness.slices import SLICE_WRITER

    assert {(r.api_group, r.resource, v) for r in SLICE_WRITER for v in r.verbs} == {
        ("resource.k8s.io", "resourceslices", v) for v in slices
    }
    pod = daemonset_pods(rendered(ON))["nvct-dra-plugin"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["DRIVER_NAME"] == "gpu.nvct.io"


def _slice(node: str | None) -> dict[str, Any]:
    pool = {"name": "p", "generation": 1, "resourceSliceCount": 1}
    spec: dict[str, Any] = {"driver": "gpu.nvct.io", "pool": pool}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "s"}, "spec": spec}  # fmt: skip


def _as(user: str, node: str | None, operation: str = "CREATE") -> dict[str, Any]:
    extra = {NODE_NAME: [node]} if node else {}
    return {"operation": operation, "userInfo": {"username": user, "extra": extra}}


@pytest.mark.parametrize(
    ("request_", "obj", "old", "refused"),
    [
        (_as(ACCOUNT, "gpu-1"), _slice("gpu-1"), None, ""),
        (_as(ACCOUNT, "gpu-1", "UPDATE"), _slice("gpu-1"), _slice("gpu-1"), ""),
        (_as(ACCOUNT, "gpu-1", "DELETE"), None, _slice("gpu-1"), ""),
        (
            _as(ACCOUNT, "gpu-1"),
            _slice("gpu-2"),
            None,
            "may not write the ResourceSlices of node gpu-2",
        ),
        (_as(ACCOUNT, "gpu-1", "DELETE"), None, _slice("gpu-2"), "of node gpu-2"),
        (_as(ACCOUNT, "gpu-1"), _slice(None), None, "a ResourceSlice of no node"),
        (_as(ACCOUNT, None), _slice("gpu-1"), None, "names no node"),
        # other writers (the kubelet, the scheduler's controllers) are not this policy's
        (_as("system:node:gpu-1", "gpu-1"), _slice("gpu-2"), None, ""),
    ],
)
def test_a_node_s_plugin_writes_only_its_own_node_s_slices(
    request_: dict[str, Any], obj: Any, old: Any, refused: str
) -> None:
    docs = rendered(ON)
    policy = find(docs, "ValidatingAdmissionPolicy", "nvct-dra-plugin-own-node")
    binding = find(docs, "ValidatingAdmissionPolicyBinding", "nvct-dra-plugin-own-node")
    assert binding["spec"] == {
        "policyName": "nvct-dra-plugin-own-node",
        "validationActions": ["Deny"],
    }
    said = refusals(policy, obj, "", request=request_, old=old)
    if refused:
        assert said and refused in " ".join(said), said
    else:
        assert said == []


def test_the_namespace_s_pod_policy_admits_the_dra_plugin_and_no_more() -> None:
    docs = rendered(ON)
    pods = find(docs, "ValidatingAdmissionPolicy", "nvct-system-pods")
    runtime_class = find(docs, "ValidatingAdmissionPolicy", "nvct-system-runtimeclass")
    for name, template in (
        (d["metadata"]["name"], d["spec"]["template"]) for d in docs if d["kind"] == "DaemonSet"
    ):
        assert refusals(pods, template, "nvct-system") == [], name
        assert refusals(runtime_class, template, "nvct-system") == [], name
    dra = next(
        d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "nvct-dra-plugin"
    )
    template = dra["spec"]["template"]
    template["spec"]["volumes"].append(
        {"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}
    )
    assert refusals(pods, template, "nvct-system")  # the device plugin's directory is not its own
    off = find(rendered({}), "ValidatingAdmissionPolicy", "nvct-system-pods")
    assert refusals(off, dra["spec"]["template"], "nvct-system")  # without dra.enabled: refused


def test_dra_with_an_affinity_value_fails_naming_the_way_out() -> None:
    from helm_python.errors import HelmError

    term = {"matchExpressions": [{"key": "a", "operator": "Exists"}]}
    affinity = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}
    }  # fmt: skip
    with pytest.raises(HelmError, match="use nodeSelector or tolerations instead"):
        rendered({**ON, "affinity": affinity})


def test_the_chart_with_dra_lints_without_a_finding_above_info() -> None:
    from tests.deployments.test_chart import CHART, helm

    report = helm.lint(CHART, ON, namespace="nvct-system", strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] > 1] == []


def test_dra_sharing_gives_the_plugin_sys_admin_and_the_pod_policy_admits_it_for_it_alone() -> None:
    """MPS claims' daemons get a mount namespace each (unshare + bind mount) and intervals are
    the driver's privileged compute policy: CAP_SYS_ADMIN for nvct-dra-plugin with dra.sharing,
    and for no other DaemonSet; without it, none."""

    def capabilities(values: dict[str, Any]) -> dict[str, Any]:
        (container,) = daemonset_pods(rendered(values))["nvct-dra-plugin"]["containers"]
        caps: dict[str, Any] = container["securityContext"]["capabilities"]
        return caps

    assert capabilities(ON) == {"drop": ["ALL"]}
    mps = {"dra": {"enabled": True, "sharing": True}}
    assert capabilities(mps) == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    docs = rendered(mps)
    pods = find(docs, "ValidatingAdmissionPolicy", "nvct-system-pods")
    templates = {
        d["metadata"]["name"]: d["spec"]["template"] for d in docs if d["kind"] == "DaemonSet"
    }
    assert refusals(pods, templates["nvct-dra-plugin"], "nvct-system") == []
    labeller = templates["nvct-labeller"]
    labeller["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]
    assert any("add none" in m for m in refusals(pods, labeller, "nvct-system"))
    without = find(rendered(ON), "ValidatingAdmissionPolicy", "nvct-system-pods")
    assert refusals(without, templates["nvct-dra-plugin"], "nvct-system")


def test_dra_sharing_mounts_the_mps_claims_tmpfs_directory_at_the_hosts_path() -> None:
    """MPS claims' directories are the host's /run/nvct/dra-mps (a tmpfs), mounted at the same
    path (the claims' CDI specs name it for their containers), with dra.sharing only."""

    def mounts(values: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
        (pod,) = [daemonset_pods(rendered(values))["nvct-dra-plugin"]]
        (container,) = pod["containers"]
        at = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        return at, {v["name"]: v.get("hostPath") for v in pod["volumes"]}

    at, volumes = mounts({"dra": {"enabled": True, "sharing": True}})
    assert at["dra-mps"] == "/run/nvct/dra-mps"
    assert volumes["dra-mps"] == {"path": "/run/nvct/dra-mps", "type": "DirectoryOrCreate"}
    at, volumes = mounts(ON)
    assert "dra-mps" not in at and "dra-mps" not in volumes
