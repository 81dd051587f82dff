"""nvct-cli cdi generate / list and the CDI spec writer (``nvct.plan.cdi_spec``); the specs are
built from the simulated drivers' recorded inventories (tests/inventories.py). The hook they
name is tested in tests/hook/test_cdi_hook.py."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from nvct.base.errors import RequestError
from nvct.base.oci import CDI_LD_CACHE_ENV
from nvct.cdi.registry import list_devices
from nvct.cdi.specs import device_names, driver_version
from nvct.cli.main import main
from nvct.config.container import RequestRules
from nvct.host.arch import host_arch
from nvct.plan.build import build_plan
from nvct.plan.cdi_spec import (
    SpecOptions,
    build_spec,
    options_like,
    to_json,
    to_yaml,
)
from nvct.request.parse import parse_request
from tests.conftest import sim_config
from tests.inventories import RecordedDriver

HOOK = "/usr/bin/nvct-cdi-hook"
SCHEMA_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "cdi-schema"  # CDI's spec schema


def spec_for(sim: RecordedDriver, tmp: Path, strategy: str = "index", **options: object) -> dict:
    return build_spec(
        sim.inventory,
        sim_config(sim, tmp),
        host_arch(),
        options=SpecOptions(strategy, **options),  # type: ignore[arg-type]
        hook=HOOK,
    )


def validate(spec: dict) -> None:
    """Raise unless ``spec`` is valid by the CDI project's JSON schema (schema.json + defs.json)."""
    schemas = {p.name: json.loads(p.read_text()) for p in SCHEMA_DIR.glob("*.json")}
    registry: Registry = Registry().with_resources(
        (name, Resource.from_contents(body, default_specification=DRAFT7))
        for name, body in schemas.items()
    )
    jsonschema.Draft7Validator(schemas["schema.json"], registry=registry).validate(spec)


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


@pytest.mark.parametrize(
    "policy",
    [
        RequestRules(only_allocated_gpus=True),
        RequestRules(accept_envvar_when_unprivileged=False),
        RequestRules(swarm_resources=("DOCKER_RESOURCE_GPU",)),
    ],
)
def test_container_input_policies_do_not_empty_the_spec(recorded_h100x4, tmp_path, policy) -> None:
    """The policies guard what an image asks for; the operator's spec keeps every device."""
    config = sim_config(recorded_h100x4, tmp_path, request=policy)
    guarded = build_spec(recorded_h100x4.inventory, config, host_arch(), hook=HOOK)
    assert guarded == spec_for(recorded_h100x4, tmp_path, "both")
    one = next(d for d in guarded["devices"] if d["name"] == "1")
    assert [n["path"] for n in one["containerEdits"]["deviceNodes"]] == ["/dev/nvidia1"]


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
    assert hook["path"] == HOOK
    assert hook["args"][:3] == ["nvct-cdi-hook", "--ldconfig", str(config.ldconfig)]
    path_env, entries_env = hook["env"]
    assert path_env == "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    # ldconfig's entries for the spec's libraries, for the hook to merge into the image's cache.
    name, _, entries = entries_env.partition("=")
    assert name == CDI_LD_CACHE_ENV
    assert json.loads(entries) == [list(e) for e in plan.ld_cache_entries]
    assert ["libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x303] in json.loads(entries)
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
    names = [f"nvidia.com/gpu={n}" for g in gpus for n in (g.minor, g.uuid)]
    names.append("nvidia.com/gpu=all")
    assert listed.splitlines() == names * 2  # b.json, then nvct.yaml
    assert "broken.json is not valid JSON" in err
    assert list_devices([tmp_path / "missing"]).devices == ()


def test_generate_to_stdout_is_json(recorded_h100x4, tmp_path, capsys) -> None:
    assert main([*cli_roots(recorded_h100x4, tmp_path), "cdi", "generate"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "nvidia.com/gpu"


def test_generated_specs_are_valid_by_the_cdi_schema(
    recorded_h100x4, recorded_a100mig, tmp_path
) -> None:
    for sim in (recorded_h100x4, recorded_a100mig):
        for strategy in ("index", "uuid", "both"):
            validate(spec_for(sim, tmp_path, strategy))
        validate(spec_for(sim, tmp_path, mode="management"))
        validate(spec_for(sim, tmp_path, "both", vendor="example.com", cls="tpu", device_ids=()))
    broken = spec_for(recorded_h100x4, tmp_path)
    broken["devices"][0]["containerEdits"]["deviceNodes"][0]["major"] = "195"
    with pytest.raises(jsonschema.ValidationError):  # the check can fail
        validate(broken)


def test_the_default_names_are_index_and_uuid_plus_all(recorded_h100x4, tmp_path, capsys) -> None:
    assert main([*cli_roots(recorded_h100x4, tmp_path), "cdi", "generate"]) == 0
    spec = json.loads(capsys.readouterr().out)
    gpu1 = recorded_h100x4.spec.gpus[1]
    by_name = {d["name"]: d for d in spec["devices"]}
    assert list(by_name) == [
        n for g in recorded_h100x4.spec.gpus for n in (str(g.minor), g.uuid)
    ] + ["all"]
    assert by_name["1"]["containerEdits"] == by_name[gpu1.uuid]["containerEdits"]
    assert [n["path"] for n in by_name[gpu1.uuid]["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia1"
    ]


def test_vendor_and_class_set_the_kind(recorded_h100x4, tmp_path, capsys) -> None:
    roots = cli_roots(recorded_h100x4, tmp_path)
    assert main([*roots, "cdi", "generate", "--vendor", "example.com", "--class", "gpu2"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "example.com/gpu2"
    assert main([*roots, "cdi", "generate", "--vendor", "bad vendor"]) == 1
    err = capsys.readouterr().err
    assert "invalid CDI kind 'bad vendor/gpu'" in err and len(err.strip().splitlines()) <= 2


def test_device_id_selects_a_subset(recorded_h100x4, recorded_a100mig, tmp_path, capsys) -> None:
    gpus = recorded_h100x4.spec.gpus
    roots = cli_roots(recorded_h100x4, tmp_path / "h")
    args = [*roots, "cdi", "generate", "--device-id", "2", "--device-id", f"0,{gpus[3].uuid}"]
    assert main(args) == 0
    spec = json.loads(capsys.readouterr().out)
    names = [d["name"] for d in spec["devices"]]
    assert names == ["0", gpus[0].uuid, "2", gpus[2].uuid, "3", gpus[3].uuid, "all"]
    every = next(d for d in spec["devices"] if d["name"] == "all")
    assert [n["path"] for n in every["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia0",
        "/dev/nvidia2",
        "/dev/nvidia3",
    ]
    assert main([*roots, "cdi", "generate", "--device-id", "7"]) == 1
    err = capsys.readouterr().err
    assert "--device-id '7' names no device" in err and "known: 0, 1, 2, 3" in err
    mig = recorded_a100mig.spec.gpus[0].migs[1]
    spec = spec_for(recorded_a100mig, tmp_path, "both", device_ids=(mig.uuid,))
    assert [d["name"] for d in spec["devices"]] == ["0:1", mig.uuid, "all"]


def test_management_mode_gives_every_node_in_one_device(recorded_a100mig, tmp_path, capsys) -> None:
    roots = cli_roots(recorded_a100mig, tmp_path)
    assert main([*roots, "cdi", "generate", "--mode", "management"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["kind"] == "management.nvidia.com/gpu"
    (device,) = spec["devices"]
    assert device["name"] == "all"
    paths = {n["path"] for n in device["containerEdits"]["deviceNodes"]}
    paths |= {n["path"] for n in spec["containerEdits"]["deviceNodes"]}
    sim = recorded_a100mig.spec
    expected = {f"/dev/nvidia{g.minor}" for g in sim.gpus}
    expected |= {
        f"/dev/nvidia-caps/nvidia-cap{c}"
        for g in sim.gpus
        for m in g.migs
        for c in (m.gi_cap_minor, m.ci_cap_minor)
    }
    expected |= {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    assert expected <= paths
    assert any(m["containerPath"].endswith("/nvidia-smi") for m in spec["containerEdits"]["mounts"])
    assert main([*roots, "cdi", "generate", "--mode", "management", "--device-id", "0"]) == 1
    assert "a management spec has one device" in capsys.readouterr().err


def test_the_hook_is_the_nvct_cdi_hook_beside_nvct_cli(recorded_h100x4, tmp_path) -> None:
    """The spec names the installed nvct-cdi-hook program (not an interpreter that may not
    find nvct), and that program runs nvct's hook."""
    bindir = Path(sys.executable).parent
    cli = bindir / "nvct-cli"
    if not (bindir / "nvct-cdi-hook").is_file():
        pytest.fail(f"no nvct-cdi-hook beside {sys.executable}: pip install -e . (make venv)")
    done = subprocess.run(
        [str(cli), *cli_roots(recorded_h100x4, tmp_path), "cdi", "generate"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    (hook,) = json.loads(done.stdout)["containerEdits"]["hooks"]
    assert hook["path"] == str(bindir / "nvct-cdi-hook")
    ran = subprocess.run(
        [hook["path"], "--bogus", "x"],
        capture_output=True,
        text=True,
        timeout=30,
        env={},
        check=False,
    )
    assert ran.returncode == 2 and "usage: nvct-cdi-hook" in ran.stderr


def test_an_explicit_hook_path_must_be_absolute(recorded_h100x4, tmp_path, capsys) -> None:
    roots = cli_roots(recorded_h100x4, tmp_path)
    assert main([*roots, "cdi", "generate", "--hook-path", "/opt/x/nvct-cdi-hook"]) == 0
    (hook,) = json.loads(capsys.readouterr().out)["containerEdits"]["hooks"]
    assert hook["path"] == "/opt/x/nvct-cdi-hook"
    assert main([*roots, "cdi", "generate", "--hook-path", "nvct-cdi-hook"]) == 1
    assert "--hook-path 'nvct-cdi-hook' is not absolute" in capsys.readouterr().err


def test_directory_library_mounts_bind_one_directory_of_hard_links(
    recorded_h100x4, tmp_path, capsys
) -> None:
    """``--library-mounts directory``: the driver's libraries and their SONAME links come as
    one mount of a directory of hard links under --library-dir, seen at
    <libdir>/nvidia-driver, which the hook lists in ld.so.conf.d and its cache entries name;
    doctor's rebuild of the spec from disk (nothing made) is the same spec."""
    roots = cli_roots(recorded_h100x4, tmp_path)
    assert main([*roots, "cdi", "generate"]) == 0
    files = json.loads(capsys.readouterr().out)
    library_dir = tmp_path / "cdi"
    argv = [*roots, "cdi", "generate", "--library-mounts", "directory"]
    assert main([*argv, "--library-dir", str(library_dir)]) == 0
    out = capsys.readouterr()
    spec = json.loads(out.out)
    assert "warning" not in out.err
    validate(spec)
    lib = "/usr/lib/x86_64-linux-gnu"
    mounts = spec["containerEdits"]["mounts"]
    (libdir,) = [m for m in mounts if m["containerPath"] == f"{lib}/nvidia-driver"]
    host = Path(libdir["hostPath"])
    assert host.parent == library_dir / "libdirs"
    assert {"ro", "nosuid", "nodev", "bind"} <= set(libdir["options"])
    per_file = [m for m in files["containerEdits"]["mounts"] if m["containerPath"].startswith(lib)]
    assert len(per_file) > 20
    assert [m for m in mounts if os.path.dirname(m["containerPath"]) == lib] == [libdir]
    driver_lib = recorded_h100x4.driver_root / "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
    assert (host / "libcuda.so.550.54.15").stat().st_ino == driver_lib.stat().st_ino
    assert os.readlink(host / "libcuda.so.1") == "libcuda.so.550.54.15"
    (hook,) = spec["containerEdits"]["hooks"]
    args = hook["args"]
    conf = [f"{lib}/nvidia-driver", "/usr/lib/i386-linux-gnu/nvidia-driver"]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--ld-conf"] == conf
    assert [args[i + 1] for i, a in enumerate(args) if a == "--ldconfig-dir"] == conf
    assert not any("libcuda.so.1::" in a for a in args)  # the link is in the directory
    entries = json.loads(hook["env"][1].partition("=")[2])
    assert ["libcuda.so.1", f"{lib}/nvidia-driver/libcuda.so.1", 0x303] in entries
    options, path = options_like(spec)
    assert options.library_root == str(library_dir)
    config = sim_config(recorded_h100x4, tmp_path)
    rebuilt = build_spec(
        recorded_h100x4.inventory, config, host_arch(), options=options, hook=path, create=False
    )
    assert rebuilt == spec


def test_driver_capabilities_keep_only_their_files(recorded_h100x4, tmp_path, capsys) -> None:
    """compute,utility: the plan's files for those capabilities, as a container asking for them
    through NVIDIA_DRIVER_CAPABILITIES gets from the runtime; no graphics, video or 32-bit
    files, no nvidia-modeset; the spec's env says which it holds, and is read back."""
    full = spec_for(recorded_h100x4, tmp_path)
    some = spec_for(recorded_h100x4, tmp_path, capabilities=("compute", "utility"))
    validate(some)
    config = sim_config(recorded_h100x4, tmp_path)
    plan = build_plan(
        parse_request(
            {"NVIDIA_VISIBLE_DEVICES": "none", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"},
            config=config,
        ),
        recorded_h100x4.inventory,
        config,
        host_arch(),
        enforce_requirements=False,
    )
    edits = some["containerEdits"]
    targets = [m["containerPath"] for m in edits["mounts"]]
    assert targets == [m.target for m in plan.mounts]
    assert len(targets) < len(full["containerEdits"]["mounts"])
    assert "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15" in targets
    assert "/usr/bin/nvidia-smi" in targets
    assert not any("vulkan" in t or "egl" in t or "i386" in t or "vdpau" in t for t in targets)
    assert "/dev/nvidia-modeset" not in {n["path"] for n in edits["deviceNodes"]}
    assert "NVCT_CDI_DRIVER_CAPABILITIES=utility,compute" in edits["env"]
    assert "NVCT_CDI_DRIVER_CAPABILITIES" not in json.dumps(full)
    assert [d["name"] for d in some["devices"]] == [d["name"] for d in full["devices"]]
    options, hook = options_like(some)
    assert options.capabilities == ("utility", "compute")
    assert hook == HOOK
    rebuilt = build_spec(recorded_h100x4.inventory, config, host_arch(), options=options, hook=HOOK)
    assert rebuilt == some


def test_generate_with_driver_capabilities(recorded_h100x4, tmp_path, capsys) -> None:
    out, libs = tmp_path / "nvidia.json", tmp_path / "libs"
    argv = [*cli_roots(recorded_h100x4, tmp_path), "cdi", "generate", "-o", str(out)]
    argv += ["--library-mounts", "directory", "--library-dir", str(libs)]
    assert main([*argv, "--driver-capabilities", " compute, utility"]) == 0
    assert capsys.readouterr().out == (
        f"{out}: written (9 devices, driver 550.54.15, the libraries as one directory under "
        f"{libs})\n"
    )
    assert (
        "NVCT_CDI_DRIVER_CAPABILITIES=utility,compute"
        in json.loads(out.read_text())["containerEdits"]["env"]
    )
    for every in ("all", "compute,all"):  # as without the option
        assert main([*argv, "--driver-capabilities", every]) == 0
        assert "NVCT_CDI_DRIVER_CAPABILITIES" not in out.read_text()


def test_an_unknown_driver_capability_is_one_line(recorded_h100x4, tmp_path, capsys) -> None:
    out = tmp_path / "nvidia.json"
    argv = [*cli_roots(recorded_h100x4, tmp_path), "cdi", "generate", "-o", str(out)]
    assert main([*argv, "--driver-capabilities", "compute,graphix"]) != 0
    err = capsys.readouterr().err
    assert err.startswith(
        "nvct-cli: error: unknown driver capability 'graphix' (from --driver-capabilities)"
    )
    assert err.count("\n") == 1
    assert not out.exists()


def test_display_without_nvidia_modeset_is_refused(recorded_h100x4, tmp_path) -> None:
    inventory = dataclasses.replace(
        recorded_h100x4.inventory,
        control_nodes=tuple(
            n for n in recorded_h100x4.inventory.control_nodes if n.path != "/dev/nvidia-modeset"
        ),
    )
    config = sim_config(recorded_h100x4, tmp_path)
    options = SpecOptions(capabilities=("compute", "display"))
    with pytest.raises(RequestError, match="'display' needs /dev/nvidia-modeset"):
        build_spec(inventory, config, host_arch(), options=options, hook=HOOK)


def test_generate_says_where_the_library_directories_are(recorded_h100x4, tmp_path, capsys):
    out, libs = tmp_path / "nvidia.json", tmp_path / "libs"
    argv = [*cli_roots(recorded_h100x4, tmp_path), "cdi", "generate", "-o", str(out)]
    assert main([*argv, "--library-mounts", "directory", "--library-dir", str(libs)]) == 0
    assert capsys.readouterr().out == (
        f"{out}: written (9 devices, driver 550.54.15, the libraries as 2 directories under "
        f"{libs})\n"
    )


def test_a_library_dir_that_cannot_be_made_keeps_the_files_spec(
    recorded_h100x4, tmp_path, capsys
) -> None:
    roots = cli_roots(recorded_h100x4, tmp_path)
    assert main([*roots, "cdi", "generate"]) == 0
    files = json.loads(capsys.readouterr().out)
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    argv = [*roots, "cdi", "generate", "--library-mounts", "directory"]
    assert main([*argv, "--library-dir", str(blocked)]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out) == files
    assert (
        "warning: --library-mounts directory: cannot make the directory for "
        f"/usr/lib/x86_64-linux-gnu under {blocked} ("
    ) in out.err
    assert main([*argv, "--library-dir", "rel/dir"]) == 1
    assert "--library-dir 'rel/dir' is not absolute" in capsys.readouterr().err


def test_generate_refuses_a_suffix_registries_ignore(recorded_h100x4, tmp_path, capsys) -> None:
    out = tmp_path / "nvct.txt"
    assert main([*cli_roots(recorded_h100x4, tmp_path), "cdi", "generate", "-o", str(out)]) == 1
    assert "only read *.json and *.yaml" in capsys.readouterr().err
    assert not out.exists()
