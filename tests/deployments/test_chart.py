"""deployments/helm/nvct rendered by Helm's own engine (helm-python-sdk) for a matrix of values:
it lints without a finding above info, every rendered object validates against the oldest and
newest Kubernetes schemas nvct supports, NVIDIA's keys reach the plugin under NVIDIA's names,
the plain manifests are its default rendering, and with default values the DaemonSets run on a
fresh GPU node that carries no node-feature-discovery label."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deployments.scheduling import refusals
from tests.deployments.test_deployments import VERSIONS, invalid

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deployments" / "helm" / "nvct"
helm = pytest.importorskip("helm_python.chart", reason="needs helm-python-sdk (the test extra)")
sys.path.insert(0, str(ROOT / "deployments"))
import render  # noqa: E402  (deployments/render.py)

sys.path.remove(str(ROOT / "deployments"))

# NVIDIA's documented time-slicing and MPS configs (k8s-device-plugin README), version v1.
TIME_SLICING = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""
MPS = """version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}
            ]
        }
    }
}
# What the installer puts on its Node once nvct's handlers run there (node-install.sh).
READY_LABEL = "nvct.io/runtime.ready"
# The DaemonSets that do not require it: the installer (it sets it) and mps-control (no nvct
# handler; its MPS daemons must outlive an installer upgrade, which removes the label a moment).
UNBOUND = {"nvct-installer", "nvct-mps-control"}
# The installer's API access (installer.labelNodes): its role, binding, policy and egress.
INSTALLER_API = {
    ("ClusterRole", "nvct-installer"),
    ("ClusterRoleBinding", "nvct-installer"),
    ("ValidatingAdmissionPolicy", "nvct-installer-node-label"),
    ("ValidatingAdmissionPolicyBinding", "nvct-installer-node-label"),
    ("NetworkPolicy", "nvct-installer"),
}
MATRIX: dict[str, dict[str, Any]] = {
    "defaults": {},
    "mig-mixed": {"migStrategy": "mixed", "failOnInitError": False},
    "time-slicing-config-map": {"config": {"map": {"default": TIME_SLICING}}},
    "per-node-configs": {
        "config": {"map": {"ts": TIME_SLICING, "mps": MPS}, "default": "ts"},
        "deviceListStrategy": "cdi-cri,cdi-annotations",
    },
    "external-configs": {"config": {"name": "my-configs", "default": "a"}},
    "mps": {"sharing": {"gpus": [{"devices": ["0"], "strategy": "mps", "replicas": 2}]}},
    "time-slicing": {
        "sharing": {
            "rename-by-default": True,
            "gpus": [{"devices": ["0", "1"], "strategy": "time-slicing", "replicas": 4}],
        }
    },
    "exporter-off": {"exporter": {"enabled": False}},
    "per-pod-usage-crio": {"exporter": {"perPodUsage": True}, "installer": {"engine": "crio"}},
    "installer-off": {"installer": {"enabled": False}},
    "label-nodes-off": {"installer": {"labelNodes": False}},
    "all-optional-off": {
        "exporter": {"enabled": False},
        "installer": {"enabled": False},
        "gfd": {"enabled": False},
        "mpsControl": {"enabled": False},
        "admission": {"enabled": False},
        "networkPolicy": {"enabled": False},
    },
    "custom-scheduling": {
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml"}],
        "nodeSelector": {"pool": "gpu"},
        "affinity": AFFINITY,
    },
    "nfd": {"nfd": {"enabled": True}},
    "priority-class": {"priorityClassName": "gpu-critical"},
    "image-override": {
        "image": {"repository": "registry.example/nvct", "tag": "9.9.9", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "registry"}],
    },
    "driver-container": {
        "nvidiaDriverRoot": "/run/nvidia/driver",
        "compatWithCPUManager": True,
        "deviceIDStrategy": "index",
    },
    "nvidia-only-keys": {
        "nvidiaDevRoot": "/",
        "gdrcopyEnabled": True,
        "gdsEnabled": False,
        "mofedEnabled": True,
        "deviceDiscoveryStrategy": "nvml",
        "cdi": {"nvidiaHookPath": "/usr/bin/nvidia-cdi-hook", "featureFlags": "a,b"},
    },
}


def rendered(values: dict[str, Any], namespace: str = "nvct-system") -> list[dict[str, Any]]:
    with helm.Chart.load(CHART) as chart:
        texts = chart.render(values=values, name="nvct", namespace=namespace)
    return [
        doc
        for path, text in texts.items()
        if path.endswith(".yaml")  # not NOTES.txt
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def notes(values: dict[str, Any]) -> str:
    """What ``helm install`` prints after installing with ``values``."""
    with helm.Chart.load(CHART) as chart:
        texts = chart.render(values=values, name="nvct", namespace="nvct-system")
    return " ".join(texts["nvct/templates/NOTES.txt"].split())


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod.get("initContainers", []) + pod["containers"]}


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def plugin_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return find(docs, "DaemonSet", "nvct-device-plugin")["spec"]["template"]["spec"]


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_the_chart_lints_without_a_finding_above_info(case: str) -> None:
    report = helm.lint(CHART, MATRIX[case], namespace="nvct-system", strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] > 1] == []


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_rendered_object_validates_strictly(case: str, version: str) -> None:
    named = [(f"{case}: {d['metadata']['name']}", d) for d in rendered(MATRIX[case])]
    assert invalid(named, version) == []


def test_the_plain_manifests_are_the_charts_default_rendering() -> None:
    """deployments/*.yaml cannot drift from the chart: `make deployments` writes them."""
    assert render.differing() == []
    generated = set(render.plain_manifests())
    kustomization = yaml.safe_load((ROOT / "deployments/kustomization.yaml").read_text())
    assert generated == set(kustomization["resources"]) - {"namespace.yaml"}


def test_nvidias_keys_are_the_charts_values() -> None:
    with helm.Chart.load(CHART) as chart:
        values = chart.values
        assert chart.metadata["appVersion"] == __import__("nvct").__version__
    nvidia = {"migStrategy", "failOnInitError", "deviceListStrategy", "deviceIDStrategy",
              "nvidiaDriverRoot", "compatWithCPUManager", "config", "runtimeClassName", "gfd",
              "nfd", "tolerations", "nodeSelector", "affinity", "priorityClassName", "image",
              "resources", "mps", "imagePullSecrets", "nvidiaDevRoot", "gdrcopyEnabled",
              "gdsEnabled", "mofedEnabled", "deviceDiscoveryStrategy", "cdi"}  # fmt: skip
    assert nvidia <= set(values)
    assert set(values["config"]) >= {"map", "default", "name", "fallbackStrategies"}
    assert set(values["image"]) == {"repository", "pullPolicy", "tag"}


NVIDIA_ONLY = {
    "NVIDIA_DEV_ROOT": "/",
    "GDRCOPY_ENABLED": "true",
    "GDS_ENABLED": "false",
    "MOFED_ENABLED": "true",
    "DEVICE_DISCOVERY_STRATEGY": "nvml",
    "NVIDIA_CDI_HOOK_PATH": "/usr/bin/nvidia-cdi-hook",
    "CDI_FEATURE_FLAGS": "a,b",
}


def test_nvidias_values_reach_the_plugin_under_nvidias_names() -> None:
    values = MATRIX["driver-container"] | MATRIX["mig-mixed"] | {"deviceListStrategy": "envvar"}
    docs = rendered(values)
    env = env_of(containers(plugin_pod(docs))["device-plugin"])
    wanted = {
        "MIG_STRATEGY": "mixed",
        "FAIL_ON_INIT_ERROR": "false",
        "PASS_DEVICE_SPECS": "true",
        "DEVICE_LIST_STRATEGY": "envvar",
        "DEVICE_ID_STRATEGY": "index",
        "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver",
        "CONTAINER_DRIVER_ROOT": "/host/run/nvidia/driver",  # the node's / is at /host
        "NVIDIA_MIG_MONITOR_DEVICES": "all",
    }
    assert {k: env.get(k) for k in wanted} == wanted
    # the keys nvct-device-plugin may not honour reach it too, to be named in its log
    env = env_of(containers(plugin_pod(rendered(MATRIX["nvidia-only-keys"])))["device-plugin"])
    assert {k: env[k] for k in NVIDIA_ONLY} == NVIDIA_ONLY
    # unset values leave the plugin's own defaults: none of NVIDIA's names is set
    default_env = env_of(containers(plugin_pod(rendered({})))["device-plugin"])
    assert set(default_env) == {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "MPS_ROOT"}


def _config_toml(docs: list[dict[str, Any]], name: str = "nvct-device-plugin") -> Any:
    from nvct.config import parse_config

    text = find(docs, "ConfigMap", name)["data"]["config.toml"]
    return parse_config(text.encode(), source="the chart's config.toml")


def test_mig_reaches_the_labeller_too_and_admission_lets_only_the_plugin_add_sys_admin() -> None:
    from tests.deployments.test_admission import refusals as admission_refusals

    docs = rendered(MATRIX["mig-mixed"])
    config = _config_toml(docs)
    assert config.device_plugin.mig_strategy == "mixed"  # what the labeller and MPS read
    policy = find(docs, "ValidatingAdmissionPolicy", "nvct-system-pods")
    template = find(docs, "DaemonSet", "nvct-device-plugin")["spec"]["template"]
    plugin = containers(template["spec"])["device-plugin"]
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert admission_refusals(policy, template, "nvct-system") == []
    exporter = find(docs, "DaemonSet", "nvct-exporter")["spec"]["template"]
    containers(exporter["spec"])["exporter"]["securityContext"]["capabilities"]["add"] = [
        "SYS_ADMIN"
    ]
    assert admission_refusals(policy, exporter, "nvct-system") != []
    plugin["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN", "NET_ADMIN"]
    assert admission_refusals(policy, template, "nvct-system") != []
    # without MIG the plugin adds nothing, and admission refuses SYS_ADMIN to it
    default = rendered({})
    template = find(default, "DaemonSet", "nvct-device-plugin")["spec"]["template"]
    containers(template["spec"])["device-plugin"]["securityContext"]["capabilities"]["add"] = [
        "SYS_ADMIN"
    ]
    policy = find(default, "ValidatingAdmissionPolicy", "nvct-system-pods")
    assert admission_refusals(policy, template, "nvct-system") != []


CONFIG_CASES = ["time-slicing-config-map", "per-node-configs", "external-configs"]


# the pods nvct-config-manager joins: their main container, and the process it signals
CONFIGURED = {
    "nvct-device-plugin": ("device-plugin", "nvct-device-plugin"),
    "nvct-labeller": ("labeller", "nvct-cli"),
    "nvct-mps-control": ("mps-control", "nvct-cli"),
}


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector's matchLabels and matchExpressions (In, NotIn, Exists) on ``labels``."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for rule in selector.get("matchExpressions", []):
        key, op, values = rule["key"], rule["operator"], rule.get("values", [])
        ok = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels}[op]  # fmt: skip
        if not ok:
            return False
    return True


@pytest.mark.parametrize("case", CONFIG_CASES)
def test_a_config_map_brings_nvct_config_manager_as_nvidias_chart_does(case: str) -> None:
    """To the device plugin's pod, and the labeller's and mps-control's (as NVIDIA's GFD and
    MPS DaemonSets), so every node component follows the node's chosen config."""
    from nvct.configmanager.processes import program
    from tests.deployments.test_admission import refusals as admission_refusals

    values = MATRIX[case]
    docs = rendered(values)
    configs = values["config"].get("name") or "nvct-device-plugin-configs"
    fixed = {
        "NODE_LABEL": "nvidia.com/device-plugin.config",
        "CONFIG_FILE_SRCDIR": "/available-configs",
        "CONFIG_FILE_DST": "/config/config.yaml",
        "DEFAULT_CONFIG": values["config"].get("default", ""),
        "FALLBACK_STRATEGIES": "named,single",
    }
    policy = find(docs, "ValidatingAdmissionPolicy", "nvct-system-pods")
    # past the namespace's default deny: these pods, to the API server's ports
    egress = find(docs, "NetworkPolicy", "nvct-config-manager")["spec"]
    assert egress["policyTypes"] == ["Egress"] and "ingress" not in egress
    assert [p["port"] for rule in egress["egress"] for p in rule["ports"]] == [443, 6443]
    subjects = []
    for name, (main, process) in CONFIGURED.items():
        template = find(docs, "DaemonSet", name)["spec"]["template"]
        pod = template["spec"]
        assert pod["shareProcessNamespace"] is True, name
        assert pod["automountServiceAccountToken"] is False  # only the config-manager's get one
        (init,) = pod["initContainers"]
        sidecar = containers(pod)["config-manager"]
        for container, oneshot in ((init, True), (sidecar, False)):
            env = env_of(container)
            assert container["command"] == ["nvct-config-manager"]
            assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
            assert {k: env[k] for k in fixed} == fixed
            assert env["ONESHOT"] == str(oneshot).lower()
            assert env["SEND_SIGNAL"] == str(not oneshot).lower()
            assert (env["SIGNAL"], env["PROCESS_TO_SIGNAL"]) == (
                ("", "") if oneshot else ("1", process)  # SIGHUP
            )
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert mounts["/var/run/secrets/kubernetes.io/serviceaccount"] == "api-access"
        component = containers(pod)[main]
        # the process the sidecar signals is the component as the image runs it (a packaged
        # launcher: python3 -IS /usr/bin/<command>)
        command = component["command"]
        assert program(["/usr/bin/python3", "-IS", f"/usr/bin/{command[0]}", *command[1:]]) == (
            process
        ), name
        assert env_of(component)["CONFIG_FILE"] == fixed["CONFIG_FILE_DST"], name
        component_mounts = {m["mountPath"]: m for m in component["volumeMounts"]}
        assert component_mounts["/config"]["readOnly"] is True, name
        assert "api-access" not in {m["name"] for m in component["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["available-configs"]["configMap"]["name"] == configs
        assert admission_refusals(policy, template, "nvct-system") == [], name
        assert _selects(egress["podSelector"], template["metadata"]["labels"]), name
        subjects.append(
            {
                "kind": "ServiceAccount",
                "name": pod["serviceAccountName"],
                "namespace": "nvct-system",
            }
        )
    # no other pod gets the egress
    exporter = find(docs, "DaemonSet", "nvct-exporter")["spec"]["template"]["metadata"]
    assert not _selects(egress["podSelector"], exporter["labels"])
    # RBAC: get, list and watch on nodes, for those pods' service accounts, nothing more
    role = find(docs, "ClusterRole", "nvct-config-manager")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]
    binding = find(docs, "ClusterRoleBinding", "nvct-config-manager")
    assert binding["roleRef"]["name"] == "nvct-config-manager"
    assert binding["subjects"] == subjects
    assert [d for d in docs if d["kind"] in ("Role", "RoleBinding")] == []
    if "map" in values["config"]:
        data = find(docs, "ConfigMap", configs)["data"]
        assert {k: v + "\n" for k, v in data.items()} == values["config"]["map"]
        assert yaml.safe_load(data[next(iter(data))])["version"] == "v1"
    else:
        maps = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
        assert configs not in maps
    said = "within seconds to the device plugin, the labeller, mps-control."
    assert said in notes(values)
    assert "reads nvct's own config" not in notes(values)
    # without the labeller and mps-control, the binding names the plugin's account alone
    alone = rendered({**values, "gfd": {"enabled": False}, "mpsControl": {"enabled": False}})
    assert find(alone, "ClusterRoleBinding", "nvct-config-manager")["subjects"] == subjects[:1]


def test_without_a_config_map_only_the_installer_uses_the_api() -> None:
    """For its node's label (test_node_ready.py); without that, nothing of nvct does."""
    docs = rendered({})
    rbac = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"].endswith("Role")}
    assert rbac == {("ClusterRole", "nvct-installer")}
    assert "initContainers" not in plugin_pod(docs)
    policies = {d["metadata"]["name"] for d in docs if d["kind"] == "NetworkPolicy"}
    assert policies == {"nvct-default-deny", "nvct-exporter", "nvct-installer"}
    docs = rendered({"installer": {"labelNodes": False}})
    assert [d for d in docs if d["kind"].endswith(("Role", "RoleBinding"))] == []
    policies = {d["metadata"]["name"] for d in docs if d["kind"] == "NetworkPolicy"}
    assert policies == {"nvct-default-deny", "nvct-exporter"}  # no egress at all


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"config": {"name": "a", "map": {"x": "version: v1"}}}, "not both"),
        (
            {"config": {"map": {"a": "version: v1", "b": "version: v1"}}},
            "has no default config",
        ),
    ],
)
def test_contradictory_config_values_fail_with_the_fix(values: dict[str, Any], says: str) -> None:
    from helm_python.errors import HelmError

    with pytest.raises(HelmError, match=says):
        rendered(values)


@pytest.mark.parametrize("namespace", ["default", "kube-system"])
def test_a_shared_namespace_is_refused_while_admission_would_lock_it(namespace: str) -> None:
    """The pods policy admits only nvct's DaemonSets in the release's namespace: installed into
    default it would refuse every other pod there."""
    from helm_python.errors import HelmError

    with pytest.raises(HelmError, match=f"namespace {namespace}: .*helm install -n nvct-system"):
        rendered({}, namespace=namespace)
    off = rendered({"admission": {"enabled": False}}, namespace=namespace)
    # what is left judges the installer's own account only (its node label), no pod
    left = [d for d in off if d["kind"] == "ValidatingAdmissionPolicy"]
    assert [d["metadata"]["name"] for d in left] == ["nvct-installer-node-label"]
    assert left[0]["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["nodes"]


@pytest.mark.parametrize("case", ["mps", "time-slicing"])
def test_nvcts_sharing_values_are_the_plugins_sharing_rules(case: str) -> None:
    docs = rendered(MATRIX[case])
    sharing = _config_toml(docs).device_plugin.sharing
    (rule,) = MATRIX[case]["sharing"]["gpus"]
    assert [(r.devices, r.strategy, r.replicas) for r in sharing.gpus] == [
        (tuple(rule["devices"]), rule["strategy"], rule["replicas"])
    ]
    mounts = {m["mountPath"] for m in containers(plugin_pod(docs))["device-plugin"]["volumeMounts"]}
    assert sharing.mps_root in mounts
    control = find(docs, "DaemonSet", "nvct-mps-control")["spec"]["template"]["spec"]
    assert sharing.mps_root in {m["mountPath"] for m in control["containers"][0]["volumeMounts"]}
    if case == "time-slicing":
        assert sharing.rename_by_default is True


@pytest.mark.parametrize(
    ("case", "gone"),
    [
        ("exporter-off", {("DaemonSet", "nvct-exporter"), ("Service", "nvct-exporter"),
                          ("NetworkPolicy", "nvct-exporter"), ("ConfigMap", "nvct-exporter"),
                          ("ServiceAccount", "nvct-exporter")}),
        ("installer-off", {("DaemonSet", "nvct-installer"), ("ConfigMap", "nvct-runtime"),
                           ("ServiceAccount", "nvct-installer"), *INSTALLER_API}),
    ],
)  # fmt: skip
def test_optional_parts_can_be_left_out(case: str, gone: set[tuple[str, str]]) -> None:
    """Without the installer nothing labels the nodes: nothing requires the label then."""
    everything = {(d["kind"], d["metadata"]["name"]) for d in rendered({})}
    docs = rendered(MATRIX[case])
    left = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert everything - left == gone
    if case == "installer-off":
        for name, pod in daemonset_pods(docs).items():
            assert READY_LABEL not in pod.get("nodeSelector", {}), name
        assert "scheduling" not in find(docs, "RuntimeClass", "nvct-system")
    minimal = {(d["kind"], d["metadata"]["name"]) for d in rendered(MATRIX["all-optional-off"])}
    assert {name for kind, name in minimal if kind == "DaemonSet"} == {"nvct-device-plugin"}


def daemonset_pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    sets = [d for d in docs if d["kind"] == "DaemonSet"]
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in sets}


def test_scheduling_image_and_priority_values_reach_every_daemonset() -> None:
    for name, pod in daemonset_pods(rendered(MATRIX["custom-scheduling"])).items():
        ready = {} if name in UNBOUND else {READY_LABEL: "true"}
        assert pod["nodeSelector"] == {"pool": "gpu", **ready}, name
        assert pod["affinity"] == AFFINITY, name
        assert pod["tolerations"] == MATRIX["custom-scheduling"]["tolerations"], name
    for name, pod in daemonset_pods(rendered(MATRIX["image-override"])).items():
        for container in containers(pod).values():
            assert container["image"] == "registry.example/nvct:9.9.9", name
            assert container["imagePullPolicy"] == "Always", name
        assert pod["imagePullSecrets"] == [{"name": "registry"}], name
    pods = daemonset_pods(rendered(MATRIX["priority-class"]))
    assert {n for n, p in pods.items() if p.get("priorityClassName") == "gpu-critical"} == {
        "nvct-device-plugin", "nvct-installer", "nvct-mps-control"}  # fmt: skip


# What a freshly joined GPU node carries without node-feature-discovery: the kubelet's own labels.
FRESH_GPU_NODE = {
    "metadata": {
        "name": "gpu-1",
        "labels": {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": "gpu-1",
        },
    },
    "spec": {},
}
READY_GPU_NODE = {
    "metadata": {
        "name": "gpu-1",
        "labels": {**FRESH_GPU_NODE["metadata"]["labels"], READY_LABEL: "true"},
    },
    "spec": {},
}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TAINTED = {**READY_GPU_NODE, "spec": {"taints": [GPU_TAINT]}}
NFD_LABEL = {"feature.node.kubernetes.io/pci-10de.present": "true"}
NFD_GPU_NODE = {
    "metadata": {"name": "gpu-2", "labels": {**READY_GPU_NODE["metadata"]["labels"], **NFD_LABEL}}
}


def admitted(docs: list[dict[str, Any]], pod: dict[str, Any], node: dict[str, Any]) -> list[str]:
    """Why ``pod`` cannot run on ``node``, its RuntimeClass's scheduling merged in (admission
    adds its nodeSelector and tolerations to the pod)."""
    if "runtimeClassName" in pod:
        runtime_class = find(docs, "RuntimeClass", pod["runtimeClassName"])
        scheduling = runtime_class.get("scheduling", {})
        pod = {
            **pod,
            "nodeSelector": {**pod.get("nodeSelector", {}), **scheduling.get("nodeSelector", {})},
            "tolerations": pod.get("tolerations", []) + scheduling.get("tolerations", []),
        }
    return refusals(pod, node)


def test_with_default_values_every_daemonset_runs_on_a_fresh_gpu_node_without_nfd() -> None:
    """A fresh node (the kubelet's labels alone, GPU or not) gets no pod on nvct's handler, so
    a CPU-only node has none waiting for a handler its installer never registers (helm
    install --wait finishes); once the installer labelled a GPU node, every DaemonSet runs."""
    docs = rendered({})
    pods = daemonset_pods(docs)
    assert len(pods) == 5
    fresh = {n for n, p in pods.items() if admitted(docs, p, FRESH_GPU_NODE) == []}
    assert fresh == UNBOUND
    assert not any(pods[n].get("runtimeClassName") for n in fresh)
    for name, pod in pods.items():
        if name not in UNBOUND:
            assert admitted(docs, pod, FRESH_GPU_NODE) == [f"nodeSelector {READY_LABEL}=true"]
    for node in (READY_GPU_NODE, TAINTED):
        for name, pod in pods.items():
            assert admitted(docs, pod, node) == [], name
    # NVIDIA's operator label still takes the plugin and exporter off a node (a GPU reset)
    operator = {f"nvidia.com/gpu.deploy.{c}": "false" for c in ("device-plugin", "dcgm-exporter")}
    off = {"metadata": {"name": "gpu-1", "labels": {READY_LABEL: "true", **operator}}}
    taken_off = {n for n, p in pods.items() if refusals(p, off)}
    assert taken_off == {"nvct-device-plugin", "nvct-exporter"}
    # workloads on the RuntimeClass nvidia are not kept off a node NFD never labelled
    assert "scheduling" not in find(docs, "RuntimeClass", "nvidia")


def test_with_nfd_the_daemonsets_need_nfds_pci_label_as_nvidias_do() -> None:
    docs = rendered(MATRIX["nfd"])
    for name, pod in daemonset_pods(docs).items():
        assert admitted(docs, pod, FRESH_GPU_NODE) != [], name
        assert admitted(docs, pod, NFD_GPU_NODE) == [], name
        forced = {"metadata": {"name": "x", "labels": {"nvidia.com/gpu.present": "true",
                                                       READY_LABEL: "true"}}}  # fmt: skip
        assert admitted(docs, pod, forced) == [], name
        unready = {"metadata": {"name": "x", "labels": NFD_LABEL}}  # NFD alone: installer only
        assert (admitted(docs, pod, unready) == []) is (name in UNBOUND), name
    nvidia = find(docs, "RuntimeClass", "nvidia")
    assert nvidia["scheduling"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def test_the_namespace_is_the_releases() -> None:
    docs = rendered({}, namespace="gpu-system")
    namespaced = [d for d in docs if d["kind"] not in (
        "ClusterRole", "ClusterRoleBinding", "RuntimeClass", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding")]  # fmt: skip
    assert {d["metadata"]["namespace"] for d in namespaced} == {"gpu-system"}
    binding = find(docs, "ValidatingAdmissionPolicyBinding", "nvct-system-pods")
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "gpu-system"
    }
    (rule,) = find(docs, "ValidatingAdmissionPolicy", "nvct-system-runtimeclass")["spec"][
        "validations"
    ]
    assert "request.namespace == 'gpu-system'" in rule["expression"]


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"migStrategy": "weird"}, "/migStrategy"),
        ({"deviceListStrategy": "envvar,nope"}, "/deviceListStrategy"),
        ({"deviceIDStrategy": "serial"}, "/deviceIDStrategy"),
        ({"failOnInitError": "no"}, "/failOnInitError"),
        ({"nvidiaDriverRoot": "run/nvidia/driver"}, "/nvidiaDriverRoot"),
        ({"installer": {"engine": "docker"}}, "/installer/engine"),
        ({"exporter": {"port": 0}}, "/exporter/port"),
        ({"exporter": {"criSocket": "run/containerd/containerd.sock"}}, "/exporter/criSocket"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"config": {"fallbackStrategies": ["first"]}}, "/config/fallbackStrategies/0"),
        ({"gfd": {"sleepInterval": "1h"}}, "/gfd/sleepInterval"),
    ],
)
def test_a_bad_value_fails_the_install_naming_its_key(values: dict[str, Any], key: str) -> None:
    """values.schema.json: Helm refuses the install and names the key, before any pod fails."""
    from helm_python.errors import HelmValuesError

    with pytest.raises(HelmValuesError, match=f"at '{key}'"):
        rendered(values)


@pytest.mark.parametrize(("interval", "seconds"), [(60, "60"), ("90s", "90"), ("2m", "120")])
def test_the_labellers_interval_takes_nvidias_durations(interval: Any, seconds: str) -> None:
    from nvct.cli.labels_cmd import labels

    docs = rendered({"gfd": {"sleepInterval": interval}})
    (container,) = find(docs, "DaemonSet", "nvct-labeller")["spec"]["template"]["spec"][
        "containers"
    ]
    command = container["command"]
    assert command[command.index("--interval") + 1] == seconds
    options = command[command.index("labels") + 1 :]
    parsed = labels.make_context("labels", options, resilient_parsing=True)
    assert parsed.params["interval"] == float(seconds)


# A values file written for NVIDIA's chart: every top-level key of its values.yaml (v0.20.0),
# with the GPU operator's runtime class, NFD's affinity and null where NVIDIA leaves a default.
NVIDIA_VALUES: dict[str, Any] = {
    "config": {"name": "", "map": {}, "default": "", "fallbackStrategies": ["named", "single"]},
    "compatWithCPUManager": None,
    "migStrategy": "single",
    "failOnInitError": True,
    "deviceListStrategy": None,
    "deviceIDStrategy": None,
    "nvidiaDriverRoot": None,
    "gdrcopyEnabled": None,
    "gdsEnabled": None,
    "mofedEnabled": None,
    "deviceDiscoveryStrategy": None,
    "nameOverride": "",
    "fullnameOverride": "",
    "namespaceOverride": "",
    "selectorLabelsOverride": {},
    "allowDefaultNamespace": False,
    "imagePullSecrets": [],
    "image": {"repository": "registry.example/nvct", "pullPolicy": "IfNotPresent", "tag": ""},
    "updateStrategy": {"type": "RollingUpdate"},
    "podAnnotations": {},
    "podSecurityContext": {},
    "securityContext": {},
    "resources": {},
    "nodeSelector": {},
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present",
                                           "operator": "In", "values": ["true"]}]},
                    {"matchExpressions": [{"key": "nvidia.com/gpu.present",
                                           "operator": "In", "values": ["true"]}]},
                ]
            }
        }
    },
    "tolerations": [
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ],
    "priorityClassName": "system-node-critical",
    "runtimeClassName": "nvidia",
    "devicePlugin": {"enabled": True},
    "gfd": {"enabled": True, "nameOverride": "gpu-feature-discovery", "namespaceOverride": "",
            "noTimestamp": None, "sleepInterval": "60s", "securityContext": {"privileged": True}},
    "nfd": {"nameOverride": "node-feature-discovery", "enabled": True,
            "master": {"config": {"extraLabelNs": ["nvidia.com"]}}},
    "mps": {"root": "/run/nvidia/mps", "enableHostPID": True},
    "cdi": {"nvidiaHookPath": None, "featureFlags": None},
}  # fmt: skip


def test_a_values_file_written_for_nvidias_chart_installs_nvct() -> None:
    """Its keys keep NVIDIA's meaning; what nvct does differently is said in NOTES.txt."""
    docs = rendered(NVIDIA_VALUES)
    pods = daemonset_pods(docs)
    plugin = pods["nvct-device-plugin"]
    env = env_of(containers(plugin)["device-plugin"])
    assert (env["MIG_STRATEGY"], env["FAIL_ON_INIT_ERROR"]) == ("single", "true")
    assert env["MPS_ROOT"] == "/run/nvidia/mps"
    # the daemons' side looks where the plugin does, whatever a node's chosen config says
    control = env_of(containers(pods["nvct-mps-control"])["mps-control"])
    assert control["MPS_ROOT"] == "/run/nvidia/mps"
    # NVIDIA's "nvidia" (the class that gives the plugin its GPUs) is nvct-system for nvct
    on_gpus = ("nvct-device-plugin", "nvct-labeller", "nvct-exporter")
    assert {pods[n].get("runtimeClassName") for n in on_gpus} == {"nvct-system"}
    assert "runtimeClassName \"nvidia\" (NVIDIA's chart's value)" in notes(NVIDIA_VALUES)
    for name, pod in pods.items():
        assert pod["affinity"] == NVIDIA_VALUES["affinity"], name
        assert admitted(docs, pod, NFD_GPU_NODE) == [], name
    assert admitted(docs, plugin, FRESH_GPU_NODE) != []  # NVIDIA's affinity needs NFD
    assert "No node-feature-discovery" not in notes(NVIDIA_VALUES)
    assert f"kubectl get nodes -l {READY_LABEL}=true" in notes({})
    assert "No node-feature-discovery" in notes({"installer": {"labelNodes": False}})
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert names >= {(d["kind"], d["metadata"]["name"]) for d in rendered({})}


@pytest.mark.parametrize(
    ("entry", "mig"),
    [
        ("version: v1\nflags:\n  migStrategy: mixed\n", True),
        ('{"version": "v1", "flags": {"migStrategy": "single"}}', True),
        ("version: v1\nflags:\n  migStrategy: none\n", False),
    ],
)
def test_a_mig_strategy_in_a_config_map_entry_gives_the_plugin_mig_access(
    entry: str, mig: bool
) -> None:
    """A node's label may choose an entry with MIG on: the plugin's pod can see MIG devices
    whichever entry it gets (as NVIDIA's chart reads its entries)."""
    from tests.deployments.test_admission import refusals as admission_refusals

    docs = rendered({"config": {"map": {"default": TIME_SLICING, "mig": entry}}})
    template = find(docs, "DaemonSet", "nvct-device-plugin")["spec"]["template"]
    plugin = containers(template["spec"])["device-plugin"]
    assert ("NVIDIA_MIG_MONITOR_DEVICES" in env_of(plugin)) is mig
    assert ("add" in plugin["securityContext"]["capabilities"]) is mig
    policy = find(docs, "ValidatingAdmissionPolicy", "nvct-system-pods")
    assert admission_refusals(policy, template, "nvct-system") == []


@pytest.mark.parametrize(
    ("values", "socket"),
    [
        ({}, "/run/containerd/containerd.sock"),
        ({"installer": {"engine": "crio"}}, "/var/run/crio/crio.sock"),
        ({"exporter": {"criSocket": "/run/k3s/containerd/containerd.sock"}},
         "/run/k3s/containerd/containerd.sock"),
    ],
)  # fmt: skip
def test_per_pod_usage_gives_the_exporter_host_pid_and_the_cri_socket_and_nothing_else(
    values: dict[str, Any], socket: str
) -> None:
    """exporter.perPodUsage, the exporter's named exception: the node's PID namespace and the
    runtime's CRI socket read-only, which admission then allows the exporter alone."""
    from tests.deployments.test_admission import refusals as admission_refusals

    def exporter_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
        return dict(find(docs, "DaemonSet", "nvct-exporter")["spec"]["template"])

    off = rendered(values)
    template = exporter_of(off)
    assert "hostPID" not in template["spec"]
    assert _config_toml(off, "nvct-exporter").exporter.per_pod_usage is False
    assert socket not in {v.get("hostPath", {}).get("path") for v in template["spec"]["volumes"]}
    template["spec"]["hostPID"] = True  # off, the exporter may not take the node's PIDs
    policy = find(off, "ValidatingAdmissionPolicy", "nvct-system-pods")
    assert admission_refusals(policy, template, "nvct-system") != []

    on = rendered({**values, "exporter": {**values.get("exporter", {}), "perPodUsage": True}})
    template = exporter_of(on)
    pod = template["spec"]
    assert pod["hostPID"] is True
    config = _config_toml(on, "nvct-exporter").exporter
    assert (config.per_pod_usage, config.cri_socket) == (True, socket)
    volumes = {v["name"]: v for v in pod["volumes"]}
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == socket]
    assert mount["readOnly"] is True
    assert volumes[mount["name"]]["hostPath"] == {"path": socket, "type": "Socket"}
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    policy = find(on, "ValidatingAdmissionPolicy", "nvct-system-pods")
    assert admission_refusals(policy, template, "nvct-system") == []
    # exactly that: no other socket or directory, no privilege; no other pod gets hostPID
    wider = {**pod, "volumes": [*pod["volumes"], {"name": "x", "hostPath": {"path": "/run"}}]}
    assert admission_refusals(policy, {**template, "spec": wider}, "nvct-system") != []
    privileged = copy.deepcopy(template)
    privileged["spec"]["containers"][0]["securityContext"]["privileged"] = True
    assert admission_refusals(policy, privileged, "nvct-system") != []
    for name in ("nvct-labeller", "nvct-device-plugin"):
        other = copy.deepcopy(find(on, "DaemonSet", name)["spec"]["template"])
        other["spec"]["hostPID"] = True
        refused = admission_refusals(policy, other, "nvct-system")
        assert any("nvct-exporter (exporter.perPodUsage) share" in m for m in refused), name
