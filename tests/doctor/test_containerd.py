"""doctor's containerd checks: the drop-in, its import, ``config dump`` and restarts."""

from __future__ import annotations

from nvct.doctor import FAIL, PASS, WARN, Completed, containerd
from tests.doctor.conftest import (
    DAEMON_START,
    FakeCommands,
    by_name,
    containerd_files,
    context,
    fake_process,
    set_mtime,
)

DUMP_WITH = Completed(
    0,
    'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
    'runtime_type = "io.containerd.runc.v2"\n'
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
    'BinaryName = "/usr/bin/nvct-runtime"\n',
    "",
)


DUMP_WITHOUT = Completed(0, "version = 2\n[plugins]\n", "")


def test_containerd_drop_in_and_dump(tmp_path) -> None:
    root = containerd_files(tmp_path, imported=True)
    ctx = context(tmp_path, run=FakeCommands({"config dump": DUMP_WITH}))
    results = containerd.check_containerd(ctx)
    assert by_name(results, containerd.CONFIG).status == PASS
    assert "99-nvct.toml" in by_name(results, containerd.CONFIG).message
    assert by_name(results, containerd.DUMP).status == PASS
    assert ctx.run.calls[0] == ["containerd", "--config", str(root), "config", "dump"]  # type: ignore[attr-defined]


def test_containerd_dump_without_the_handler_fails(tmp_path) -> None:
    containerd_files(tmp_path, imported=True)
    ctx = context(tmp_path, run=FakeCommands({"config dump": DUMP_WITHOUT}))
    result = by_name(containerd.check_containerd(ctx), containerd.DUMP)
    assert result.status == FAIL and "is not imported by" in result.message


def test_containerd_drop_in_not_imported_fails(tmp_path) -> None:
    root = containerd_files(tmp_path, imported=False)
    idle = by_name(containerd.check_containerd(context(tmp_path)), containerd.CONFIG)
    assert idle.status == WARN and "(no running daemon reads it)" in idle.message
    fake_process(tmp_path / "proc", 98, "containerd", ["/usr/bin/containerd"])  # another file
    assert containerd.find_containerd(context(tmp_path)) is None
    fake_process(tmp_path / "proc", 99, "containerd", ["/usr/bin/containerd", "-c", str(root)])
    ctx = context(tmp_path)
    result = by_name(containerd.check_containerd(ctx), containerd.CONFIG)
    assert result.status == FAIL and str(root) in result.message
    assert result.fix.startswith("nvct-cli configure --runtime containerd")


def test_containerd_restart_needed(tmp_path) -> None:
    root = containerd_files(tmp_path, imported=True)
    fake_process(
        tmp_path / "proc", 99, "containerd", ["/usr/bin/containerd", "--config", str(root)]
    )
    set_mtime(root, DAEMON_START - 10)
    set_mtime(tmp_path / "containerd/conf.d/99-nvct.toml", DAEMON_START + 10)
    ctx = context(tmp_path, run=FakeCommands({"config dump": DUMP_WITH}))
    result = by_name(containerd.check_containerd(ctx), containerd.RESTART)
    assert result.status == WARN and "99-nvct.toml changed" in result.message
    assert result.fix == "restart containerd: systemctl restart containerd"


def _handler(tmp_path, lines: str, cri_lines: str = "") -> None:
    root = tmp_path / "containerd/config.toml"
    root.parent.mkdir(parents=True)
    root.write_text(
        f'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n{cri_lines}'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        f"{lines}"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        'BinaryName = "/usr/bin/nvct-runtime"\n'
    )


def _annotations(tmp_path):
    ctx = context(tmp_path, run=FakeCommands({"config dump": DUMP_WITH}))
    return by_name(containerd.check_containerd(ctx), "containerd-annotations")


def test_a_pod_pattern_letting_cdi_through_fails(tmp_path) -> None:
    _handler(tmp_path, 'container_annotations = ["cdi.k8s.io/*"]\npod_annotations = ["*/*"]\n')
    result = _annotations(tmp_path)
    assert result.status == FAIL
    assert "pod_annotations = ['*/*']" in result.message and "runtimes.nvidia" in result.message
    assert result.fix.startswith("remove those patterns from pod_annotations")


def test_container_annotations_closed_warns_unless_containerd_does_cdi(tmp_path) -> None:
    _handler(tmp_path, 'container_annotations = []\npod_annotations = ["io.example/*"]\n')
    closed = _annotations(tmp_path)
    assert closed.status == WARN and "never reaches nvct-runtime" in closed.message
    assert closed.fix.startswith("nvct-cli configure --runtime containerd")
    other = tmp_path / "cdi-on"
    _handler(other, "container_annotations = []\n", "enable_cdi = true\n")
    assert _annotations(other).status == PASS


def test_the_configured_handler_passes(tmp_path) -> None:
    _handler(tmp_path, 'container_annotations = ["cdi.k8s.io/*"]\n')
    result = _annotations(tmp_path)
    assert result.status == PASS and "nvidia" in result.message
