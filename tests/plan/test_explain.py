"""nvct-cli explain: what would be injected and why, from env, bundles and docker inspect; on
the simulated drivers' recorded inventories (tests/inventories.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from nvct.base.errors import SpecError
from nvct.doctor.context import Completed
from nvct.host.arch import host_arch
from nvct.host.fingerprint import inventory_fingerprint
from nvct.plan.build import build_plan
from nvct.plan.explain import docker_inspect, explain, input_from_bundle, input_from_inspect
from nvct.plan.firmware_dir import with_firmware_dir
from nvct.plan.libdirs import with_library_dirs
from nvct.plan.model import RootfsLayout
from nvct.request.parse import request_from_spec
from tests.cli.test_cli import cli, roots
from tests.conftest import sim_config


def write_bundle(
    tmp: Path, env: list[str], *, privileged: bool = True, debian: bool | None = True
) -> Path:
    """A bundle whose rootfs is Debian-like (``debian``), lib64-like, or missing (None)."""
    bundle = tmp / "bundle"
    (bundle / "rootfs/etc").mkdir(parents=True)
    if debian:
        (bundle / "rootfs/etc/debian_version").write_text("12.5\n")
    if debian is None:
        (bundle / "rootfs/etc").rmdir()
        (bundle / "rootfs").rmdir()
    caps = ["CAP_CHOWN", "CAP_SYS_ADMIN"] if privileged else ["CAP_CHOWN"]
    spec = {
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "process": {"env": ["PATH=/bin", *env], "capabilities": {"bounding": caps}},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
    }
    (bundle / "config.json").write_text(json.dumps(spec))
    return bundle


def test_unknown_device_is_nonzero_with_the_devices_listed(recorded_h100x4, tmp_path) -> None:
    result = cli(
        *roots(recorded_h100x4, tmp_path), "explain", "-e", "NVIDIA_VISIBLE_DEVICES=9", check=False
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "unknown device '9' in NVIDIA_VISIBLE_DEVICES" in result.stderr
    assert all(g.uuid in result.stderr for g in recorded_h100x4.spec.gpus)
    assert "FAIL unknown device '9'" in result.stdout


def test_failing_require_cuda_shows_the_values_compared(recorded_h100x4, tmp_path) -> None:
    result = cli(
        *roots(recorded_h100x4, tmp_path),
        "explain",
        "-e",
        "NVIDIA_VISIBLE_DEVICES=1",
        "-e",
        "NVIDIA_REQUIRE_CUDA=cuda>=13.0",
        check=False,
    )
    assert result.returncode == 1
    line = next(x for x in result.stdout.splitlines() if "NVIDIA_REQUIRE_CUDA" in x)
    assert line.strip().startswith("FAIL") and "cuda>=13.0" in line and "cuda is 12.4" in line
    assert "on GPU 1" in line
    # Everything else is still shown: the plan does not stop at the failing requirement.
    assert "/dev/nvidia1" in result.stdout and "libcuda.so.550.54.15" in result.stdout


def test_passing_requirement_and_reasons(recorded_h100x4, tmp_path) -> None:
    result = cli(
        *roots(recorded_h100x4, tmp_path),
        "explain",
        "-e",
        "NVIDIA_VISIBLE_DEVICES=0,2",
        "-e",
        "NVIDIA_DRIVER_CAPABILITIES=utility",
        "-e",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.0 brand=tesla",
    )
    out = result.stdout
    assert "PASS NVIDIA_REQUIRE_CUDA='cuda>=12.0 brand=tesla' on GPU 0" in out
    assert "PASS NVIDIA_REQUIRE_CUDA='cuda>=12.0 brand=tesla' on GPU 2" in out
    assert re.search(r"^  /dev/nvidia2 +c 195:2 +GPU 2 \(2\)$", out, re.MULTILINE)
    assert "/dev/nvidia-uvm" not in out  # utility only: no unified memory
    assert "(capability utility)" in out and "libcuda" not in out
    assert out.rstrip().endswith("OK: the hook would start this container with the above")


def test_unprivileged_bundle_shows_the_policy_decision(recorded_h100x4, tmp_path) -> None:
    cfg = tmp_path / "strict.toml"
    cfg.write_text(
        f"cache-dir = '{tmp_path / 'cache'}'\n[request]\naccept-envvar-when-unprivileged = false\n"
    )
    bundle = write_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=all"], privileged=False)
    args = [*roots(recorded_h100x4, tmp_path)]
    args[args.index("--config") + 1] = str(cfg)
    result = cli(*args, "explain", "--bundle", str(bundle))
    assert "unprivileged" in result.stdout.splitlines()[0]
    assert (
        "NVIDIA_VISIBLE_DEVICES ignored: the container is unprivileged and "
        "accept-envvar-when-unprivileged is false" in result.stdout
    )
    assert "no GPU asked for" in result.stdout and "Device nodes" not in result.stdout
    # The same bundle, privileged: the env is honoured.
    privileged = write_bundle(tmp_path / "p", ["NVIDIA_VISIBLE_DEVICES=all"])
    result = cli(*args, "explain", "--bundle", str(privileged), "--json")
    data = json.loads(result.stdout)
    assert data["privileged"] is True and len(data["plan"]["selected"]) == 4


@pytest.mark.parametrize(
    ("debian", "lib_dir", "reason"),
    [
        (True, "/usr/lib/x86_64-linux-gnu", "/etc/debian_version exists in the rootfs"),
        (False, "/usr/lib64", "no /etc/debian_version in the rootfs"),
        (None, "/usr/lib/x86_64-linux-gnu", "not found: Debian layout assumed"),
    ],
)
def test_bundle_rootfs_layout_decides_the_lib_dir(
    recorded_h100x4, tmp_path, debian: bool | None, lib_dir: str, reason: str
) -> None:
    if host_arch().name != "x86_64":
        pytest.skip("lib dirs asserted for x86_64")
    bundle = write_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"], debian=debian)
    data = json.loads(
        cli(*roots(recorded_h100x4, tmp_path), "explain", "--bundle", str(bundle), "--json").stdout
    )
    assert data["layout"]["lib_dir"] == lib_dir and reason in data["layout"]["reason"]
    targets = [m["container_path"] for m in data["plan"]["libraries"]]
    assert targets and all(t.startswith(lib_dir + "/") for t in targets)
    # bound as one directory (inject.library-mounts = "directory", the default)
    assert data["plan"]["ldconfig_dirs"] == [f"{lib_dir}/nvidia-driver"]
    text = cli(*roots(recorded_h100x4, tmp_path), "explain", "--bundle", str(bundle)).stdout
    assert f"libraries go to {lib_dir}" in text


def test_json_parses_with_reasons(recorded_a100mig, tmp_path) -> None:
    mig = recorded_a100mig.spec.gpus[0].migs[1].uuid
    result = cli(
        *roots(recorded_a100mig, tmp_path),
        "explain",
        "--json",
        "-e",
        f"NVIDIA_VISIBLE_DEVICES={mig}",
    )
    data = json.loads(result.stdout)
    assert data["ok"] is True and data["error"] is None
    assert data["request"]["devices"] == [mig]
    reasons = {d["path"]: d["reason"] for d in data["plan"]["devices"]}
    assert reasons["/dev/nvidiactl"] == "driver control device"
    assert reasons["/dev/nvidia0"] == f"MIG 0:1 ({mig})"
    caps = [p for p in reasons if p.startswith("/dev/nvidia-caps/")]
    assert len(caps) == 2 and all(reasons[c] == f"MIG 0:1 access ({mig})" for c in caps)
    assert all(m["reason"] for m in data["plan"]["libraries"])


def test_json_error_document_for_unknown_device(recorded_h100x4, tmp_path) -> None:
    result = cli(
        *roots(recorded_h100x4, tmp_path),
        "explain",
        "--json",
        "-e",
        "NVIDIA_VISIBLE_DEVICES=GPU-nope",
        check=False,
    )
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["ok"] is False and "unknown device 'GPU-nope'" in data["error"]
    assert data["plan"] is None


def test_explain_plan_is_the_hooks_plan(recorded_h100x4, tmp_path) -> None:
    """What explain shows is what the hook builds: same request code, same plan code."""
    config = sim_config(recorded_h100x4, tmp_path)
    inventory = recorded_h100x4.inventory
    bundle = write_bundle(
        tmp_path, ["NVIDIA_VISIBLE_DEVICES=1,3", "NVIDIA_DRIVER_CAPABILITIES=all"], debian=False
    )
    spec = json.loads((bundle / "config.json").read_text())
    shown = explain(input_from_bundle(bundle, spec), config, lambda: inventory, host_arch())
    hook = build_plan(
        request_from_spec(spec, config),
        inventory,
        config,
        host_arch(),
        RootfsLayout(debian=False),
    )
    fingerprint = inventory_fingerprint(config.driver_root, config.dev_root, config.proc_root)
    hook = with_library_dirs(hook, config, fingerprint, create=True)  # as the hook does
    hook = with_firmware_dir(hook)
    assert hook.library_dirs and all(Path(d.host_dir).is_dir() for d in hook.library_dirs)
    assert shown.ok and shown.plan == hook


def test_usage_needs_exactly_one_source(tmp_path) -> None:
    result = cli("explain", check=False)
    assert result.returncode == 2 and "exactly one of" in result.stderr
    bad = cli("--driver-root", str(tmp_path), "explain", "-e", "NOEQUALS", check=False)
    assert bad.returncode == 1 and "--env 'NOEQUALS' is not KEY=VALUE" in bad.stderr


def inspect_doc(**host: Any) -> dict[str, Any]:
    return {
        "Id": "0123456789abcdef",
        "Name": "/train",
        "Config": {"Env": ["PATH=/bin", "NVIDIA_DRIVER_CAPABILITIES=compute"]},
        "HostConfig": {"Runtime": "nvidia", **host},
        "Mounts": [{"Source": "/srv/data", "Destination": "/data"}],
    }


def test_inspect_gpus_request_privilege_and_mounts() -> None:
    inp = input_from_inspect(
        inspect_doc(
            CapAdd=["SYS_ADMIN"],
            DeviceRequests=[{"Count": -1, "Capabilities": [["gpu", "utility"]]}],
        )
    )
    assert inp.privileged and inp.mounts == (("/srv/data", "/data"),)
    assert inp.env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert inp.env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"  # dockerd's entry comes later
    assert inp.source == "container train (runtime nvidia)"
    two = input_from_inspect(inspect_doc(DeviceRequests=[{"Count": 2, "Capabilities": [["gpu"]]}]))
    assert two.env["NVIDIA_VISIBLE_DEVICES"] == "0,1" and not two.privileged
    ids = input_from_inspect(
        inspect_doc(
            Privileged=True,
            DeviceRequests=[{"DeviceIDs": ["GPU-a", "3"], "Capabilities": [["gpu"]]}],
        )
    )
    assert ids.env["NVIDIA_VISIBLE_DEVICES"] == "GPU-a,3" and ids.privileged


def test_docker_inspect_errors_are_one_line() -> None:
    def missing(argv: Any) -> Completed:
        assert argv[:3] == ["docker", "-H", "unix:///x.sock"]
        return Completed(1, "", "Error: No such container: nope\n")

    with pytest.raises(SpecError, match="docker inspect nope failed: Error: No such container"):
        docker_inspect("nope", missing, "unix:///x.sock")
    with pytest.raises(SpecError, match="no container object"):
        docker_inspect("x", lambda argv: Completed(0, "[]", ""), None)
    doc = docker_inspect("x", lambda argv: Completed(0, json.dumps([inspect_doc()]), ""), None)
    assert doc["Name"] == "/train"


def test_ignored_inputs_and_switched_off_features_are_decisions(recorded_h100x4, tmp_path) -> None:
    cfg = tmp_path / "off.toml"
    cfg.write_text(f"cache-dir = '{tmp_path / 'cache'}'\n[inject]\npersistenced = false\n")
    result = cli(
        *roots(recorded_h100x4, tmp_path),
        "--config",
        str(cfg),
        "explain",
        "-e",
        "NVIDIA_VISIBLE_DEVICES=0",
        "-e",
        "NVIDIA_DRIVER_CAPABILITIES=utility",
        "-e",
        "NVIDIA_FABULOUS=1",
        "-e",
        "DOCKER_RESOURCE_GPU=GPU-0",
    )
    out = result.stdout
    decisions = out[out.index("Policy decisions:") :].splitlines()
    assert any(ln.startswith("  - NVIDIA_FABULOUS ignored") for ln in decisions)
    assert any(ln.startswith("  - DOCKER_RESOURCE_GPU ignored") for ln in decisions)
    left_out = out[out.index("Left out") :].splitlines()[1:]
    assert any(
        "persistenced IPC" in ln and "inject.persistenced is false" in ln for ln in left_out
    ), out
