"""The start-up bench's pure parts: ``-X importtime``'s report read, the stand-in's writes
stamped, and the checks that a run did its job (a fast failure must fail the bench)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.configmanager import ConfigManager
from bench.k8s_startup import (
    OWN,
    NodeLabel,
    features_are,
    labels_are,
    parse_labels,
    stamped,
)
from bench.startup import (
    Install,
    Job,
    NotDone,
    Stamp,
    StampedStore,
    checked,
    first_write,
    top_level_imports,
)
from integration.apiserver.certs import ServingCerts
from integration.apiserver.crds import NODE_FEATURES
from integration.apiserver.server import NODES, APIServer
from integration.harness.apiserver import CONFIGS
from integration.harness.nodelabel import LABEL, NODE

REPORT = """\
import time: self [us] | cumulative | imported package
import time:       120 |        120 |   _io
import time:       300 |       2500 | site
import time:        40 |         40 |     encodings.idna
import time:      1000 |      61000 | lightkube.resources.core_v1
import time:       500 |       7000 |   httpcore2
import time:       900 |       9000 | site
some other line a program printed | with | bars
"""


def test_only_top_level_imports_count_and_repeats_add_up() -> None:
    assert top_level_imports(REPORT) == {"site": 11.5, "lightkube.resources.core_v1": 61.0}


def test_the_store_stamps_each_write_in_order_with_the_stored_object() -> None:
    store = StampedStore()
    store.create(NODES, "", {"metadata": {"name": "n", "labels": {}}})
    node = store.get(NODES, "", "n")
    node["metadata"]["labels"] = {"a": "1"}
    store.update(NODES, "", node)
    store.delete(NODES, "", "n")
    assert [s.key for s in store.stamps] == [("", "n")] * 3
    assert [s.obj["metadata"].get("labels") for s in store.stamps] == [{}, {"a": "1"}, {"a": "1"}]
    assert store.stamps[0].ns <= store.stamps[1].ns <= store.stamps[2].ns
    node["metadata"]["labels"]["b"] = "2"  # the stamp keeps what was stored, not a live copy
    assert store.stamps[1].obj["metadata"]["labels"] == {"a": "1"}


def node(ns: int, labels: dict[str, str], name: str = "gpu-node-1") -> Stamp:
    return Stamp(ns, NODES.resource, ("", name), {"metadata": {"name": name, "labels": labels}})


def test_the_first_right_write_counts_and_a_missing_one_fails_saying_what_was_written() -> None:
    done = labels_are({**OWN, "nvct.io/runtime.ready": "true"})
    stamps = [
        node(10, {**OWN, "nvct.io/runtime.ready": "true"}, name="gpu-node-2"),  # another node
        node(20, OWN),  # an unrelated write first
        node(30, {**OWN, "nvct.io/runtime.ready": "true"}),
        node(40, {**OWN, "nvct.io/runtime.ready": "true", "x": "1"}),
    ]
    assert first_write(stamps, NODES.resource, ("", "gpu-node-1"), done) == 30
    with pytest.raises(NotDone, match=r"nodes gpu-node-1: labels .*gpu\.present"):
        first_write(stamps[:2], NODES.resource, ("", "gpu-node-1"), done)
    with pytest.raises(NotDone, match="never written"):
        first_write([], NODES.resource, ("", "gpu-node-1"), done)
    # the label set along with another change is not the installer's job done
    assert done(stamps[3].obj).startswith("labels ")


def feature(labels: dict[str, str], owner: str = "gpu-node-1") -> dict[str, object]:
    meta = {"labels": {"nfd.node.kubernetes.io/node-name": owner}}
    return {"metadata": meta, "spec": {"labels": labels}}


def test_the_nodefeature_must_say_what_nvct_cli_labels_prints_with_a_timestamp() -> None:
    printed = parse_labels("nvidia.com/gpu.present=true\nnvidia.com/gpu.count=4\n")
    assert printed == {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "4"}
    done = features_are("gpu-node-1", printed)
    stamped = {**printed, "nvidia.com/gfd.timestamp": "1700000000"}
    assert done(feature(stamped)) == ""
    assert "no Unix time" in done(feature(printed))
    assert "node-name 'gpu-node-2'" in done(feature(stamped, owner="gpu-node-2"))
    fewer = {**stamped, "nvidia.com/gpu.count": "3"}
    assert "('nvidia.com/gpu.count', '3')" in done(feature(fewer))
    key = ("nvct-system", "nvidia-features-for-gpu-node-1")
    stamps = [Stamp(5, NODE_FEATURES.resource, key, feature(fewer))]
    with pytest.raises(NotDone, match="nodefeatures nvct-system/nvidia-features-for-gpu-node-1"):
        first_write(stamps, NODE_FEATURES.resource, key, done)


def test_a_run_that_exits_0_without_its_result_fails_the_bench() -> None:
    def missing() -> int:
        raise NotDone("nodes gpu-node-1: never written")

    install = Install("make venv", "true", ["/usr/bin/python3"], Job([], {}, lambda: None, missing))
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(SystemExit, match="exited 0 but did not do its job: nodes gpu-node-1"):
        checked(install, proc, b"", 0)
    install.job.written_ns = lambda: 1_500
    assert checked(install, proc, b"", 500) == 1_000
    failed = subprocess.Popen(["false"])
    failed.wait()
    with pytest.raises(SystemExit, match=r"make venv failed \(1\): b'refused'"):
        checked(install, failed, b"refused", 0)


def unstarted(tmp_path: Path) -> APIServer:
    """A stand-in whose store the jobs use, never listening (no TLS needed: a dummy CA)."""
    (tmp_path / "ca.crt").write_text("not a certificate\n")
    certs = ServingCerts(tmp_path / "ca.crt", tmp_path / "tls.crt", tmp_path / "tls.key")
    return APIServer(certs, StampedStore())


def test_the_config_managers_job_is_its_file_with_the_nodes_entry(tmp_path: Path) -> None:
    server = unstarted(tmp_path)
    command = ConfigManager()
    command.serve(server)
    job = command.job(tmp_path / "job", server)
    dst = Path(job.env["CONFIG_FILE_DST"])
    with pytest.raises(NotDone, match="not written"):
        job.written_ns()
    dst.write_text(CONFIGS["default"])  # the wrong entry: a manager that misread the label
    with pytest.raises(NotDone, match="not the ts4 entry"):
        job.written_ns()
    dst.write_text(CONFIGS["ts4"])
    assert job.written_ns() == dst.stat().st_mtime_ns
    job.reset()
    assert not dst.exists()


def test_the_installers_job_is_its_label_on_its_node_written_after_the_reset(
    tmp_path: Path,
) -> None:
    server = unstarted(tmp_path)
    command = NodeLabel()
    command.serve(server)
    job = command.job(tmp_path / "job", server)
    assert job.argv == ["node-label", f"{LABEL}=true"] and job.env["NODE_NAME"] == NODE
    server.set_node_labels(NODE, {LABEL: "true"})  # a run before this one
    job.reset()
    assert LABEL not in server.store.get(NODES, "", NODE)["metadata"]["labels"]
    with pytest.raises(NotDone, match="never written"):  # the earlier run's write is forgotten
        job.written_ns()
    server.set_node_labels(NODE, {LABEL: "true"})
    assert job.written_ns() == stamped(server).stamps[-1].ns
