"""nvct-cli cdi generate / list, the CDI spec model, and the CDI createContainer hook; the
specs are built from the simulated drivers' recorded inventories (tests/inventories.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from nvct.cdi import hook as cdi_hook
from nvct.cdi.registry import list_devices
from nvct.cdi.spec import build_spec, device_names, driver_version, to_json, to_yaml
from nvct.cli.main import main
from nvct.host.arch import host_arch
from nvct.plan.build import build_plan
from nvct.request.parse import parse_request
from tests.conftest import sim_config
from tests.inventories import RecordedDriver


def spec_for(sim: RecordedDriver, tmp: Path, strategy: str = "index") -> dict:
    return build_spec(sim.inventory, sim_config(sim, tmp), host_arch(), strategy=strategy)


def cli_roots(sim: RecordedDriver, tmp: Path) -> list[str]:
    """Options for ``sim``'s roots, with its inventory in the config's cache dir."""
    sim.seed_cache(tmp / "cache")
    cfg = tmp / "nvct.toml"
    cfg.write_text(f"cache-dir = '{tmp / 'cache'}'\n[log]\nfile = '{tmp / 'log'}'\n")
    return [
        "--config", str(cfg), "--driver-root", str(sim.driver_root),
        "--dev-root", str(sim.dev_root), "--proc-root", str(sim.proc_root),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("index", lambda s: ["0", "1", "2", "3", "all"]),
        ("uuid", lambda s: [g.uuid for g in s.spec.gpus] + ["all"]),
        ("both", lambda s: [n for g in s.spec.gpus for n in (str(g.minor), g.uuid)] + ["all"]),
    ],
)
def test_device_names_by_strategy(recorded_h100x4, tmp_path, strategy, expected) -> None:
    spec = spec_for(recorded_h100x4, tmp_path, strategy)
    assert spec["cdiVersion"] == "0.5.0"
    assert spec["kind"] == "nvidia.com/gpu"
    assert [d["name"] for d in spec["devices"]] == expected(recorded_h100x4)
    assert device_names(spec)[0].startswith("nvidia.com/gpu=")


def test_per_device_edits_are_that_gpus_node_only(recorded_h100x4, tmp_path) -> None:
    spec = spec_for(recorded_h100x4, tmp_path)
    one = next(d for d in spec["devices"] if d["name"] == "1")
    assert one["containerEdits"] == {
        "deviceNodes": [
            {
                "path": "/dev/nvidia1",
                "hostPath": str(recorded_h100x4.dev_root / "dev/nvidia1"),
                "type": "c",
                "major": 195,
                "minor": 1,
            }
        ]
    }
    every = next(d for d in spec["devices"] if d["name"] == "all")
    assert [n["path"] for n in every["containerEdits"]["deviceNodes"]] == [
        f"/dev/nvidia{i}" for i in range(4)
    ]


def test_common_edits_come_from_the_plan(recorded_h100x4, tmp_path) -> None:
    spec = spec_for(recorded_h100x4, tmp_path)
    edits = spec["containerEdits"]
    config = sim_config(recorded_h100x4, tmp_path)
    caps = "utility,compute,video,graphics,display,ngx,compat32"
    plan = build_plan(
        parse_request(
            {"NVIDIA_VISIBLE_DEVICES": "none", "NVIDIA_DRIVER_CAPABILITIES": caps}, config=config
        ),
        recorded_h100x4.inventory,
        config,
        host_arch(),
        enforce_requirements=False,
    )
    assert [m["containerPath"] for m in edits["mounts"]] == [m.target for m in plan.mounts]
    assert {n["path"] for n in edits["deviceNodes"]} == {
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
    }
    lib = next(m for m in edits["mounts"] if m["containerPath"].endswith("/libcuda.so.550.54.15"))
    assert lib["hostPath"].startswith(str(recorded_h100x4.driver_root))
    assert {"ro", "nosuid", "nodev", "bind"} <= set(lib["options"])
    assert "NVIDIA_VISIBLE_DEVICES=void" in edits["env"]
    assert driver_version(spec) == "550.54.15"
    (hook,) = edits["hooks"]
    assert hook["hookName"] == "createContainer"
    assert hook["path"] == sys.executable
    assert hook["args"][:4] == [sys.executable, "-I", "-S", "-c"]
    assert "from nvct.cdi.hook import main" in hook["args"][4]
    assert hook["env"] == ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    links = [hook["args"][i + 1] for i, a in enumerate(hook["args"]) if a == "--symlink"]
    assert "libcuda.so.550.54.15::/usr/lib/x86_64-linux-gnu/libcuda.so.1" in links
    assert "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so" in links
    dirs = [hook["args"][i + 1] for i, a in enumerate(hook["args"]) if a == "--ldconfig-dir"]
    assert dirs == list(plan.ldconfig_dirs)


def test_mig_gpus_are_named_by_mig_device(recorded_a100mig, tmp_path) -> None:
    spec = spec_for(recorded_a100mig, tmp_path, "both")
    names = [d["name"] for d in spec["devices"]]
    gpu0 = recorded_a100mig.spec.gpus[0]
    mig = gpu0.migs[1]
    assert "0:1" in names and mig.uuid in names
    assert "0" not in names  # a MIG-enabled parent gets no full-GPU device
    device = next(d for d in spec["devices"] if d["name"] == "0:1")
    paths = [n["path"] for n in device["containerEdits"]["deviceNodes"]]
    assert paths == [
        f"/dev/nvidia{gpu0.minor}",
        f"/dev/nvidia-caps/nvidia-cap{mig.gi_cap_minor}",
        f"/dev/nvidia-caps/nvidia-cap{mig.ci_cap_minor}",
    ]


def test_yaml_and_json_say_the_same(recorded_h100x4, tmp_path) -> None:
    spec = spec_for(recorded_h100x4, tmp_path)
    assert yaml.safe_load(to_yaml(spec)) == spec
    assert json.loads(to_json(spec)) == spec
    assert to_yaml(spec).startswith("---\n")


def test_yaml_emitter_edge_cases() -> None:
    data = {"a": [], "b": {}, "c": [{"d": [1, "x: y", True]}, ["n"]], "e": 'q"\\\n'}
    assert yaml.safe_load(to_yaml(data)) == data


def test_generate_writes_atomically_and_list_reads_it(recorded_h100x4, tmp_path, capsys) -> None:
    specs = tmp_path / "cdi"
    out = specs / "nvct.yaml"
    roots = cli_roots(recorded_h100x4, tmp_path)
    assert main([*roots, "cdi", "generate", "--output", str(out)]) == 0
    assert "written (9 devices, driver 550.54.15)" in capsys.readouterr().out
    assert yaml.safe_load(out.read_text())["kind"] == "nvidia.com/gpu"  # format from suffix
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    assert main([*roots, "cdi", "generate", "--output", str(out)]) == 0
    assert "unchanged" in capsys.readouterr().out
    assert main([*roots, "cdi", "generate", "--format", "json", "-o", str(specs / "b.json")]) == 0
    capsys.readouterr()
    (specs / "broken.json").write_text("{")
    assert main(["cdi", "list", "--spec-dir", str(specs)]) == 0
    listed, err = capsys.readouterr()
    gpus = recorded_h100x4.spec.gpus
    # by index and by UUID, as NVIDIA's default spec names them
    names = [f"nvidia.com/gpu={n}" for g in gpus for n in (str(gpus.index(g)), g.uuid)]
    names.append("nvidia.com/gpu=all")
    assert listed.splitlines() == names * 2  # b.json, then nvct.yaml
    assert "broken.json is not valid JSON" in err
    assert list_devices([tmp_path / "missing"]).devices == ()


def test_generate_to_stdout_is_json(recorded_h100x4, tmp_path, capsys) -> None:
    assert main([*cli_roots(recorded_h100x4, tmp_path), "cdi", "generate"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "nvidia.com/gpu"


def test_generate_refuses_a_suffix_registries_ignore(recorded_h100x4, tmp_path, capsys) -> None:
    out = tmp_path / "nvct.txt"
    assert main([*cli_roots(recorded_h100x4, tmp_path), "cdi", "generate", "-o", str(out)]) == 1
    assert "only read *.json and *.yaml" in capsys.readouterr().err
    assert not out.exists()


# -- the createContainer hook -------------------------------------------------------------


def test_hook_args() -> None:
    args = cdi_hook.parse_args(
        ["--symlink", "a.so.1::/usr/lib/a.so", "--ldconfig-dir", "/usr/lib", "--ldconfig", "/l"]
    )
    assert args.symlinks == [("a.so.1", "/usr/lib/a.so")]
    assert args.ldconfig_dirs == ["/usr/lib"] and args.ldconfig == "/l"
    for bad in (["--symlink", "x"], ["--symlink", "a::rel"], ["--bogus", "1"], ["--ldconfig"]):
        with pytest.raises(ValueError):
            cdi_hook.parse_args(bad)


def test_hook_creates_links_inside_the_root_only(tmp_path, monkeypatch, capsys) -> None:
    bundle = tmp_path / "bundle"
    root = bundle / "rootfs"
    (root / "usr/lib").mkdir(parents=True)
    (root / "usr/lib/evil").symlink_to("/")  # an image trying to escape
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    state = json.dumps({"ociVersion": "1.0.2", "id": "x", "pid": 1, "bundle": str(bundle)})
    monkeypatch.setattr(sys, "stdin", _Stdin(state.encode()))
    argv = ["--symlink", "libx.so.1::/usr/lib/libx.so", "--symlink", "t::/usr/lib/evil/tmp/nvct-x"]
    assert cdi_hook.main(argv) == 0, capsys.readouterr().err
    assert os.readlink(root / "usr/lib/libx.so") == "libx.so.1"
    assert os.readlink(root / "tmp/nvct-x") == "t"  # /usr/lib/evil -> / resolved in the root
    assert not os.path.lexists("/tmp/nvct-x")


def test_hook_fails_closed_on_a_bad_state(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "stdin", _Stdin(b'{"bundle": "relative"}'))
    assert cdi_hook.main(["--symlink", "a::/b"]) == 1
    assert "no absolute bundle path" in capsys.readouterr().err


class _Stdin:
    def __init__(self, data: bytes) -> None:
        import io

        self.buffer = io.BytesIO(data)
