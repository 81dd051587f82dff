"""nvct-cli configure --runtime containerd: versions 1/2/3, layout kept, undo exact."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nvct.base.errors import EngineConfigError
from nvct.engines import EngineOptions, configure
from nvct.engines import containerd as engine

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

RUNTIME = "/opt/nvct/bin/nvct-runtime"
CRI2 = ("plugins", "io.containerd.grpc.v1.cri")
CRI3 = ("plugins", "io.containerd.cri.v1.runtime")

DEBIAN_DEFAULT = """version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""

SYSTEMD = """# cluster node config: managed by hand
version = 2
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"   # pinned
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"  # the default
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
"""

V3 = """version = 3
root = "/var/lib/containerd"

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      SystemdCgroup = true
"""


def opts(**kw: object) -> EngineOptions:
    return EngineOptions(
        config_path=Path("/etc/containerd/config.toml"), runtime_path=RUNTIME, **kw
    )  # type: ignore[arg-type]


def handlers(text: str, cri: tuple[str, ...] = CRI2) -> dict[str, object]:
    data = tomllib.loads(text)
    node: object = data
    for key in (*cri, "containerd", "runtimes"):
        assert isinstance(node, dict)
        node = node[key]
    assert isinstance(node, dict)
    return node


def test_v2_handler_copies_runc_options_and_keeps_every_byte() -> None:
    new = engine.edit(SYSTEMD, opts()).new
    assert new is not None
    assert new.startswith(SYSTEMD)  # comments, indentation, order: untouched
    assert handlers(new)["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2",
        "container_annotations": ["cdi.k8s.io/*"],
        "options": {"SystemdCgroup": True, "BinaryName": RUNTIME},
    }
    assert tomllib.loads(new)["imports"] == ["/etc/containerd/conf.d/*.toml"]  # not duplicated


def test_file_without_runtimes_keeps_runc_alive() -> None:
    """A file that defines any handler replaces containerd's built-in map (seen on 1.6.20)."""
    new = engine.edit(DEBIAN_DEFAULT, opts()).new
    assert new is not None and new.startswith(DEBIAN_DEFAULT)
    found = handlers(new)
    assert found["runc"] == {"runtime_type": "io.containerd.runc.v2", "options": {}}
    assert found["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2",
        "container_annotations": ["cdi.k8s.io/*"],
        "options": {"BinaryName": RUNTIME},
    }


def test_version_3_root_config_gets_a_version_3_handler() -> None:
    new = engine.edit(V3, opts()).new
    assert new is not None
    data = tomllib.loads(new)
    assert data["version"] == 3
    assert "io.containerd.grpc.v1.cri" not in data.get("plugins", {})
    assert handlers(new, CRI3)["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2",
        "container_annotations": ["cdi.k8s.io/*"],
        "options": {"SystemdCgroup": True, "BinaryName": RUNTIME},
    }


def test_version_1_config_uses_plugins_cri() -> None:
    text = '[plugins.cri.containerd]\n  snapshotter = "overlayfs"\n'
    new = engine.edit(text, opts()).new
    assert new is not None
    assert handlers(new, ("plugins", "cri"))["nvidia"]["options"] == {"BinaryName": RUNTIME}  # type: ignore[index]


@pytest.mark.parametrize(("installed", "version"), [(2, 2), (3, 3)])
def test_empty_file_takes_the_installed_containerds_version(installed: int, version: int) -> None:
    new = engine.edit("", opts(containerd_version=installed)).new
    assert new is not None
    data = tomllib.loads(new)
    assert data["version"] == version
    cri = CRI2 if version == 2 else CRI3
    assert set(handlers(new, cri)) == {"runc", "nvidia"}


def test_set_as_default_replaces_the_line_and_undo_restores_it() -> None:
    new = engine.edit(SYSTEMD, opts(set_as_default=True)).new
    assert new is not None
    assert (
        tomllib.loads(new)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
            "default_runtime_name"
        ]
        == "nvidia"
    )
    assert '# nvct: was: default_runtime_name = "runc"  # the default' in new
    assert engine.edit(new, opts(undo=True)).new == SYSTEMD


@pytest.mark.parametrize("text", [DEBIAN_DEFAULT, SYSTEMD, V3, "version = 2\n"])
@pytest.mark.parametrize("default", [False, True])
def test_undo_is_byte_exact(text: str, default: bool) -> None:
    new = engine.edit(text, opts(set_as_default=default)).new
    assert new is not None and new != text
    assert engine.edit(new, opts(undo=True)).new == text


def test_reconfigure_is_a_no_op_and_a_new_path_edits_in_place() -> None:
    first = engine.edit(SYSTEMD, opts()).new
    assert first is not None
    assert engine.edit(first, opts()).new == first
    moved = engine.edit(
        first, EngineOptions(config_path=Path("/x"), runtime_path="/new/nvct-runtime")
    )
    assert moved.new is not None
    assert handlers(moved.new)["nvidia"]["options"]["BinaryName"] == "/new/nvct-runtime"  # type: ignore[index]
    assert moved.new.count('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]') == 1


def test_created_file_is_removed_by_undo(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    o = EngineOptions(config_path=path, runtime_path=RUNTIME, containerd_version=2)
    configure("containerd", o)
    assert path.read_text().startswith(engine.CREATED)
    result = configure("containerd", EngineOptions(config_path=path, undo=True))
    assert result.applied is not None and result.applied.action == "removed"
    assert not path.exists()


def test_undo_leaves_a_foreign_handler() -> None:
    text = SYSTEMD + (
        '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        '      runtime_type = "io.containerd.runc.v2"\n'
        '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        '        BinaryName = "/usr/bin/nvidia-container-runtime"\n'
    )
    edit = engine.edit(text, opts(undo=True))
    assert edit.new == text
    assert "left alone" in edit.notes[0]


def test_unsupported_version_is_refused() -> None:
    with pytest.raises(EngineConfigError, match="unsupported containerd config version 4"):
        engine.edit("version = 4\n", opts())


# `containerd config default` (1.6.20) writes both lists empty in every handler it lists.
DUMPED_DEFAULT = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    container_annotations = []
    pod_annotations = []
    runtime_type = "io.containerd.runc.v2"
"""


@pytest.mark.parametrize("base", [DUMPED_DEFAULT, DEBIAN_DEFAULT, V3, ""])
def test_the_device_plugins_annotations_reach_nvct_containers_only(base: str) -> None:
    new = engine.edit(base, opts(containerd_version=2)).new
    assert new is not None
    cri = CRI3 if base == V3 else CRI2
    nvidia = handlers(new, cri)["nvidia"]
    assert isinstance(nvidia, dict)
    assert nvidia["container_annotations"] == ["cdi.k8s.io/*"]
    assert nvidia.get("pod_annotations", []) == []
    runc = handlers(new, cri)["runc"]
    assert isinstance(runc, dict) and not runc.get("container_annotations")  # not ours: as it was
    assert engine.edit(new, opts(undo=True, containerd_version=2)).new == (base or None)


def test_a_copied_pod_pattern_that_lets_cdi_through_is_left_out() -> None:
    wide = DUMPED_DEFAULT.replace(
        "container_annotations = []", 'container_annotations = ["io.example/*"]'
    ).replace("pod_annotations = []", 'pod_annotations = ["*/*", "io.example/*"]')
    edit = engine.edit(wide, opts())
    assert edit.new is not None
    nvidia = handlers(edit.new)["nvidia"]
    assert isinstance(nvidia, dict)
    assert nvidia["container_annotations"] == ["io.example/*", "cdi.k8s.io/*"]
    assert nvidia["pod_annotations"] == ["io.example/*"]
    assert any("pod_annotations ['*/*'] left out" in n for n in edit.notes)
    assert engine.edit(edit.new, opts(undo=True)).new == wide


def test_an_existing_handler_gets_the_container_pattern_and_a_wide_pod_list_is_named() -> None:
    text = SYSTEMD + (
        '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        '      runtime_type = "io.containerd.runc.v2"\n'
        '      pod_annotations = ["cdi.k8s.io/*"]\n'
        '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        '        BinaryName = "/usr/bin/nvidia-container-runtime"\n'
    )
    edit = engine.edit(text, opts())
    assert edit.new is not None
    nvidia = handlers(edit.new)["nvidia"]
    assert isinstance(nvidia, dict)
    assert nvidia["container_annotations"] == ["cdi.k8s.io/*"]
    assert any("pod_annotations let cdi.k8s.io/ annotations through" in n for n in edit.notes)
    assert engine.edit(edit.new, opts()).new == edit.new  # nothing more to do
