"""CDI from the installed .deb: the spec the *installed* nvct-cli generates runs in podman.

The spec's createContainer hook is /usr/bin/nvct-cdi-hook, the packages' launcher that imports
nvct from the private tree (/usr/share/nvct/lib), so the container starts, gets exactly the GPU
it names, and the hook's library links are there. The packaged nvct-cli reads YAML specs with
the PyYAML vendored into the private tree (its launchers run ``python3 -IS``: no system
site-packages, so a distribution's python3-yaml would not be seen). Purged afterwards.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.harness.packages import (
    PRIVATE,
    Installed,
    Packages,
    build_packages,
    deb_install_lock,
    install_debs,
    need_build_tools,
    need_no_installed_nvct,
    unit_settings,
)
from integration.harness.podman import CDI_DIR, podman_run
from integration.harness.skips import need_binary, need_root, require
from integration.test_cdi_podman import assert_only_gpu_1, generated_spec

pytestmark = [pytest.mark.slow, pytest.mark.podman, pytest.mark.root]
CLI = "/usr/bin/nvct-cli"
OUTPUT = "/var/run/cdi/nvidia.yaml"  # where the refresh service writes (NVIDIA's path too)


@pytest.fixture(scope="module")
def installed_deb() -> Iterator[Installed]:
    require(need_build_tools(), need_root(), need_binary("dpkg"))
    packages: Packages = build_packages()
    with deb_install_lock():  # the other packaging tests and the bench install them too
        require(need_no_installed_nvct())
        with install_debs(packages) as installed:
            yield installed


@pytest.fixture
def packaged_spec(installed_deb: Installed, sim_driver: Any, nvct_config: Path) -> Iterator[Path]:
    """A YAML spec for the simulated driver, written by the installed nvct-cli."""
    with generated_spec([CLI], sim_driver, nvct_config, ".yaml") as path:
        yield path


def test_the_installed_spec_names_the_installed_hook_and_lists_from_yaml(
    packaged_spec: Path,
) -> None:
    text = packaged_spec.read_text()
    assert text.startswith("---\n")
    assert '"path": "/usr/bin/nvct-cdi-hook"' in text
    listed = subprocess.run(
        [CLI, "cdi", "list", "--spec-dir", str(CDI_DIR), "--json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "PyYAML" not in listed.stderr
    names = {
        d["name"] for d in json.loads(listed.stdout)["devices"] if d["spec"] == str(packaged_spec)
    }
    assert {"nvidia.com/gpu=1", "nvidia.com/gpu=all"} <= names
    found = subprocess.run(
        ["/usr/bin/python3", "-IS", "-c",
         f"import sys; sys.path.insert(0, '/{PRIVATE}'); import yaml; print(yaml.__file__)"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.strip()  # fmt: skip
    assert found == f"/{PRIVATE}/yaml/__init__.py"


def test_podman_device_1_from_the_installed_spec_sees_exactly_gpu_1(
    podman: list[str], packaged_spec: Path, sim_driver: Any
) -> None:
    script = (
        "nvidia-smi -L; echo ===; ls /dev; echo ===; "
        "readlink /usr/lib/x86_64-linux-gnu/libcuda.so.1; grep -a -c libcuda.so.1 /etc/ld.so.cache"
    )
    result = podman_run(podman, ["nvidia.com/gpu=1"], script)
    assert result.returncode == 0, result.stderr
    smi, devs, hooked = result.stdout.split("===")
    assert_only_gpu_1(smi, devs, sim_driver)
    link, cached = hooked.split()
    assert link == f"libcuda.so.{sim_driver.spec.driver_version}"  # made by nvct-cdi-hook
    assert int(cached) >= 1  # and its ldconfig run


def doctor_cdi(env: dict[str, str], spec: Path) -> dict[str, Any]:
    """The installed doctor's cdi-spec result for ``spec``."""
    done = subprocess.run(
        [CLI, "doctor", "--json", "--cdi-dir", str(spec.parent)],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    results = [
        r
        for r in json.loads(done.stdout)["checks"]
        if r["name"] == "cdi-spec" and str(spec) in r["message"]
    ]
    assert len(results) == 1, done.stdout[-3000:]
    found: dict[str, Any] = results[0]
    return found


def test_the_refresh_units_regenerate_the_spec_doctor_calls_stale(
    installed_deb: Installed, nvct_config: Path, tmp_path: Path
) -> None:
    unitdir = Path("/lib/systemd/system")
    path_unit = unitdir / "nvct-cdi-refresh.path"
    service = unitdir / "nvct-cdi-refresh.service"
    path_settings = unit_settings(path_unit.read_text())
    assert path_settings["Path.PathChanged"] == ["/lib/modules/%v/modules.dep", CLI]
    assert path_settings["Path.Unit"] == ["nvct-cdi-refresh.service"]
    if shutil.which("systemd-analyze"):
        verified = subprocess.run(
            ["systemd-analyze", "verify", "--man=no", str(path_unit), str(service)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert verified.returncode == 0, verified.stderr
    (command,) = unit_settings(service.read_text())["Service.ExecStart"]
    argv = command.split()
    assert argv[:3] == [CLI, "cdi", "generate"]
    assert argv[argv.index("--output") + 1] == OUTPUT
    assert argv[argv.index("--library-mounts") + 1] == "directory"
    # the service's command, writing into directories of the test's instead of /var/run/cdi
    # and /var/lib/nvct/cdi
    spec = tmp_path / "cdi" / "nvidia.yaml"
    spec.parent.mkdir()
    libs = tmp_path / "libs"
    env = {"PATH": "/usr/bin:/bin", "NVCT_CONFIG": str(nvct_config)}
    refresh = [str(spec) if a == OUTPUT else a for a in argv] + ["--library-dir", str(libs)]
    subprocess.run(refresh, capture_output=True, timeout=120, check=True, env=env)
    assert f'"hostPath": "{libs}/libdirs/' in spec.read_text()  # the libraries as one directory
    assert doctor_cdi(env, spec)["status"] == "PASS"
    # the driver "changed": the spec on disk no longer matches (a device node moved)
    text = spec.read_text()
    spec.write_text(text.replace('"minor": 1\n', '"minor": 7\n', 1))
    stale = doctor_cdi(env, spec)
    assert stale["status"] == "FAIL"
    assert f"{spec} is stale: the edits of device(s) 1 changed" in stale["message"]
    assert stale["fix"] == (
        f"nvct-cli cdi generate --output {spec} --library-mounts directory --library-dir {libs}"
    )
    subprocess.run(refresh, capture_output=True, timeout=120, check=True, env=env)
    assert spec.read_text() == text
    assert doctor_cdi(env, spec)["status"] == "PASS"
