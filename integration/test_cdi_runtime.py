"""CDI devices through nvct-runtime with real runc: names in NVIDIA_VISIBLE_DEVICES and in
``cdi.k8s.io/`` annotations resolve through the CDI specs of ``[cdi] spec-dirs``, as an engine
with CDI support would resolve them, for engines without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from integration.harness.bundles import BundleFactory, run_runc
from integration.harness.nvct_config import NVCT_BIN, write_nvct_config
from integration.harness.nvidia_cdi import nvidia_yaml

pytestmark = [pytest.mark.runc, pytest.mark.root]

SCRIPT = "nvidia-smi -L; echo ===; ls /dev; echo ===; env"


def smi_uuids(output: str) -> list[str]:
    return [ln.split("UUID: ")[1].rstrip(")") for ln in output.splitlines() if "UUID: GPU-" in ln]


def gpu_nodes(listing: str) -> list[str]:
    return sorted(d for d in listing.split() if d.startswith("nvidia") and d[6:].isdigit())


@pytest.fixture
def cdi_setup(sim_driver: Any, tmp_path: Path) -> tuple[Path, Path]:
    """A spec dir holding nvct's generated spec for the simulated driver, and a config naming
    it as the only spec dir."""
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    config = write_nvct_config(
        tmp_path / "nvct" / "config.toml", sim_driver, **{"cdi.spec-dirs": f'["{spec_dir}"]'}
    )
    done = cli(config, "cdi", "generate", "-o", str(spec_dir / "nvidia.json"))
    assert done.returncode == 0, done.stderr
    return spec_dir, config


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run(bundle: Path, container_id: str, config: Path) -> subprocess.CompletedProcess[str]:
    return run_runc(
        bundle,
        container_id,
        runtime=NVCT_BIN / "nvct-runtime",
        env={**os.environ, "NVCT_CONFIG": str(config)},
    )


def test_a_cdi_name_in_nvidia_visible_devices_gives_exactly_that_gpu(
    runc_bundle_factory: BundleFactory, container_id: str, cdi_setup, sim_driver: Any
) -> None:
    _, config = cdi_setup
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", SCRIPT], ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"]
    )
    result = run(bundle, container_id, config)
    assert result.returncode == 0, result.stderr
    smi, devs, env = result.stdout.split("===")
    assert smi_uuids(smi) == [sim_driver.spec.gpus[1].uuid]
    assert gpu_nodes(devs) == ["nvidia1"]
    # the spec's own variables reach the container, replacing the image's value
    assert "NVIDIA_VISIBLE_DEVICES=void" in env.split()
    log = [json.loads(ln) for ln in (config.parent / "nvct.log").read_text().splitlines()]
    prepared = [e for e in log if e.get("event") == "container_prepared"]
    assert prepared[-1]["gpus"] == ["nvidia.com/gpu=1"]


def test_cdi_annotations_name_the_devices_and_win_over_the_variable(
    runc_bundle_factory: BundleFactory, container_id: str, cdi_setup, sim_driver: Any
) -> None:
    """What containerd's CRI plugin does with a device plugin's cdi-annotations answer."""
    _, config = cdi_setup
    uuid = sim_driver.spec.gpus[3].uuid
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", SCRIPT],
        ["NVIDIA_VISIBLE_DEVICES=0"],
        extra={"annotations": {"cdi.k8s.io/nvct-device-plugin_gpu": f"nvidia.com/gpu={uuid}"}},
    )
    result = run(bundle, container_id, config)
    assert result.returncode == 0, result.stderr
    smi, devs, _ = result.stdout.split("===")
    assert smi_uuids(smi) == [uuid]
    assert gpu_nodes(devs) == ["nvidia3"]


def test_the_second_start_uses_the_cached_order_until_a_spec_changes(
    runc_bundle_factory: BundleFactory, container_id: str, cdi_setup, sim_driver: Any
) -> None:
    spec_dir, config = cdi_setup
    env = ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=2"]
    for i in range(2):
        bundle = runc_bundle_factory(["/bin/sh", "-c", SCRIPT], env)
        assert run(bundle, f"{container_id}-{i}", config).returncode == 0
    # a spec that no longer has device 2 (regenerated for GPUs 0 and 1 only)
    spec = json.loads((spec_dir / "nvidia.json").read_text())
    spec["devices"] = [d for d in spec["devices"] if d["name"] in ("0", "1")]
    (spec_dir / "nvidia.json").write_text(json.dumps(spec))
    bundle = runc_bundle_factory(["/bin/sh", "-c", SCRIPT], env)
    result = run(bundle, f"{container_id}-2", config)
    assert result.returncode != 0
    assert "unknown CDI device 'nvidia.com/gpu=2'" in result.stderr
    log = [json.loads(ln) for ln in (config.parent / "nvct.log").read_text().splitlines()]
    assert [e["cached"] for e in log if e.get("event") == "container_prepared"] == [False, True]


def test_an_unknown_cdi_name_fails_with_the_names_that_exist(
    runc_bundle_factory: BundleFactory, container_id: str, cdi_setup
) -> None:
    spec_dir, config = cdi_setup
    (spec_dir / "broken.json").write_text("{not json")
    bundle = runc_bundle_factory(["/bin/true"], ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=9"])
    result = run(bundle, container_id, config)
    assert result.returncode != 0
    error = [ln for ln in result.stderr.splitlines() if "nvct-runtime: error:" in ln]
    assert len(error) == 1, result.stderr
    assert "unknown CDI device 'nvidia.com/gpu=9' (known: nvidia.com/gpu=0" in error[0]
    assert f"{spec_dir / 'broken.json'} is not valid JSON" in error[0]
    assert (
        container_id
        not in subprocess.run(
            ["runc", "list", "-q"], capture_output=True, text=True, check=False
        ).stdout
    )


def test_a_malformed_spec_leaves_the_other_specs_usable(
    runc_bundle_factory: BundleFactory, container_id: str, cdi_setup, sim_driver: Any
) -> None:
    spec_dir, config = cdi_setup
    (spec_dir / "other-vendor.yaml").write_text("kind: example.com/thing\ndevices: 7\n")
    env = ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"]
    explained = cli(config, "explain", "--bundle", str(runc_bundle_factory(["/bin/true"], env)))
    assert (
        f"CDI spec not used: {spec_dir / 'other-vendor.yaml'}: a CDI spec needs" in explained.stdout
    )
    assert f"nvidia.com/gpu=0  from {spec_dir / 'nvidia.json'}" in explained.stdout
    result = run(runc_bundle_factory(["/bin/sh", "-c", SCRIPT], env), container_id, config)
    assert result.returncode == 0, result.stderr
    assert smi_uuids(result.stdout.split("===")[0]) == [sim_driver.spec.gpus[0].uuid]


def test_nvidias_own_spec_format(
    runc_bundle_factory: BundleFactory, container_id: str, sim_driver: Any, tmp_path: Path
) -> None:
    """A YAML spec as nvidia-ctk writes it: devices by index and UUID with hostPath nodes and
    no numbers, spec-wide control nodes, library mounts and a createContainer hook."""
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    dev, root = sim_driver.dev_root, sim_driver.driver_root
    hook_log = tmp_path / "hook.log"
    hook = tmp_path / "nvidia-cdi-hook"
    hook.write_text(f'#!/bin/sh\necho "$@" >> {hook_log}\ncat > /dev/null\n')
    hook.chmod(0o755)
    lib = root / "usr/lib/x86_64-linux-gnu"
    gpu = sim_driver.spec.gpus[2]
    devices = "".join(
        f"""- name: "{name}"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia2
      hostPath: {dev}/dev/nvidia2
"""
        for name in ("2", gpu.uuid)
    )
    (spec_dir / "nvidia.yaml").write_text(
        f"""---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
{devices}containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
    hostPath: {dev}/dev/nvidiactl
  hooks:
  - hookName: createContainer
    path: {hook}
    args:
    - nvidia-cdi-hook
    - update-ldcache
    - --folder
    - /usr/lib/x86_64-linux-gnu
  mounts:
  - hostPath: {lib}/libnvidia-ml.so.1
    containerPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
    options: [ro, nosuid, nodev, bind]
  - hostPath: {root}/usr/bin/nvidia-smi
    containerPath: /usr/bin/nvidia-smi
    options: [ro, nosuid, nodev, bind]
"""
    )
    config = write_nvct_config(
        tmp_path / "nvct" / "config.toml", sim_driver, **{"cdi.spec-dirs": f'["{spec_dir}"]'}
    )
    bundle = runc_bundle_factory(
        ["/bin/sh", "-c", SCRIPT], [f"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu={gpu.uuid}"]
    )
    result = run(bundle, container_id, config)
    assert result.returncode == 0, result.stderr
    smi, devs, _ = result.stdout.split("===")
    assert smi_uuids(smi) == [gpu.uuid]
    assert gpu_nodes(devs) == ["nvidia2"] and "nvidiactl" in devs.split()
    # runc gives a hook args[1:] (args[0] is its argv[0])
    assert hook_log.read_text().split() == [
        "update-ldcache",
        "--folder",
        "/usr/lib/x86_64-linux-gnu",
    ]


def engine_applied(spec: dict[str, Any], name: str) -> dict[str, Any]:
    """What an engine with CDI on (CRI-O; containerd with enable_cdi) puts in a container's OCI
    spec for the device ``name`` of ``spec``, by the CDI library's rules: the spec's and the
    device's edits, nodes by container path, mounts, hooks per stage, env."""
    (device,) = [d for d in spec["devices"] if f"{spec['kind']}={d['name']}" == name]
    out: dict[str, Any] = {"devices": [], "mounts": [], "hooks": {}, "env": []}
    for edits in (spec.get("containerEdits") or {}, device["containerEdits"]):
        for node in edits.get("deviceNodes") or ():
            st = os.stat(node.get("hostPath") or node["path"])
            out["devices"].append(
                {
                    "path": node["path"],
                    "type": "c",
                    "major": os.major(st.st_rdev),
                    "minor": os.minor(st.st_rdev),
                    "fileMode": 0o20666,
                    "uid": 0,
                    "gid": 0,
                }
            )
        out["mounts"] += [
            {"destination": m["containerPath"], "source": m["hostPath"], "options": m["options"]}
            for m in edits.get("mounts") or ()
        ]
        for hook in edits.get("hooks") or ():
            entry = {k: hook[k] for k in ("path", "args") if hook.get(k)}
            out["hooks"].setdefault(hook["hookName"], []).append(entry)
        out["env"] += edits.get("env") or []
    return out


def test_a_device_the_engine_already_injected_is_not_injected_again(
    runc_bundle_factory: BundleFactory, container_id: str, sim_driver: Any, tmp_path: Path
) -> None:
    """CRI-O (and containerd with CDI on) resolve the plugin's cdi.k8s.io annotation
    themselves and still hand it on: nvct-runtime then finds the device's nodes, mounts and
    hook in the spec already, and adds none of them twice (a hook would run twice)."""
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    hook_log = tmp_path / "hook.log"
    hook = tmp_path / "nvidia-cdi-hook"
    hook.write_text(f'#!/bin/sh\necho "$@" >> {hook_log}\ncat > /dev/null\n')
    hook.chmod(0o755)
    text = nvidia_yaml(sim_driver) + (
        f"  hooks:\n  - hookName: createContainer\n    path: {hook}\n"
        "    args: [nvidia-cdi-hook, update-ldcache]\n"
    )
    (spec_dir / "nvidia.yaml").write_text(text)
    config = write_nvct_config(
        tmp_path / "nvct" / "config.toml", sim_driver, **{"cdi.spec-dirs": f'["{spec_dir}"]'}
    )
    applied = engine_applied(yaml.safe_load(text), "nvidia.com/gpu=1")
    script = f"{SCRIPT}; echo ===; cat /proc/self/mountinfo"
    bundle = runc_bundle_factory(["/bin/sh", "-c", script], [])
    oci = json.loads((bundle / "config.json").read_text())
    oci["process"]["env"] += applied["env"]
    oci["mounts"] += applied["mounts"]
    oci["hooks"] = applied["hooks"]
    oci["linux"]["devices"] = applied["devices"]
    oci["linux"]["resources"]["devices"] = [
        *oci["linux"]["resources"].get("devices", []),
        *(
            {"allow": True, "type": "c", "major": d["major"], "minor": d["minor"], "access": "rwm"}
            for d in applied["devices"]
        ),
    ]
    oci["annotations"] = {"cdi.k8s.io/nvct-device-plugin_gpu": "nvidia.com/gpu=1"}
    (bundle / "config.json").write_text(json.dumps(oci))
    result = run(bundle, container_id, config)
    assert result.returncode == 0, result.stderr
    smi, devs, env, mountinfo = result.stdout.split("===")
    assert smi_uuids(smi) == [sim_driver.spec.gpus[1].uuid]
    assert gpu_nodes(devs) == ["nvidia1"]
    assert hook_log.read_text().split() == ["update-ldcache"]  # ran once
    targets = [line.split()[4] for line in mountinfo.strip().splitlines()]
    assert targets.count("/usr/bin/nvidia-smi") == 1
    assert env.count("NVIDIA_VISIBLE_DEVICES=") == 1
    edited = json.loads((bundle / "config.json").read_text())
    paths = [d["path"] for d in edited["linux"]["devices"]]
    assert sorted(paths) == sorted(set(paths)) == ["/dev/nvidia1", "/dev/nvidiactl"]
    assert len(edited["hooks"]["createContainer"]) == 1
