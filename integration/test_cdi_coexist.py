"""The CDI specs a Kubernetes GPU node holds, side by side: nvct-device-plugin's (its own kind),
``nvct-cli cdi generate``'s in /etc/cdi and NVIDIA's ``nvidia.yaml`` in /var/run/cdi (as
nvidia-ctk's refresh unit writes it). Every name of each resolves through nvct-runtime's CDI
resolution, and real containers get exactly the GPU each names; two specs of one kind in one
directory are named, with the file to remove, by nvct-runtime and by doctor."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from integration.harness.bundles import BundleFactory
from integration.harness.nvct_config import write_nvct_config
from integration.harness.nvidia_cdi import nvidia_yaml
from integration.test_cdi_runtime import SCRIPT, cli, gpu_nodes, run, smi_uuids
from nvct.cdi.names import PLUGIN_KIND, PLUGIN_SPEC_NAME
from nvct.cdi.specs import device_names, load_cdi_specs, load_spec_file
from nvct.config import load_config
from nvct.doctor.cdi_conflicts import check_cdi_conflicts
from nvct.doctor.context import DoctorContext
from nvct.plan.cdi_order import cdi_order

pytestmark = [pytest.mark.runc, pytest.mark.root]


@pytest.fixture
def node(tmp_path: Path, sim_driver: Any, plugin_factory: Any) -> tuple[Path, Path, Path]:
    """/etc/cdi with generate's spec, /var/run/cdi with NVIDIA's and the plugin's; the config
    naming both directories (the engines' order: /var/run/cdi wins)."""
    etc, run_dir = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    etc.mkdir()
    run_dir.mkdir()
    config = write_nvct_config(
        tmp_path / "runtime" / "config.toml",  # the plugin writes nvct/config.toml
        sim_driver,
        **{"cdi.spec-dirs": f'["{etc}", "{run_dir}"]'},
    )
    done = cli(config, "cdi", "generate", "-o", str(etc / "nvidia.json"))
    assert done.returncode == 0, done.stderr
    (run_dir / "nvidia.yaml").write_text(nvidia_yaml(sim_driver))
    plugin = plugin_factory("--device-list-strategy", "cdi-annotations")
    written = plugin.work / "cdi" / PLUGIN_SPEC_NAME
    deadline = time.monotonic() + 30
    while not written.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert written.exists(), plugin.output()
    (run_dir / PLUGIN_SPEC_NAME).write_bytes(written.read_bytes())
    return etc, run_dir, config


def test_every_name_of_every_spec_resolves(node: tuple[Path, Path, Path]) -> None:
    etc, run_dir, config_file = node
    config = load_config(str(config_file))
    specs = load_cdi_specs([etc, run_dir])
    assert specs.problems == () and specs.conflicts == ()
    files = [etc / "nvidia.json", run_dir / "nvidia.yaml", run_dir / PLUGIN_SPEC_NAME]
    names = {f: device_names(load_spec_file(f)) for f in files}
    assert {n.partition("=")[0] for n in names[run_dir / PLUGIN_SPEC_NAME]} == {PLUGIN_KIND}
    nvidias = set(names[run_dir / "nvidia.yaml"])
    for path, defined in names.items():
        for name in defined:
            (device,) = specs.resolve([name])
            # A later directory's device replaces an earlier one's of the same name (CDI).
            expected = run_dir / "nvidia.yaml" if name in nvidias else path
            assert device.path == str(expected), name
            assert cdi_order([name], specs, config)["gpus"] == [name]


def test_a_container_gets_exactly_the_gpu_each_spec_names(
    node: tuple[Path, Path, Path],
    runc_bundle_factory: BundleFactory,
    container_id: str,
    sim_driver: Any,
) -> None:
    _, _, config = node
    gpus = sim_driver.spec.gpus
    asked = [
        # The plugin's answer (cdi-annotations), generate's UUID name, NVIDIA's index name.
        (
            {"annotations": {"cdi.k8s.io/nvct-device-plugin_gpu": f"{PLUGIN_KIND}={gpus[1].uuid}"}},
            [],
        ),
        ({}, [f"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu={gpus[3].uuid}"]),
        ({}, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=2"]),
    ]
    for n, (extra, env) in enumerate(asked):
        bundle = runc_bundle_factory(["/bin/sh", "-c", SCRIPT], env, extra=extra)
        result = run(bundle, f"{container_id}-{n}", config)
        assert result.returncode == 0, result.stderr
        smi, devs, _ = result.stdout.split("===")
        gpu = gpus[(1, 3, 2)[n]]
        assert smi_uuids(smi) == [gpu.uuid]
        assert gpu_nodes(devs) == [f"nvidia{gpu.minor}"]


def test_two_specs_of_one_kind_in_one_directory_are_named_with_the_fix(
    node: tuple[Path, Path, Path], runc_bundle_factory: BundleFactory, container_id: str
) -> None:
    etc, run_dir, config = node
    (run_dir / "nvct.json").write_bytes((etc / "nvidia.json").read_bytes())
    bundle = runc_bundle_factory(["/bin/true"], ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"])
    result = run(bundle, container_id, config)
    assert result.returncode != 0
    assert (
        f"CDI device nvidia.com/gpu=0 is defined by both {run_dir / 'nvct.json'} and "
        f"{run_dir / 'nvidia.yaml'}: neither is used" in result.stderr
    ), result.stderr
    assert f"remove {run_dir / 'nvidia.yaml'} (or {run_dir / 'nvct.json'})" in result.stderr
    # The plugin's own names stay usable beside the conflict.
    assert not any(c.name.startswith(PLUGIN_KIND) for c in load_cdi_specs([run_dir]).conflicts)
    ctx = DoctorContext(config=load_config(str(config)), cdi_dirs=(etc, run_dir))
    (found,) = check_cdi_conflicts(ctx)
    assert found.status == "FAIL" and str(run_dir / "nvct.json") in found.message
    assert "nvidia.com/gpu=0" in found.message and "remove" in found.fix
    assert "neither definition is used" in found.message
