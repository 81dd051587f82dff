"""nvct-cli configure --cdi against the real engines.

docker reads ``features.cdi`` from 25.0 and containerd ``enable_cdi`` from 1.7. Where the
installed engine is older (Debian 12: docker.io 20.10, containerd 1.6.20), the evidence is that
it really has no CDI (``docker info`` of a dockerd started with ``features.cdi`` shows no CDI
spec dirs; ``config dump`` drops ``enable_cdi``) and that configure refuses, naming the version.
Where it is new enough, ``docker info`` / ``config dump`` show CDI on after configure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from integration.harness.dockerd import DockerdFactory
from integration.harness.skips import need_binary, require
from integration.test_configure_containerd import SYSTEMD, dump
from nvct import engines
from nvct.engines import program_release

RUNTIME = "/opt/nvct/bin/nvct-runtime"
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def nvct_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", "configure", "--runtime-path", RUNTIME, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def release(program: str) -> tuple[tuple[int, int], str]:
    require(need_binary(program))
    found = program_release(program)
    assert found is not None, f"{program} --version says no version"
    return found


@pytest.mark.docker
@pytest.mark.root
def test_docker_cdi_where_dockerd_has_it_else_refused_by_version(
    dockerd_factory: DockerdFactory,
) -> None:
    (version, text) = release("dockerd")
    dockerd = dockerd_factory({"log-level": "warn"})
    daemon_json = dockerd.config_file
    before = daemon_json.read_bytes()
    done = nvct_cli("--config", str(daemon_json), "--cdi")
    if version < (25, 0):
        assert done.returncode == 1
        assert f"docker {text} has no CDI support (features.cdi needs docker >= 25.0)" in (
            done.stderr
        )
        assert daemon_json.read_bytes() == before
        # and the refusal is right: this dockerd starts with features.cdi and has no CDI
        dockerd.restart({"log-level": "warn", "features": {"cdi": True}})
        assert not dockerd.info().get("CDISpecDirs")
        return
    assert done.returncode == 0, done.stderr
    dockerd.restart(json.loads(daemon_json.read_text()))
    assert dockerd.info()["CDISpecDirs"] == ["/etc/cdi", "/var/run/cdi"]
    undo = nvct_cli("--config", str(daemon_json), "--cdi", "--undo")
    assert undo.returncode == 0, undo.stderr
    assert daemon_json.read_bytes() == before


def test_containerd_cdi_where_it_has_it_else_refused_by_version(tmp_path: Path) -> None:
    (version, text) = release("containerd")
    path = tmp_path / "config.toml"
    path.write_text(SYSTEMD)
    args = ("--runtime", "containerd", "--config", str(path), "--cdi")
    done = nvct_cli(*args)
    if version < (1, 7):
        assert done.returncode == 1
        assert f"containerd {text} has no CDI support" in done.stderr
        assert path.read_text() == SYSTEMD
        return
    assert done.returncode == 0, done.stderr
    cri = tomllib.loads(dump(path))["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["enable_cdi"] is True
    assert cri["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert nvct_cli(*args, "--undo").returncode == 0
    assert path.read_text() == SYSTEMD


def test_the_containerd_cdi_edit_is_a_config_containerd_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever its version, the installed containerd accepts the file --cdi writes (keeping
    the user's settings), and undo gives the bytes back."""
    require(need_binary("containerd"))
    from nvct.engines import EngineOptions, configure

    path = tmp_path / "config.toml"
    path.write_text(SYSTEMD)
    with monkeypatch.context() as patched:  # as if new enough, to get the file written
        patched.setattr(engines, "program_release", lambda name: ((1, 7), "1.7.0"))
        configure("containerd", EngineOptions(config_path=path, runtime_path=RUNTIME, cdi=True))
    dumped = tomllib.loads(dump(path))["plugins"]["io.containerd.grpc.v1.cri"]
    assert dumped["sandbox_image"] == "example.com/pause:9"
    assert dumped["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == RUNTIME
    if release("containerd")[0] >= (1, 7):
        assert dumped["enable_cdi"] is True
    configure("containerd", EngineOptions(config_path=path, undo=True))
    assert path.read_text() == SYSTEMD
