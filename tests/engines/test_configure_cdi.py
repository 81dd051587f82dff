"""nvct-cli configure --cdi: CDI on in docker (features.cdi) and containerd (enable_cdi), with
undo exact to the byte; engines too old for CDI refused by name (their version faked here; the
real ones are asked in integration/test_configure_cdi.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nvct import engines
from nvct.cli.main import main
from nvct.engines import EngineOptions, docker
from nvct.engines import containerd as ctd
from tests.engines.test_configure_containerd import DEBIAN_DEFAULT, SYSTEMD, V3

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

RUNTIME = "/opt/nvct/bin/nvct-runtime"


def opts(path: Path, **kw: object) -> EngineOptions:
    return EngineOptions(config_path=path, runtime_path=RUNTIME, cdi=True, **kw)  # type: ignore[arg-type]


@pytest.fixture
def new_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed engines new enough for CDI (docker 27.1, containerd 1.7.20)."""
    releases = {"dockerd": ((27, 1), "27.1.1"), "containerd": ((1, 7), "1.7.20")}
    monkeypatch.setattr(engines, "program_release", releases.get)
    monkeypatch.setattr(ctd, "dump_config", lambda text, directory: None)


def test_docker_gets_features_cdi_and_undo_restores_the_bytes(tmp_path: Path, capsys) -> None:
    path = tmp_path / "daemon.json"
    original = '{\n  "features": {\n    "buildkit": true\n  },\n  "log-level": "warn"\n}\n'
    path.write_text(original)
    new = docker.edit(original, opts(path, cdi_spec_dirs=("/etc/cdi",))).new
    assert new is not None
    assert json.loads(new) == {
        "features": {"buildkit": True, "cdi": True},
        "log-level": "warn",
        "runtimes": {"nvidia": {"path": RUNTIME, "args": []}},
        "cdi-spec-dirs": ["/etc/cdi"],
    }
    assert docker.edit(new, opts(path, undo=True)).new == original
    # without --cdi, undo leaves CDI on (daemon.json cannot say who turned it on)
    left = docker.edit(new, EngineOptions(config_path=path, undo=True)).new
    assert left is not None and json.loads(left)["features"]["cdi"] is True


def test_docker_cli_round_trip(tmp_path: Path, capsys, new_engines: None) -> None:
    path = tmp_path / "daemon.json"
    args = ["configure", "--config", str(path), "--runtime-path", RUNTIME, "--cdi"]
    assert main(args) == 0
    assert json.loads(path.read_text())["features"] == {"cdi": True}
    assert main([*args, "--undo"]) == 0
    assert not path.exists()  # nvct created it, nothing else was in it


def test_docker_too_old_for_cdi_is_refused_by_version(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(engines, "program_release", lambda name: ((20, 10), "20.10.24+dfsg1"))
    path = tmp_path / "daemon.json"
    path.write_text("{}\n")
    assert main(["configure", "--config", str(path), "--runtime-path", RUNTIME, "--cdi"]) == 1
    err = capsys.readouterr().err
    assert "docker 20.10.24+dfsg1 has no CDI support (features.cdi needs docker >= 25.0)" in err
    assert path.read_text() == "{}\n"


@pytest.mark.parametrize("text", [DEBIAN_DEFAULT, SYSTEMD, V3, "version = 2\n", ""])
@pytest.mark.parametrize("dirs", [(), ("/srv/cdi",)])
def test_containerd_enable_cdi_and_exact_undo(text: str, dirs: tuple[str, ...]) -> None:
    path = Path("/etc/containerd/config.toml")
    new = ctd.edit(text, opts(path, cdi_spec_dirs=dirs, containerd_version=2)).new
    assert new is not None
    data = tomllib.loads(new)
    cri = data["plugins"][ctd.CRI_PLUGIN[data["version"]][1]]
    assert cri["enable_cdi"] is True
    assert cri["cdi_spec_dirs"] == list(dirs or ("/etc/cdi", "/var/run/cdi"))
    added = iter(new.splitlines())
    assert all(line in added for line in text.splitlines())  # the user's lines, in order
    assert ctd.edit(new, opts(path, cdi_spec_dirs=dirs)).new == new  # again: no change
    undone = ctd.edit(new, EngineOptions(config_path=path, undo=True)).new
    assert undone == (text or None)


def test_containerd_keeps_the_users_cdi_lines_as_comments_and_restores_them() -> None:
    text = SYSTEMD.replace(
        '  sandbox_image = "registry.k8s.io/pause:3.9"   # pinned\n',
        '  sandbox_image = "registry.k8s.io/pause:3.9"   # pinned\n  enable_cdi = false  # off\n',
    )
    path = Path("/etc/containerd/config.toml")
    new = ctd.edit(text, opts(path)).new
    assert new is not None
    assert "# nvct: was: enable_cdi = false  # off" in new
    assert tomllib.loads(new)["plugins"]["io.containerd.grpc.v1.cri"]["enable_cdi"] is True
    assert ctd.edit(new, EngineOptions(config_path=path, undo=True)).new == text


def test_containerd_too_old_for_cdi_is_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(engines, "program_release", lambda name: ((1, 6), "1.6.20~ds1"))
    path = tmp_path / "config.toml"
    path.write_text(SYSTEMD)
    args = ["configure", "--runtime", "containerd", "--config", str(path), "--cdi"]
    assert main([*args, "--runtime-path", RUNTIME]) == 1
    err = capsys.readouterr().err
    assert "containerd 1.6.20~ds1 has no CDI support (enable_cdi needs containerd >= 1.7" in err
    assert path.read_text() == SYSTEMD


def test_cdi_spec_dir_needs_cdi_and_an_absolute_path(tmp_path: Path, capsys) -> None:
    base = ["configure", "--config", str(tmp_path / "d.json"), "--runtime-path", RUNTIME]
    assert main([*base, "--cdi-spec-dir", "/etc/cdi"]) == 1
    assert "--cdi-spec-dir applies with --cdi only" in capsys.readouterr().err
    assert main([*base, "--cdi", "--cdi-spec-dir", "cdi"]) == 1
    assert "--cdi-spec-dir 'cdi' is not absolute" in capsys.readouterr().err


def test_crio_and_podman_say_cdi_is_native(tmp_path: Path, capsys) -> None:
    path = tmp_path / "99-nvct.toml"
    args = ["configure", "--runtime", "crio", "--config", str(path), "--runtime-path", RUNTIME]
    assert main([*args, "--cdi", "--dry-run"]) == 0
    assert "crio reads CDI specs natively" in capsys.readouterr().out
