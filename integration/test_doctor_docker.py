"""doctor and explain against a real, private dockerd: config drift, restart needed, inspect."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from integration.harness.dockerd import Dockerd, DockerdFactory
from integration.harness.images import ImageImporter
from integration.harness.nvct_config import NVCT_BIN
from nvct.doctor.processes import START_TIME_SLACK
from tests.cli.test_cli import cli

pytestmark = [pytest.mark.docker, pytest.mark.root]


def docker_checks(dockerd: Dockerd, nvct_config: Path, tmp: Path) -> dict[str, dict[str, Any]]:
    (tmp / "cdi").mkdir(exist_ok=True)
    done = cli(
        "--config", str(nvct_config),
        "doctor", "--json",
        "--docker-pidfile", str(dockerd.pidfile),
        "--docker-host", dockerd.host,
        "--cdi-dir", str(tmp / "cdi"),
        check=False,
    )  # fmt: skip
    data = json.loads(done.stdout)
    return {c["name"]: c for c in data["checks"]}


def test_config_drift_and_restart_needed(
    dockerd_factory: DockerdFactory, nvct_config: Path, tmp_path: Path
) -> None:
    dockerd = dockerd_factory({"log-level": "warn"})
    checks = docker_checks(dockerd, nvct_config, tmp_path)
    config = checks["docker-config"]
    assert config["status"] == "FAIL"
    assert (
        f"{dockerd.config_file} registers no runtime whose path is nvct-runtime"
        in config["message"]
    )
    assert config["fix"].startswith(
        f"nvct-cli configure --runtime docker --config {dockerd.config_file}"
    )
    assert checks["docker-daemon"]["status"] == "FAIL"
    assert "docker: cgroup driver" in checks["cgroup"]["message"]

    # nvct written into daemon.json while dockerd runs: the daemon has not read it.
    nvct = {"log-level": "warn", "runtimes": {"nvidia": {"path": str(NVCT_BIN / "nvct-runtime")}}}
    time.sleep(START_TIME_SLACK + 1)  # start times are known to about a second
    dockerd.config_file.write_text(json.dumps(nvct))
    checks = docker_checks(dockerd, nvct_config, tmp_path)
    assert checks["docker-config"]["status"] == "PASS"
    daemon = checks["docker-daemon"]
    assert daemon["status"] == "FAIL" and "does not know nvct-runtime" in daemon["message"]
    assert daemon["fix"].startswith("restart dockerd")
    restart = checks["docker-restart"]
    assert restart["status"] == "FAIL" and restart["message"].startswith("restart needed:")
    assert f"after dockerd (pid {dockerd.pid}) started" in restart["message"]

    dockerd.restart(nvct)
    checks = docker_checks(dockerd, nvct_config, tmp_path)
    for name in ("docker-config", "docker-daemon", "docker-restart", "docker-snap"):
        assert checks[name]["status"] == "PASS", checks[name]
    assert "running dockerd knows runtime 'nvidia'" in checks["docker-daemon"]["message"]
    assert checks["docker-rootless"]["status"] == "PASS"


def test_explain_a_docker_container(
    nvidia_dockerd: Dockerd,
    import_glibc_image: ImageImporter,
    nvct_config: Path,
    sim_driver: Any,
) -> None:
    image = import_glibc_image(nvidia_dockerd)
    created = nvidia_dockerd.docker(
        "create", "--runtime", "nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=1",
        "-e", "NVIDIA_REQUIRE_CUDA=cuda>=12.0", "-v", "/tmp:/data", image, "true",
    ).stdout.strip()  # fmt: skip
    try:
        done = cli(
            "--config", str(nvct_config), "explain", "--json",
            "--container", created, "--docker-host", nvidia_dockerd.host,
        )  # fmt: skip
        data = json.loads(done.stdout)
        assert data["ok"] and data["privileged"] is False
        assert data["source"].endswith("(runtime nvidia)")
        assert [s["uuid"] for s in data["plan"]["selected"]] == [sim_driver.spec.gpus[1].uuid]
        assert data["plan"]["requirements"][0]["satisfied"] is True
        missing = cli(
            "--config", str(nvct_config), "explain", "--container", "nvct-no-such",
            "--docker-host", nvidia_dockerd.host, check=False,
        )  # fmt: skip
        assert missing.returncode == 1 and "docker inspect nvct-no-such failed" in missing.stderr
    finally:
        nvidia_dockerd.docker("rm", "-f", created, check=False)


def test_containerd_config_dump_sees_the_drop_in(tmp_path: Path) -> None:
    """The real ``containerd config dump`` (no daemon needed) is the judge of imports: an
    absolute import is merged; a relative one is not, by containerd 1.6, which resolves it
    against its working directory rather than the root config's."""
    from integration.harness.skips import need_binary, require
    from nvct.doctor import containerd, run_command
    from tests.doctor.conftest import by_name, containerd_files, context

    require(need_binary("containerd"))
    containerd_files(tmp_path / "abs", imported=True, relative=False)
    ctx = context(tmp_path / "abs", run=run_command, which=lambda name: "/usr/bin/" + name)
    dump = by_name(containerd.check_containerd(ctx), containerd.DUMP)
    assert dump.status == "PASS", dump
    assert "BinaryName = /usr/bin/nvct-runtime" in dump.message

    containerd_files(tmp_path / "rel", imported=True, relative=True)
    ctx = context(tmp_path / "rel", run=run_command, which=lambda name: "/usr/bin/" + name)
    results = containerd.check_containerd(ctx)
    version = run_command(["containerd", "--version"]).stdout
    if " 1.6." in version:
        assert by_name(results, containerd.CONFIG).status == "PASS"
        dump = by_name(results, containerd.DUMP)
        assert dump.status == "FAIL" and "is not imported by" in dump.message
