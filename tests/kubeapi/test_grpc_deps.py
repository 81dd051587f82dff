"""nvct.kubeapi.grpc_deps: the one line said when grpc cannot be imported, naming the Python the
packaged grpcio is built for (its wheel's tag) and the fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nvct.kubeapi import grpc_deps

RUNNING = "{}.{}".format(*sys.version_info[:2])


def fake_grpc_dir(root: Path, tag: str) -> Path:
    """A directory like /usr/lib/nvct/grpc holding a grpcio wheel's dist-info."""
    info = root / "grpcio-1.85.3.dist-info"
    info.mkdir(parents=True)
    (info / "WHEEL").write_text(
        f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}-manylinux_2_17_x86_64\n"
    )
    return root


@pytest.fixture
def only(monkeypatch: pytest.MonkeyPatch) -> object:
    def use(*paths: Path) -> None:
        monkeypatch.setattr(sys, "path", [str(p) for p in paths])

    return use


def test_built_for_reads_the_wheel_tag(tmp_path: Path, only) -> None:
    grpc_dir = fake_grpc_dir(tmp_path / "grpc", "cp311-cp311")
    only(tmp_path / "empty", grpc_dir)
    assert grpc_deps.grpc_built_for() == (str(grpc_dir), "3.11")
    only(fake_grpc_dir(tmp_path / "py314", "cp314-cp314"))
    assert grpc_deps.grpc_built_for() == (str(tmp_path / "py314"), "3.14")
    only(tmp_path / "nothing")
    assert grpc_deps.grpc_built_for() is None


def test_another_pythons_grpc_names_both_versions_and_the_fix(tmp_path: Path, only) -> None:
    other = "3.9" if RUNNING != "3.9" else "3.8"
    grpc_dir = fake_grpc_dir(tmp_path / "grpc", "cp" + other.replace(".", "") + "-x")
    only(grpc_dir)
    line = grpc_deps.grpc_unimportable(ImportError("cannot import name 'cygrpc'"))
    assert "\n" not in line
    assert f"the grpc in {grpc_dir} is built for Python {other}" in line
    assert f"this is Python {RUNNING} ({sys.executable})" in line
    assert f"reinstall the nvct package built for Python {RUNNING}" in line
    assert "container image" in line


def test_no_grpc_at_all_says_what_to_install(tmp_path: Path, only) -> None:
    only(tmp_path)
    line = grpc_deps.grpc_unimportable(ModuleNotFoundError("No module named 'grpc'", name="grpc"))
    assert line.startswith(f"grpc is not installed for {sys.executable}")
    assert "install grpcio and protobuf" in line


def test_require_grpc_exits_with_one_line(
    tmp_path: Path, only, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    only(fake_grpc_dir(tmp_path / "grpc", "cp39-cp39" if RUNNING != "3.9" else "cp38-cp38"))
    monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc raises ImportError
    with pytest.raises(SystemExit) as exited:
        grpc_deps.require_grpc("nvct-device-plugin")
    assert exited.value.code == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("nvct-device-plugin: error: the grpc in ")
    assert f"this is Python {RUNNING}" in line


def test_require_grpc_passes_where_grpc_imports() -> None:
    grpc_deps.require_grpc("nvct-device-plugin")  # the dev venv has grpcio and protobuf
