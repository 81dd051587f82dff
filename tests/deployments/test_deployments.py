"""deployments/: every manifest validates against the Kubernetes schemas of the oldest and newest
versions nvct supports, names only what nvct has, and the installer's script installs and
uninstalls exactly (on a node root in a temporary directory)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

DEPLOYMENTS = Path(__file__).resolve().parents[2] / "deployments"
MANIFESTS = sorted(p for p in DEPLOYMENTS.glob("*.yaml") if p.name != "kustomization.yaml")
# Oldest: device plugins' GetPreferredAllocation and RuntimeClass scheduling are long stable;
# cdi_devices in Allocate needs 1.29+ (the device plugin's cdi-cri strategy).
VERSIONS = ("1.27.0", "1.37.0")
# Kinds newer than the oldest version: checked against the first version that has them (a
# cluster older than that applies deployments/ without admission.yaml).
FIRST_VERSION = {
    "ValidatingAdmissionPolicy": "1.30.0",  # admissionregistration.k8s.io/v1: GA in 1.30
    "ValidatingAdmissionPolicyBinding": "1.30.0",
}


def documents() -> list[tuple[str, dict]]:
    return [
        (f"{path.name}#{i}", doc)
        for path in MANIFESTS
        for i, doc in enumerate(yaml.safe_load_all(path.read_text()))
        if doc
    ]


def invalid(named: list[tuple[str, dict]], version: str) -> list[str]:
    """What fails strict validation against ``version``'s schemas (a kind newer than it against
    the first version that has it), one line per object."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    failed = []
    for name, doc in named:
        first = FIRST_VERSION.get(doc["kind"], version)
        against = max(version, first, key=lambda v: tuple(int(n) for n in v.split(".")))
        try:
            kubernetes_validate.validate(doc, against, strict=True)
        except kubernetes_validate.ValidationError as err:
            failed.append(f"{name} ({doc['kind']}) against {against}: {err.message}")
    return failed


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_validates_strictly(version: str) -> None:
    assert invalid(documents(), version) == []


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DEPLOYMENTS / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == [p.name for p in MANIFESTS]


def test_workloads_run_nvcts_image_with_no_token_and_only_what_they_need() -> None:
    """No pod mounts the default token; the installer alone gets one (a projected volume), and
    RBAC gives it get and patch on nodes (its node's label: test_node_ready.py)."""
    workloads = [doc for _, doc in documents() if doc["kind"] == "DaemonSet"]
    names = {w["metadata"]["name"] for w in workloads}
    assert names >= {
        "nvct-installer",
        "nvct-labeller",
        "nvct-device-plugin",
        "nvct-exporter",
        "nvct-mps-control",
    }
    accounts = {d["metadata"]["name"] for _, d in documents() if d["kind"] == "ServiceAccount"}
    roles = [d for _, d in documents() if d["kind"] in ("Role", "ClusterRole")]
    assert [(r["metadata"]["name"], r["rules"]) for r in roles] == [
        ("nvct-installer", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}])
    ]
    for w in workloads:
        pod = w["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] in accounts
        assert pod["automountServiceAccountToken"] is False
        assert {c["image"] for c in pod["containers"]} == {"nvct:0.1.0"}
        tokens = [v for v in pod["volumes"] if "serviceAccountToken" in str(v)]
        assert bool(tokens) is (w["metadata"]["name"] == "nvct-installer")


PRIVILEGED = {"nvct-installer", "nvct-mps-control"}
# The host paths an unprivileged DaemonSet writes, and why; every other one is read-only.
WRITABLE = {
    "nvct-device-plugin": {
        "/var/lib/kubelet/device-plugins",  # its sockets and status file
        "/var/run/cdi",  # its CDI spec
        "/run/nvct/mps",  # the MPS probe's client talks through the daemons' pipes
    },
    "nvct-labeller": {"/etc/kubernetes/node-feature-discovery/features.d"},  # its feature file
    "nvct-exporter": set(),
}


def daemonset_pods() -> dict[str, dict]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]
        for _, d in documents()
        if d["kind"] == "DaemonSet"
    }


def test_only_the_installer_and_mps_control_are_privileged() -> None:
    """README, Security model in the cluster: the others get their GPUs from nvct-runtime
    (RuntimeClass nvct-system, NVIDIA_VISIBLE_DEVICES=all) and run hardened."""
    from nvct.cli.main import cli

    pods = daemonset_pods()
    assert set(pods) == PRIVILEGED | set(WRITABLE)
    for name, pod in pods.items():
        for container in pod["containers"]:
            context = container.get("securityContext", {})
            assert context.get("privileged", False) is (name in PRIVILEGED), name
            if name in PRIVILEGED:
                continue
            assert pod["runtimeClassName"] == "nvct-system", name
            env = {e["name"]: e.get("value") for e in container.get("env", ())}
            assert env["NVIDIA_VISIBLE_DEVICES"] == "all", name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            assert context["readOnlyRootFilesystem"] is True, name
            seccomp = context.get("seccompProfile") or pod["securityContext"]["seccompProfile"]
            assert seccomp == {"type": "RuntimeDefault"}, name
            for probe in (container["readinessProbe"], container["livenessProbe"]):
                command = probe.get("exec", {}).get("command")
                if command and command[0] == "nvct-cli":  # one nvct-cli accepts
                    cli.make_context("nvct-cli", command[1:], resilient_parsing=True)
                else:
                    assert command or probe.get("httpGet"), (name, probe)
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), name
            assert {"cpu", "memory"} <= set(resources["limits"]), name
            host_paths = {
                v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v
            }
            written = {
                host_paths[m["name"]]
                for m in container["volumeMounts"]
                if m["name"] in host_paths and not m.get("readOnly", False)
            }
            assert written == WRITABLE[name], name
        assert not pod.get("hostNetwork") and not pod.get("hostIPC"), name
        assert bool(pod.get("hostPID")) is (name == "nvct-installer"), name


def test_the_system_runtime_class_runs_nvct_runtime_with_the_guard_off() -> None:
    """RuntimeClass nvct-system -> handler nvct-system (node-install.sh registers it) ->
    nvct-system-runtime -> the installer's system.toml, where only-allocated-gpus is off; the
    node's config.toml keeps it on."""
    from nvct.config import parse_config

    (runtime_class,) = [d for _, d in documents() if d["kind"] == "RuntimeClass"
                        and d["metadata"]["name"] == "nvct-system"]  # fmt: skip
    # only where the installer registered the handler (and labelled the node)
    assert runtime_class["scheduling"] == {"nodeSelector": {"nvct.io/runtime.ready": "true"}}
    script = (DEPLOYMENTS / "node-install.sh").read_text()
    assert f"SYSTEM_RUNTIME={runtime_class['handler']}\n" in script
    wrapper = (DEPLOYMENTS / "nvct-system-runtime").read_text()
    assert "exec /usr/bin/nvct-runtime" in wrapper
    assert os.access(DEPLOYMENTS / "nvct-system-runtime", os.X_OK)
    installer = daemonset_pods()["nvct-installer"]
    maps = {d["metadata"]["name"]: d["data"] for _, d in documents() if d["kind"] == "ConfigMap"}
    name, key = _mounted_config(installer, "/etc/nvct/system.toml")
    assert "/etc/nvct/system.toml}" in wrapper  # its default
    system = parse_config(maps[name][key].encode(), source=f"configmap {name} {key}")
    assert system.request.only_allocated_gpus is False
    name, key = _mounted_config(installer, "/etc/nvct/config.toml")
    assert parse_config(maps[name][key].encode(), source="node").request.only_allocated_gpus is True


def test_no_pod_but_the_exporter_gets_traffic() -> None:
    policies = {d["metadata"]["name"]: d["spec"] for _, d in documents()
                if d["kind"] == "NetworkPolicy"}  # fmt: skip
    deny = policies["nvct-default-deny"]
    assert deny["podSelector"] == {} and set(deny["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny and "egress" not in deny
    exporter = policies["nvct-exporter"]
    (rule,) = exporter["ingress"]
    (container,) = daemonset_pods()["nvct-exporter"]["containers"]
    (port,) = container["ports"]
    assert rule["ports"] == [{"port": port["name"], "protocol": "TCP"}]
    (ds,) = [d for _, d in documents() if d["kind"] == "DaemonSet"
             and d["metadata"]["name"] == "nvct-exporter"]  # fmt: skip
    assert exporter["podSelector"]["matchLabels"] == ds["spec"]["selector"]["matchLabels"]


def test_the_exporters_config_command_mounts_and_service() -> None:
    """Its ConfigMap passes nvct's validation, its command parses, the kubelet's sockets are
    mounted read-only, and the Service's port and scrape annotations name the container's."""
    from nvct.cli.main import cli
    from nvct.config import parse_config

    (config_map,) = [d for _, d in documents() if d["kind"] == "ConfigMap"
                     and d["metadata"]["name"] == "nvct-exporter"]  # fmt: skip
    config = parse_config(config_map["data"]["config.toml"].encode(), source="configmap")
    (ds,) = [d for _, d in documents() if d["kind"] == "DaemonSet"
             and d["metadata"]["name"] == "nvct-exporter"]  # fmt: skip
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[0] == "nvct-cli" and "exporter" in command
    cli.make_context("nvct-cli", command[1:], resilient_parsing=True)
    mounts = {v["mountPath"]: v.get("readOnly", False) for v in container["volumeMounts"]}
    assert mounts[str(Path(config.exporter.pod_resources_socket).parent)] is True
    assert mounts[config.device_plugin.plugin_dir] is True
    assert mounts[str(config.driver_root)] is True
    (port,) = container["ports"]
    assert port["containerPort"] == config.exporter.port == 9400
    (service,) = [d for _, d in documents() if d["kind"] == "Service"]
    assert service["spec"]["selector"] == ds["spec"]["selector"]["matchLabels"]
    assert service["metadata"]["annotations"]["prometheus.io/port"] == str(config.exporter.port)
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]


def test_the_device_plugins_config_and_command_are_valid(tmp_path: Path) -> None:
    """Its ConfigMap's config.toml passes nvct's own validation, and its flags parse."""
    from nvct.config import parse_config
    from nvct.deviceplugin.__main__ import cli

    (config_map,) = [d for _, d in documents() if d["kind"] == "ConfigMap"
                     and d["metadata"]["name"] == "nvct-device-plugin"]  # fmt: skip
    config = parse_config(config_map["data"]["config.toml"].encode(), source="configmap")
    assert config.device_plugin.device_list_strategy == ("cdi-cri", "cdi-annotations")
    (plugin,) = [d for _, d in documents() if d["kind"] == "DaemonSet"
                 and d["metadata"]["name"] == "nvct-device-plugin"]  # fmt: skip
    command = plugin["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[0] == "nvct-device-plugin"
    cli.make_context("nvct-device-plugin", command[1:])
    mounts = {
        v["mountPath"] for v in plugin["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    }
    assert {"/var/lib/kubelet/device-plugins", "/var/run/cdi"} <= mounts
    # The commented sharing example is valid once uncommented, and its mps-root is mounted.
    text = config_map["data"]["config.toml"]
    example = "\n".join(
        line[1:] if line.startswith(("#[", "#devices", "#strategy", "#replicas", "#mps-root"))
        else line
        for line in text.splitlines()
    )  # fmt: skip
    shared = parse_config(example.encode(), source="configmap, sharing example")
    assert [(r.devices, r.strategy, r.replicas) for r in shared.device_plugin.sharing.gpus] == [
        (("0",), "time-slicing", 4)
    ]
    assert shared.device_plugin.sharing.mps_root in mounts


def test_the_labeller_command_is_one_nvct_cli_accepts() -> None:
    (labeller,) = [d for _, d in documents() if d["metadata"]["name"] == "nvct-labeller"
                   and d["kind"] == "DaemonSet"]  # fmt: skip
    command = labeller["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[0] == "nvct-cli"
    from click.testing import CliRunner

    from nvct.cli.labels_cmd import labels

    options = command[command.index("labels") + 1 :]
    parsed = labels.make_context("labels", [*options], resilient_parsing=True)
    assert parsed.params["interval"] == 60
    assert CliRunner().invoke(labels, ["--help"]).exit_code == 0
    # One config with the device plugin, and no MIG strategy of its own on the command line:
    # the labels report the MIG strategy and sharing the plugin advertises by.
    assert parsed.params["mig_strategy"] is None
    spec = labeller["spec"]["template"]["spec"]
    config = command[command.index("--config") + 1]
    (mount,) = [
        m for m in spec["containers"][0]["volumeMounts"] if config.startswith(m["mountPath"])
    ]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == "nvct-device-plugin"


def test_mps_control_reads_the_device_plugins_config_and_shares_its_mps_root() -> None:
    """One ConfigMap for both (the limits the plugin expects are the ones the daemons get),
    the command parses, and the daemons' directory is the plugin's, at the same host path."""
    from nvct.cli.main import cli
    from nvct.config import parse_config

    (control,) = [d for _, d in documents() if d["kind"] == "DaemonSet"
                  and d["metadata"]["name"] == "nvct-mps-control"]  # fmt: skip
    (plugin,) = [d for _, d in documents() if d["kind"] == "DaemonSet"
                 and d["metadata"]["name"] == "nvct-device-plugin"]  # fmt: skip
    spec = control["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    command = container["command"]
    assert command[0] == "nvct-cli" and "mps-control" in command
    cli.make_context("nvct-cli", command[1:], resilient_parsing=True)
    config_path = command[command.index("--config") + 1]

    def volume_of(pod: dict, path: str) -> dict:
        mounts = pod["containers"][0]["volumeMounts"]
        (mount,) = [m for m in mounts if path.startswith(m["mountPath"])]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        return volume

    assert volume_of(spec, config_path)["configMap"]["name"] == "nvct-device-plugin"
    (config_map,) = [d for _, d in documents() if d["kind"] == "ConfigMap"
                     and d["metadata"]["name"] == "nvct-device-plugin"]  # fmt: skip
    root = parse_config(
        config_map["data"]["config.toml"].encode(), source="configmap"
    ).device_plugin.sharing.mps_root
    plugin_spec = plugin["spec"]["template"]["spec"]
    assert volume_of(spec, root)["hostPath"] == volume_of(plugin_spec, root)["hostPath"]
    assert volume_of(spec, root)["hostPath"]["path"] == root


@pytest.fixture
def node(tmp_path: Path) -> Path:
    return node_root(tmp_path)


def node_root(tmp_path: Path) -> Path:
    """A node's root: containerd's own default config (from the real binary), a file of the
    node's that nvct would also install, nothing else."""
    containerd = shutil.which("containerd")
    if containerd is None:
        pytest.skip("needs containerd (apt-get install docker.io)")
    host = tmp_path / "host"
    (host / "etc/containerd").mkdir(parents=True)
    default = subprocess.run(
        [containerd, "config", "default"], capture_output=True, text=True, check=True
    ).stdout
    (host / "etc/containerd/config.toml").write_text(default)
    (host / "etc/nvct").mkdir(parents=True)
    (host / "etc/nvct/config.toml").write_text("# the node's own nvct config\n")
    (host / "dev").mkdir()
    (host / "dev/nvidia0").touch()  # a GPU node (the installer looks for /dev/nvidia<N>)
    return host


# The program the device plugin's CDI spec names as its hook in the image (its packaged path).
CDI_HOOK = "usr/bin/nvct-cdi-hook"
SYSTEM_RUNTIME = "usr/bin/nvct-system-runtime"  # the image's deployments/nvct-system-runtime


def packaged_image(image: Path, version: str = "") -> Path:
    """The image's packaged files (``version`` makes their content differ)."""
    for rel in ("usr/bin/nvct-runtime", "usr/share/nvct/lib/nvct/__init__.py",
                "usr/libexec/nvct/nvct-runtime", "etc/nvct/config.toml", CDI_HOOK,
                "usr/lib/nvct/grpc/grpc/__init__.py", SYSTEM_RUNTIME):  # fmt: skip
        (image / rel).parent.mkdir(parents=True, exist_ok=True)
        (image / rel).write_text(f"packaged {rel}{version}\n")
    return image


def installer_env(node: Path, image: Path, restarts: Path) -> dict[str, str]:
    """node-install.sh's environment: ``node``'s root, ``image``'s files, each engine restart
    a line in ``restarts``."""
    restart = restarts.with_suffix(".sh")  # $RESTART is split into words, not evaluated
    restart.write_text(f"#!/bin/sh\necho restart >>{restarts}\n")
    restart.chmod(0o755)
    return {
        **os.environ,
        "HOST": str(node),
        "SRC": str(image),
        "NVCT_CLI": str(Path(sys.executable).parent / "nvct-cli"),
        "RESTART": str(restart),
    }


def installer(
    node: Path, image: Path, restarts: Path
) -> Callable[[str], subprocess.CompletedProcess[str]]:
    """``node-install.sh ACTION`` on ``node`` from ``image``; each restart adds a line to
    ``restarts``."""
    env = installer_env(node, image, restarts)

    def node_install(action: str) -> subprocess.CompletedProcess[str]:
        script = str(DEPLOYMENTS / "node-install.sh")
        return subprocess.run(
            [script, action], env=env, capture_output=True, text=True, check=False
        )

    return node_install


def restarts_of(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_installer_installs_and_uninstalls_exactly(node: Path, tmp_path: Path) -> None:
    image = packaged_image(tmp_path / "image")
    before = (node / "etc/containerd/config.toml").read_bytes()
    restarts = tmp_path / "restarts"
    node_install = installer(node, image, restarts)

    done = node_install("install")
    assert done.returncode == 0, done.stdout + done.stderr
    config = (node / "etc/containerd/config.toml").read_text()
    assert 'BinaryName = "/usr/bin/nvct-runtime"' in config
    assert 'container_annotations = ["cdi.k8s.io/*"]' in config  # the plugin's CDI annotations
    # the RuntimeClass nvct-system's handler, and its wrapper
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvct-system]' in config
    assert 'BinaryName = "/usr/bin/nvct-system-runtime"' in config
    assert (node / SYSTEM_RUNTIME).read_text() == f"packaged {SYSTEM_RUNTIME}\n"
    assert (node / "usr/bin/nvct-runtime").read_text() == "packaged usr/bin/nvct-runtime\n"
    assert (node / "usr/share/nvct/lib/nvct/__init__.py").exists()
    # what the plugin's CDI spec runs on the node, and nvct-cli's gRPC
    assert (node / CDI_HOOK).exists() and (node / "usr/lib/nvct/grpc/grpc/__init__.py").exists()
    # the node's own config was there first: kept, and not listed for removal
    assert (node / "etc/nvct/config.toml").read_text() == "# the node's own nvct config\n"
    listed = (node / "var/lib/nvct/node-install.list").read_text().split()
    assert "etc/nvct/config.toml" not in listed and "usr/bin/nvct-runtime" in listed
    assert restarts_of(restarts) == 1
    again = node_install("install")
    assert again.returncode == 0, again.stderr  # idempotent
    assert restarts_of(restarts) == 1 and "config unchanged" in again.stdout
    done = node_install("uninstall")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (node / "etc/containerd/config.toml").read_bytes() == before
    assert not (node / "usr/bin/nvct-runtime").exists()
    assert not (node / "usr/share/nvct").exists() and not (node / "usr/libexec/nvct").exists()
    assert not (node / CDI_HOOK).exists() and not (node / "usr/lib/nvct").exists()
    assert not (node / SYSTEM_RUNTIME).exists()
    assert (node / "etc/nvct/config.toml").read_text() == "# the node's own nvct config\n"
    assert restarts_of(restarts) == 2


def test_a_node_without_a_gpu_is_left_alone(node: Path, tmp_path: Path) -> None:
    (node / "dev/nvidia0").unlink()
    (node / "dev/nvidiactl").touch()  # a driver without a GPU is no GPU
    before = (node / "etc/containerd/config.toml").read_bytes()
    restarts = tmp_path / "restarts"
    node_install = installer(node, packaged_image(tmp_path / "image"), restarts)
    for action in ("install", "uninstall"):
        done = node_install(action)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (node / "etc/containerd/config.toml").read_bytes() == before
        assert not (node / "usr").exists() and not (node / "var/lib/nvct").exists()
        assert restarts_of(restarts) == 0
    assert "no NVIDIA GPU on this node" in node_install("install").stdout


def test_run_waits_for_a_gpu_installs_once_one_appears_and_uninstalls_on_sigterm(
    node: Path, tmp_path: Path
) -> None:
    """The DaemonSet's ``run`` on a node whose GPU is not there yet (a driver container still
    loading): the engine untouched meanwhile, nvct installed once /dev/nvidia0 appears, undone
    on the pod's SIGTERM, and no sleep left behind."""

    from integration.harness.processes import until

    (node / "dev/nvidia0").unlink()
    before = (node / "etc/containerd/config.toml").read_bytes()
    restarts = tmp_path / "restarts"
    env = installer_env(node, packaged_image(tmp_path / "image"), restarts)
    proc = subprocess.Popen(
        [str(DEPLOYMENTS / "node-install.sh"), "run"],
        env={**env, "GPU_POLL": "0.1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        time.sleep(1)
        assert proc.poll() is None
        assert (node / "etc/containerd/config.toml").read_bytes() == before
        assert not (node / "usr").exists() and restarts_of(restarts) == 0
        (node / "dev/nvidia0").touch()
        assert until((node / "usr/bin/nvct-runtime").exists, 15)
        assert until(lambda: restarts_of(restarts) == 1, 15)
        # the pending sleep is started just after the install's last step: wait to see it
        assert until(lambda: bool(_children(proc.pid)), 15)
        children = _children(proc.pid)
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "waiting for one" in out and "nvct removed from the node" in out
    assert (node / "etc/containerd/config.toml").read_bytes() == before
    assert not (node / "usr/bin/nvct-runtime").exists() and restarts_of(restarts) == 2
    assert children and not [pid for pid in children if Path(f"/proc/{pid}").exists()]


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (the script's pending sleep)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_a_newer_image_replaces_what_the_older_installed_never_the_nodes_own(
    node: Path, tmp_path: Path
) -> None:
    restarts = tmp_path / "restarts"
    old = installer(node, packaged_image(tmp_path / "v1"), restarts)
    assert old("install").returncode == 0
    runtime = node / "usr/bin/nvct-runtime"
    inode = runtime.stat().st_ino
    new = installer(node, packaged_image(tmp_path / "v2", " v2"), restarts)
    done = new("install")
    assert done.returncode == 0, done.stdout + done.stderr
    assert runtime.read_text() == "packaged usr/bin/nvct-runtime v2\n"
    assert runtime.stat().st_ino != inode  # renamed over: a running copy keeps its inode
    assert (node / CDI_HOOK).read_text().endswith(" v2\n")
    assert (node / "etc/nvct/config.toml").read_text() == "# the node's own nvct config\n"
    assert restarts_of(restarts) == 1  # the config did not change again


@pytest.mark.parametrize("runtime", ["usr/bin/nvct-runtime", SYSTEM_RUNTIME])
def test_uninstall_keeps_the_runtime_while_a_container_runs_with_it(
    node: Path, tmp_path: Path, runtime: str
) -> None:
    restarts = tmp_path / "restarts"
    node_install = installer(node, packaged_image(tmp_path / "image"), restarts)
    before = (node / "etc/containerd/config.toml").read_bytes()
    assert node_install("install").returncode == 0
    task = node / "run/containerd/io.containerd.runtime.v2.task/k8s.io/c0ffee"
    task.mkdir(parents=True)
    (task / "options.json").write_text(f'{{"binary_name":"/{runtime}"}}')
    done = node_install("uninstall")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"kept /{runtime}" in done.stdout
    assert (node / "etc/containerd/config.toml").read_bytes() == before
    assert (node / "usr/bin/nvct-runtime").exists() and not (node / "usr/share/nvct").exists()
    # the wrapper execs nvct-runtime: both stay while a container runs with it
    assert (node / SYSTEM_RUNTIME).exists() is (runtime == SYSTEM_RUNTIME)
    shutil.rmtree(task)  # the container is gone: the next uninstall removes the rest
    done = node_install("uninstall")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (node / "usr/bin/nvct-runtime").exists() and not (node / SYSTEM_RUNTIME).exists()
    assert not (node / "var/lib/nvct/node-install.list").exists()
    assert restarts_of(restarts) == 2


def _mounted_config(pod: dict, path: str) -> tuple[str, str]:
    """The ConfigMap and key a container of ``pod`` sees at ``path`` (a file, or a file in a
    mounted directory)."""
    (container,) = pod["containers"]
    for mount in container["volumeMounts"]:
        inside = path[len(mount["mountPath"]) :].lstrip("/")
        if path == mount["mountPath"] or path.startswith(mount["mountPath"].rstrip("/") + "/"):
            (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
            return volume["configMap"]["name"], mount.get("subPath") or inside
    raise AssertionError(f"nothing is mounted at {path}")


def test_the_nodes_get_only_allocated_gpus_and_the_plugin_answers_what_passes_it(
    node: Path, tmp_path: Path
) -> None:
    """README: the manifests turn only-allocated-gpus on. Read what the DaemonSets get (the
    kustomization lists the manifests as they are: no patches or generators), install it on a
    node without a config of its own, and check the plugin's answers pass that guard."""
    from nvct.config import load_config, parse_config
    from nvct.node.guard import envvar_without_guard_pass

    kustomization = yaml.safe_load((DEPLOYMENTS / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources"}
    maps = {d["metadata"]["name"]: d["data"] for _, d in documents() if d["kind"] == "ConfigMap"}
    pods = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]
        for _, d in documents()
        if d["kind"] == "DaemonSet"
    }
    installer = pods["nvct-installer"]
    env = {e["name"]: e.get("value") for e in installer["containers"][0].get("env", ())}
    source = env.get("SRC", "/").rstrip("/") + "/etc/nvct/config.toml"  # node-install.sh's
    name, key = _mounted_config(installer, source)
    text = maps[name][key]
    assert (
        parse_config(text.encode(), source=f"configmap {name}").request.only_allocated_gpus is True
    )

    image = tmp_path / "image"  # the installer's container: its ConfigMap at the mount
    (image / "etc/nvct").mkdir(parents=True)
    (image / "etc/nvct/config.toml").write_text(text)
    (node / "etc/nvct/config.toml").unlink()  # a node nvct never was on
    done = subprocess.run(
        [str(DEPLOYMENTS / "node-install.sh"), "install"],
        env={
            **os.environ,
            "HOST": str(node),
            "SRC": str(image),
            "NVCT_CLI": str(Path(sys.executable).parent / "nvct-cli"),
            "RESTART": "true",
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    on_node = load_config(str(node / "etc/nvct/config.toml"))
    assert on_node.request.only_allocated_gpus is True

    plugin = pods["nvct-device-plugin"]
    command = plugin["containers"][0]["command"]
    name, key = _mounted_config(plugin, command[command.index("--config") + 1])
    settings = parse_config(maps[name][key].encode(), source=f"configmap {name}")
    # runtime-config is the node's file, seen through the plugin's mount of the node's root.
    (host,) = [
        m["mountPath"]
        for m in plugin["containers"][0]["volumeMounts"]
        for v in plugin["volumes"]
        if v["name"] == m["name"] and v.get("hostPath", {}).get("path") == "/"
    ]
    assert settings.device_plugin.runtime_config == f"{host}/etc/nvct/config.toml"
    strategies = settings.device_plugin.device_list_strategy
    assert (
        envvar_without_guard_pass(strategies, on_node.request.only_allocated_gpus, "node") is None
    )
