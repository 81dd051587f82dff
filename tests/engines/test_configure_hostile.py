"""Hostile inputs to nvct-cli configure: one clear error line, every file left as it was."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvct.cli.main import main

RUNTIME = "/opt/nvct/bin/nvct-runtime"


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


@contextlib.contextmanager
def read_only_dir(path: Path) -> Iterator[None]:
    """A directory nobody may write: mode 0555, or a read-only tmpfs for root."""
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield
        path.chmod(0o755)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"nvct-ro", str(path).encode(), b"tmpfs", 1, None) != 0:  # MS_RDONLY
        pytest.skip(f"cannot mount a read-only tmpfs: {os.strerror(ctypes.get_errno())}")
    try:
        yield
    finally:
        libc.umount2(str(path).encode(), 2)


CASES = {
    "malformed daemon.json": ("docker", "daemon.json", '{"debug": true,,}', "is not valid JSON"),
    "daemon.json is a list": ("docker", "daemon.json", "[1, 2]", "is not a JSON object"),
    "duplicate key": ("docker", "daemon.json", '{"a": 1, "a": 2}', "has the key 'a' twice"),
    "runtimes not an object": ("docker", "daemon.json", '{"runtimes": []}', "'runtimes' is not"),
    "malformed config.toml": (
        "containerd",
        "config.toml",
        "version = 2\n[plugins\n",
        "not valid TOML",
    ),
    "duplicate table": ("containerd", "config.toml", "[a]\nx=1\n[a]\ny=2\n", "not valid TOML"),
    "config version 9": ("containerd", "config.toml", "version = 9\n", "unsupported containerd"),
    "malformed crio drop-in": ("crio", "99-nvct.toml", "[crio.runtime\n", "not valid TOML"),
    "not UTF-8": ("docker", "daemon.json", b'{"x": "\xff"}', "is not UTF-8"),
    # past the interpreter's recursion limit: a parse error, not a RecursionError
    "nested config.toml": (
        "containerd", "config.toml", "a = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"
    ),
    "nested daemon.json": ("docker", "daemon.json", '{"a": ' + "[" * 99999 + "]" * 99999 + "}",
                           "nested too deeply"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_unparsable_file_is_refused_untouched(tmp_path: Path, capsys, case: str) -> None:
    engine, name, content, message = CASES[case]
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    before = snapshot(tmp_path)
    for extra in ([], ["--dry-run"], ["--undo"]):
        rc = main(
            [
                "configure",
                "--runtime",
                engine,
                "--config",
                str(path),
                "--runtime-path",
                RUNTIME,
                *extra,
            ]
        )
        err = capsys.readouterr().err
        assert rc == 1
        assert message in err
        assert err.count("\n") == 1 and err.startswith("nvct-cli: error: ")
        assert snapshot(tmp_path) == before


@pytest.mark.parametrize("engine", ["docker", "containerd", "crio"])
def test_directory_where_the_file_should_be(tmp_path: Path, capsys, engine: str) -> None:
    path = tmp_path / "config"
    path.mkdir()
    (path / "inside").write_text("x")
    before = snapshot(tmp_path)
    assert (
        main(["configure", "--runtime", engine, "--config", str(path), "--runtime-path", RUNTIME])
        == 1
    )
    err = capsys.readouterr().err
    assert "is a directory, not a config file" in err and err.count("\n") == 1
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("engine", "name"),
    [("docker", "daemon.json"), ("containerd", "c.toml"), ("crio", "99-nvct.toml")],
)
def test_read_only_directory(tmp_path: Path, capsys, engine: str, name: str) -> None:
    directory = tmp_path / "ro"
    with read_only_dir(directory):
        before = snapshot(tmp_path)
        args = [
            "configure",
            "--runtime",
            engine,
            "--config",
            str(directory / name),
            "--runtime-path",
            RUNTIME,
        ]
        assert main(args) == 1
        err = capsys.readouterr().err
        assert f"cannot write {directory / name}" in err and err.count("\n") == 1
        assert "left as it was" in err
        assert snapshot(tmp_path) == before


def test_unknown_engine_is_a_usage_error(tmp_path: Path, capsys) -> None:
    assert main(["configure", "--runtime", "lxd", "--config", str(tmp_path / "x")]) == 2
    assert "'lxd' is not one of 'docker', 'containerd', 'crio', 'podman'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_relative_runtime_path_is_refused(tmp_path: Path, capsys) -> None:
    assert main(["configure", "--config", str(tmp_path / "d.json"), "--runtime-path", "bin/x"]) == 1
    assert "is not absolute" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_nvct_config_cannot_go_through_containerd(tmp_path: Path, capsys) -> None:
    args = [
        "configure",
        "--runtime",
        "containerd",
        "--config",
        str(tmp_path / "c.toml"),
        "--nvct-config",
        "/x",
    ]
    assert main(args) == 1
    assert "--nvct-config cannot be passed through containerd" in capsys.readouterr().err
