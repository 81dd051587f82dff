"""nvct-config-manager, the real process, against the stand-in API server over HTTPS: its Node's
label picks an entry of the mounted ConfigMap (NVIDIA's default and fallback rules), the entry
reaches the plugin's config file, and the plugin (a real process standing in for it, found by
name) gets SIGHUP while the file already holds the new entry; as an init container (ONESHOT)
it writes once and signals nothing. Also: API server restarts mid-watch (with the old
resourceVersions compacted away: 410 Gone), a missing entry, a bad token, and RBAC that grants
nothing but get/list/watch on nodes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.apiserver.rbac import Rule
from integration.apiserver.server import APIServer
from integration.harness.apiserver import (
    CONFIGS,
    LABEL,
    MANAGER_USER,
    NODE,
    ConfigManager,
    Pod,
    SignalRecorder,
    apiserver,  # noqa: F401 - fixture
    kube_certs,  # noqa: F401 - fixture
    pod_files,
)
from integration.harness.processes import until
from nvct.base.atomic import write_atomic


@pytest.fixture
def pod(tmp_path: Path, apiserver: APIServer) -> Pod:  # noqa: F811 - the fixture's name
    return Pod(tmp_path, apiserver, CONFIGS)


@pytest.fixture
def plugin(pod: Pod) -> Iterator[SignalRecorder]:
    recorder = SignalRecorder(pod.root, pod.dst)
    yield recorder
    recorder.stop()


def sidecar(pod: Pod, plugin: SignalRecorder, **extra: str) -> ConfigManager:
    """The sidecar as the chart runs it: SIGHUP (1) to the plugin on every change."""
    return pod.manager(
        ONESHOT="false", SEND_SIGNAL="true", SIGNAL="1", PROCESS_TO_SIGNAL=plugin.name, **extra
    )


def init_container(pod: Pod, **extra: str) -> ConfigManager:
    """The init container as the chart runs it: once, no signal (NVIDIA's exact values)."""
    return pod.manager(
        ONESHOT="true", SEND_SIGNAL="false", SIGNAL="", PROCESS_TO_SIGNAL="", **extra
    )


def started_sidecar(pod: Pod, plugin: SignalRecorder, **extra: str) -> ConfigManager:
    """A sidecar on a node labelled ``ts4``, once the plugin was told of ts4's config."""
    pod.server.put_node(NODE, {LABEL: "ts4"})
    manager = sidecar(pod, plugin, **extra)
    if signalled_with(plugin, CONFIGS["ts4"], 15) is None:
        manager.stop()
        pytest.fail(f"the first config never reached the plugin: {manager.output()}")
    return manager


def signalled_with(plugin: SignalRecorder, content: str, timeout: float) -> float | None:
    """Seconds until the plugin got a signal while its config held ``content``."""
    start = time.monotonic()
    if until(lambda: any(s["content"] == content for s in plugin.signals()), timeout):
        return time.monotonic() - start
    return None


def test_the_label_picks_the_entry_and_a_change_reaches_the_plugin_within_2s(
    pod: Pod, plugin: SignalRecorder
) -> None:
    manager = started_sidecar(pod, plugin)
    try:
        assert pod.dst.read_text() == CONFIGS["ts4"]
        assert {s["signal"] for s in plugin.signals()} == {1}  # SIGHUP

        pod.server.set_node_labels(NODE, {LABEL: "mig-mixed"})
        took = signalled_with(plugin, CONFIGS["mig-mixed"], 5)
        assert took is not None and took < 2.0, (took, manager.output())

        # an edited ConfigMap (the kubelet swaps the mounted file) reaches the plugin too
        edited = CONFIGS["mig-mixed"] + "# edited\n"
        write_atomic(str(pod.available / "mig-mixed"), edited.encode())
        assert signalled_with(plugin, edited, 5) is not None, manager.output()

        before = len(plugin.signals())
        pod.server.set_node_labels(NODE, {"unrelated": "x"})  # not our label: nothing to do
        time.sleep(1.5)
        assert len(plugin.signals()) == before
        assert manager.proc.poll() is None and manager.errors() == []
    finally:
        manager.stop()
    # what the service account used: reading nodes, nothing else
    assert pod.server.auth.used_by(MANAGER_USER) <= {
        ("get", "", "nodes"),
        ("list", "", "nodes"),
        ("watch", "", "nodes"),
    }


def test_a_removed_label_falls_back_to_the_default_config(pod: Pod, plugin: SignalRecorder) -> None:
    manager = started_sidecar(pod, plugin, DEFAULT_CONFIG="mig-mixed")
    try:
        pod.server.set_node_labels(NODE, {LABEL: None})
        took = signalled_with(plugin, CONFIGS["mig-mixed"], 5)
        assert took is not None and took < 2.0, (took, manager.output())
    finally:
        manager.stop()


@pytest.mark.parametrize(
    ("entries", "default", "fallbacks", "expected"),
    [
        (CONFIGS, "ts4", "named,single", "ts4"),  # a default beats the fallbacks
        (CONFIGS, "", "named,single", "default"),  # the chart's fallbacks: "default" entry
        ({"ts4": CONFIGS["ts4"]}, "", "named,single", "ts4"),  # the only entry
        ({"ts4": CONFIGS["ts4"], "b": "x"}, "", "named,single,empty", ""),  # empty config
    ],
    ids=["default", "named", "single", "empty"],
)
def test_an_unlabelled_node_gets_nvidias_default_and_fallbacks_once_without_signal(
    tmp_path: Path,
    apiserver: APIServer,  # noqa: F811 - the fixture's name
    entries: dict[str, str],
    default: str,
    fallbacks: str,
    expected: str,
) -> None:
    pod = Pod(tmp_path, apiserver, entries)
    apiserver.put_node(NODE)
    plugin = SignalRecorder(tmp_path, pod.dst)
    try:
        manager = init_container(pod, DEFAULT_CONFIG=default, FALLBACK_STRATEGIES=fallbacks)
        assert manager.wait() == 0, manager.output()
        assert pod.dst.read_text() == (entries[expected] if expected else "")
        assert plugin.signals() == []  # the init container runs before the plugin
        assert '"config_updated"' in manager.output()
    finally:
        plugin.stop()


def test_a_missing_entry_fails_the_init_container_with_one_line(pod: Pod) -> None:
    pod.server.put_node(NODE, {LABEL: "a100-40gb"})
    manager = init_container(pod)
    assert manager.wait() == 1
    assert manager.errors() == [
        "nvct-config-manager: error: the node label names config 'a100-40gb', which the "
        "ConfigMap does not have (it has default, mig-mixed, ts4) (fix: set the label to one "
        "of them, or add that entry to the ConfigMap)"
    ]
    assert not pod.dst.exists()


def test_the_sidecar_keeps_the_last_good_config_while_the_label_names_a_missing_entry(
    pod: Pod, plugin: SignalRecorder
) -> None:
    manager = started_sidecar(pod, plugin)
    try:
        signals = len(plugin.signals())
        pod.server.set_node_labels(NODE, {LABEL: "typo"})
        assert until(lambda: len(manager.errors()) == 1, 5), manager.output()
        time.sleep(2.5)  # rechecks say nothing new, change nothing
        assert len(manager.errors()) == 1 and "'typo'" in manager.errors()[0]
        assert pod.dst.read_text() == CONFIGS["ts4"] and len(plugin.signals()) == signals
        assert manager.proc.poll() is None
        pod.server.set_node_labels(NODE, {LABEL: "mig-mixed"})
        assert signalled_with(plugin, CONFIGS["mig-mixed"], 2) is not None, manager.output()
    finally:
        manager.stop()


def test_a_label_changed_while_the_api_server_restarts_arrives_after_it(
    pod: Pod, plugin: SignalRecorder
) -> None:
    manager = started_sidecar(pod, plugin)
    try:
        pod.server.stop()  # mid-watch: the stream breaks
        pod.server.store.compact()  # and the watch's resourceVersion is gone (410 on resume)
        pod.server.set_node_labels(NODE, {LABEL: "mig-mixed"})
        time.sleep(1.0)
        pod.server.start()
        took = signalled_with(plugin, CONFIGS["mig-mixed"], 5)
        assert took is not None and took < 2.0, (took, manager.output())
        assert manager.proc.poll() is None
        retried = [json.loads(x) for x in manager.output().splitlines() if "api_retry" in x]
        assert retried and "cannot reach the Kubernetes API server" in retried[0]["error"]
    finally:
        manager.stop()


def test_a_bad_token_is_one_line_naming_the_token_file(pod: Pod) -> None:
    pod.server.put_node(NODE, {LABEL: "ts4"})
    (pod.account / "token").write_text("not-a-token")
    manager = init_container(pod)
    assert manager.wait() == 1
    assert manager.errors() == [
        f"nvct-config-manager: error: the Kubernetes API server at {pod.server.url} refused "
        f"the token in {pod.account / 'token'} (401 Unauthorized) (fix: give the pod its "
        "service account token (automountServiceAccountToken: true) or fix the kubeconfig)"
    ]
    assert not pod.dst.exists()


def test_rules_without_watch_are_refused_with_the_verb_named(pod: Pod) -> None:
    pod.server.put_node(NODE, {LABEL: "ts4"})
    pod_files(
        pod.server,
        pod.account,
        "manager-token",
        (Rule("", "nodes", frozenset({"get", "list"})),),
    )
    manager = pod.manager(ONESHOT="false", SEND_SIGNAL="false")
    assert manager.wait() == 1, manager.output()
    (line,) = manager.errors()
    assert 'cannot watch resource "nodes" in API group "" at the cluster scope' in line
    assert "(403 Forbidden)" in line and "ClusterRole" in line
