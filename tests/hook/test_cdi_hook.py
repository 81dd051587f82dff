"""nvct-cdi-hook, the createContainer hook nvct's CDI specs name: its arguments, links made
inside the container's root only, and failing closed. Unprivileged: plain files."""

from __future__ import annotations

import json
import os
import sys

import pytest

from nvct.hook import cdi as cdi_hook


def test_hook_args() -> None:
    args = cdi_hook.parse_args(
        ["--symlink", "a.so.1::/usr/lib/a.so", "--ldconfig-dir", "/usr/lib", "--ldconfig", "/l"]
    )
    assert args.symlinks == [("a.so.1", "/usr/lib/a.so")]
    assert args.ldconfig_dirs == ["/usr/lib"] and args.ldconfig == "/l"
    for bad in (["--symlink", "x"], ["--symlink", "a::rel"], ["--bogus", "1"], ["--ldconfig"]):
        with pytest.raises(ValueError):
            cdi_hook.parse_args(bad)


def test_hook_creates_links_inside_the_root_only(tmp_path, monkeypatch, capsys) -> None:
    bundle = tmp_path / "bundle"
    root = bundle / "rootfs"
    (root / "usr/lib").mkdir(parents=True)
    (root / "usr/lib/evil").symlink_to("/")  # an image trying to escape
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    state = json.dumps({"ociVersion": "1.0.2", "id": "x", "pid": 1, "bundle": str(bundle)})
    monkeypatch.setattr(sys, "stdin", _Stdin(state.encode()))
    argv = ["--symlink", "libx.so.1::/usr/lib/libx.so", "--symlink", "t::/usr/lib/evil/tmp/nvct-x"]
    assert cdi_hook.main(argv) == 0, capsys.readouterr().err
    assert os.readlink(root / "usr/lib/libx.so") == "libx.so.1"
    assert os.readlink(root / "tmp/nvct-x") == "t"  # /usr/lib/evil -> / resolved in the root
    assert not os.path.lexists("/tmp/nvct-x")


def test_hook_fails_closed_on_a_bad_state(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "stdin", _Stdin(b'{"bundle": "relative"}'))
    assert cdi_hook.main(["--symlink", "a::/b"]) == 1
    assert "no absolute bundle path" in capsys.readouterr().err


class _Stdin:
    def __init__(self, data: bytes) -> None:
        import io

        self.buffer = io.BytesIO(data)
