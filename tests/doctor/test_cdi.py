"""doctor's CDI check: specs missing, generated for another driver, or current."""

from __future__ import annotations

import json

import pytest

from nvct.doctor import FAIL, PASS, WARN, cdi
from nvct.host.arch import host_arch
from nvct.plan.cdi_spec import SpecOptions, build_spec
from tests.cli.test_cli import cli, roots
from tests.conftest import sim_config
from tests.doctor.conftest import cdi_generator, context, write_cdi

HOOK = "/bin/true"  # an executable here: doctor fails a spec whose hook is not one


def test_cdi_spec_missing_old_and_current(tmp_path) -> None:
    ctx = context(tmp_path, cdi_dirs=(tmp_path / "etc-cdi", tmp_path / "run-cdi"))
    [none] = cdi.check_cdi(ctx, "550.54.15")
    assert none.status == WARN and "no CDI spec for nvidia.com/gpu" in none.message
    assert none.fix == "nvct-cli cdi generate --output /etc/cdi/nvidia.yaml"
    old = write_cdi(tmp_path / "etc-cdi", "nvidia.json", "535.104.05")
    write_cdi(tmp_path / "run-cdi", "other.json", None)  # another kind is ignored...
    other = json.loads((tmp_path / "run-cdi/other.json").read_text())
    (tmp_path / "run-cdi/other.json").write_text(json.dumps({**other, "kind": "vendor.com/x"}))
    [stale] = cdi.check_cdi(ctx, "550.54.15")
    assert stale.status == FAIL
    assert f"{old} was generated for driver 535.104.05, the driver is 550.54.15" in stale.message
    assert stale.fix == f"nvct-cli cdi generate --output {old}"
    current = write_cdi(tmp_path / "run-cdi", "nvct.json", "550.54.15", annotation=False)
    results = cdi.check_cdi(ctx, "550.54.15")
    assert [r.status for r in results] == [FAIL, PASS]
    assert str(current) in results[1].message
    (tmp_path / "run-cdi/broken.json").write_text("{")
    assert any("unreadable CDI spec" in r.message for r in cdi.check_cdi(ctx, "550.54.15"))


def test_cdi_yaml_is_read_by_pyyaml_and_a_missing_pyyaml_is_named(tmp_path, monkeypatch) -> None:
    import sys

    spec = tmp_path / "cdi/nvidia.yaml"
    spec.parent.mkdir()
    spec.write_text(
        '---\ncdiVersion: "0.5.0"\nkind: "nvidia.com/gpu"\ncontainerEdits:\n  env:\n'
        '  - "NVIDIA_VISIBLE_DEVICES=void"\n  - "NVCT_CDI_DRIVER_VERSION=550.54.15"\n'
    )
    specs, errors = cdi.find_specs((tmp_path / "cdi",))
    assert not errors and specs == [cdi.CdiSpec(spec, "550.54.15")]
    # An install that lost its dependency: the file and the fix, no guess by regex.
    monkeypatch.setitem(sys.modules, "yaml", None)
    specs, errors = cdi.find_specs((tmp_path / "cdi",))
    assert specs == [] and len(errors) == 1
    assert errors[0].startswith(f"{spec} is YAML and PyYAML, a dependency of nvct, cannot be")
    assert errors[0].endswith("reinstall nvct (its package, or pip install nvct)")


@pytest.mark.root
def test_cdi_spec_from_nvct_cdi_generate_is_current(h100x4, tmp_path) -> None:
    out = tmp_path / "cdi/nvidia.yaml"
    out.parent.mkdir()
    cli(*roots(h100x4, tmp_path), "cdi", "generate", "--output", str(out))
    ctx = context(tmp_path, cdi_dirs=(out.parent,))
    [result] = cdi.check_cdi(ctx, "550.54.15")
    assert result.status == PASS, result
    [stale] = cdi.check_cdi(ctx, "570.86.15")
    assert stale.status == FAIL


# -- stale versus what cdi generate would write now (recorded inventories, unprivileged) ---


def _write(directory, spec) -> object:  # type: ignore[no-untyped-def]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "nvidia.json"
    path.write_text(json.dumps(spec))
    return path


def test_a_spec_matching_what_generate_writes_now_passes(recorded_h100x4, tmp_path) -> None:
    sim = recorded_h100x4
    now = cdi_generator(sim, tmp_path)
    for options in (
        SpecOptions(),
        SpecOptions("index"),
        SpecOptions(device_ids=("1",)),
        SpecOptions(capabilities=("compute", "utility")),  # read back from the spec's env
    ):
        spec = build_spec(
            sim.inventory, sim_config(sim, tmp_path), host_arch(), options=options, hook=HOOK
        )
        _write(tmp_path / "cdi", spec)
        ctx = context(tmp_path, cdi_generate=now)
        [result] = cdi.check_cdi(ctx, "550.54.15")
        assert result.status == PASS, (options, result)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda s: s["devices"].insert(0, {"name": "GPU-gone", "containerEdits": {}}),
         "device(s) GPU-gone no longer exist"),
        (lambda s: s["devices"][2]["containerEdits"]["deviceNodes"][0].update(minor=9),
         "the edits of device(s) 1 changed"),
        (lambda s: s["containerEdits"]["mounts"].pop(),
         "the common mounts changed"),
        (lambda s: s["containerEdits"]["hooks"][0]["args"].append("--symlink"),
         "the common hooks changed"),
    ],
)  # fmt: skip
def test_a_spec_that_drifted_from_the_driver_is_stale(
    recorded_h100x4, tmp_path, change, said
) -> None:
    sim = recorded_h100x4
    spec = build_spec(sim.inventory, sim_config(sim, tmp_path), host_arch(), hook=HOOK)
    change(spec)
    path = _write(tmp_path / "cdi", spec)
    [result] = cdi.check_cdi(
        context(tmp_path, cdi_generate=cdi_generator(sim, tmp_path)), "550.54.15"
    )
    assert result.status == FAIL
    assert f"{path} is stale: {said}" in result.message
    assert result.fix == f"nvct-cli cdi generate --output {path}"


def test_a_stale_spec_of_some_capabilities_is_regenerated_with_them(
    recorded_h100x4, tmp_path
) -> None:
    """The fix for a ``--driver-capabilities`` spec writes the same kind of spec again, not
    one with every capability's files."""
    sim = recorded_h100x4
    options = SpecOptions(capabilities=("compute", "utility"))
    spec = build_spec(
        sim.inventory, sim_config(sim, tmp_path), host_arch(), options=options, hook=HOOK
    )
    spec["containerEdits"]["mounts"].pop()
    path = _write(tmp_path / "cdi", spec)
    [result] = cdi.check_cdi(
        context(tmp_path, cdi_generate=cdi_generator(sim, tmp_path)), "550.54.15"
    )
    assert result.status == FAIL
    assert f"{path} is stale: the common mounts changed" in result.message
    assert result.fix == (
        f"nvct-cli cdi generate --output {path} --driver-capabilities utility,compute"
    )


def test_a_spec_whose_hook_is_gone_fails(recorded_h100x4, tmp_path) -> None:
    sim = recorded_h100x4
    gone = str(tmp_path / "removed-venv/bin/nvct-cdi-hook")
    spec = build_spec(sim.inventory, sim_config(sim, tmp_path), host_arch(), hook=gone)
    path = _write(tmp_path / "cdi", spec)
    [result] = cdi.check_cdi(
        context(tmp_path, cdi_generate=cdi_generator(sim, tmp_path)), "550.54.15"
    )
    assert result.status == FAIL
    assert result.message == (
        f"{path} runs the hook {gone}, which is not an executable here: every container "
        "given its devices fails to start"
    )
    assert result.fix == f"nvct-cli cdi generate --output {path}"


def test_a_spec_whose_library_directory_is_gone_is_stale(recorded_h100x4, tmp_path) -> None:
    """A ``--library-mounts directory`` spec is current while its directory is whole; with
    it gone (a cleaner, another machine's spec), doctor makes none and says how to."""
    import shutil

    sim = recorded_h100x4
    libs = tmp_path / "libs"
    options = SpecOptions(library_root=str(libs))
    config = sim_config(sim, tmp_path)
    spec = build_spec(sim.inventory, config, host_arch(), options=options, hook=HOOK)
    path = _write(tmp_path / "cdi", spec)
    ctx = context(tmp_path, cdi_generate=cdi_generator(sim, tmp_path))
    [result] = cdi.check_cdi(ctx, "550.54.15")
    assert result.status == PASS, result
    shutil.rmtree(libs)
    [result] = cdi.check_cdi(ctx, "550.54.15")
    assert result.status == FAIL
    gone = [m["hostPath"] for m in spec["containerEdits"]["mounts"] if str(libs) in m["hostPath"]]
    assert len(gone) == 2  # the 64-bit and the 32-bit libraries
    assert result.message == (
        f"{path} mounts {gone[0]} (and 1 more), which does not exist: every container given "
        "its devices fails to start"
    )
    assert result.fix == (
        f"nvct-cli cdi generate --output {path} --library-mounts directory --library-dir {libs}"
    )
    assert not libs.exists()


def test_names_two_specs_of_one_directory_define_and_which_file_to_remove(tmp_path) -> None:
    from nvct.doctor.cdi_conflicts import check_cdi_conflicts

    run_cdi = tmp_path / "run-cdi"
    ctx = context(tmp_path, cdi_dirs=(tmp_path / "etc-cdi", run_cdi))
    device = {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [device]}
    run_cdi.mkdir(parents=True)
    (run_cdi / "nvidia.yaml").write_text(json.dumps(spec))  # JSON is YAML
    [fine] = check_cdi_conflicts(ctx)
    assert fine.status == PASS
    (run_cdi / "nvct.json").write_text(json.dumps(spec))
    [clash] = check_cdi_conflicts(ctx)
    assert clash.status == FAIL
    assert clash.message.startswith(
        f"{run_cdi / 'nvct.json'} and {run_cdi / 'nvidia.yaml'} both define 1 CDI device(s) "
        "(nvidia.com/gpu=0): neither definition is used"
    )
    assert clash.fix.startswith(
        f"keep one nvidia.com/gpu spec per directory: remove {run_cdi / 'nvidia.yaml'} "
        f"(or {run_cdi / 'nvct.json'})"
    )
    # The device plugin's spec from before it had a kind of its own: restarting it fixes that.
    (run_cdi / "nvct.json").rename(run_cdi / "nvct-device-plugin.json")
    [old_plugin] = check_cdi_conflicts(ctx)
    assert old_plugin.fix.startswith(
        f"restart nvct-device-plugin: it rewrites {run_cdi / 'nvct-device-plugin.json'} as "
        "k8s.device-plugin.nvct.io/gpu"
    )
