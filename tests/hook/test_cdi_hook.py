"""nvct-cdi-hook, the createContainer hook nvct's CDI specs name: its arguments, links made
inside the container's root only, and failing closed. Unprivileged: plain files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from nvct.base.ldcache_format import ENDIAN_FLAGS, read_entries, write_cache
from nvct.base.oci import CDI_LD_CACHE_ENV
from nvct.hook import cdi as cdi_hook


def test_hook_args() -> None:
    args = cdi_hook.parse_args(
        ["--symlink", "a.so.1::/usr/lib/a.so", "--ldconfig-dir", "/usr/lib", "--ldconfig", "/l"]
    )
    assert args.symlinks == [("a.so.1", "/usr/lib/a.so")]
    assert args.ldconfig_dirs == ["/usr/lib"] and args.ldconfig == "/l"
    assert cdi_hook.parse_args(["--ld-conf", "/usr/lib/d", "--ld-conf", "/l/d"]).ld_conf == [
        "/usr/lib/d",
        "/l/d",
    ]
    bad_args = (["--symlink", "x"], ["--symlink", "a::rel"], ["--bogus", "1"], ["--ldconfig"])
    for bad in (*bad_args, ["--ld-conf", "rel"], ["--ld-conf", "/a\n/b"]):
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


def _bundle_with_cache(tmp_path, monkeypatch) -> tuple[Path, list[str]]:
    """A bundle whose image has an ld.so.cache listing libc, its state on stdin, and hook
    arguments naming an ldconfig that does not exist: a run of it fails."""
    bundle = tmp_path / "bundle"
    root = bundle / "rootfs"
    (root / "etc").mkdir(parents=True)
    libc = (0x303, b"libc.so.6", b"/lib/x86_64-linux-gnu/libc.so.6", 0, 0)
    (root / "etc/ld.so.cache").write_bytes(write_cache(ENDIAN_FLAGS, [libc]))
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    state = json.dumps({"ociVersion": "1.0.2", "id": "x", "pid": 1, "bundle": str(bundle)})
    monkeypatch.setattr(sys, "stdin", _Stdin(state.encode()))
    lib = "/usr/lib/x86_64-linux-gnu"
    argv = ["--ldconfig", str(tmp_path / "no-ldconfig"), "--ldconfig-dir", lib]
    return root, argv


def test_the_specs_entries_are_merged_into_the_images_cache(tmp_path, monkeypatch, capsys) -> None:
    root, argv = _bundle_with_cache(tmp_path, monkeypatch)
    cuda = ["libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x303]
    monkeypatch.setenv(CDI_LD_CACHE_ENV, json.dumps([cuda]))
    assert cdi_hook.main(argv) == 0, capsys.readouterr().err  # no ldconfig was run
    _, entries = read_entries((root / "etc/ld.so.cache").read_bytes())
    assert [(e[1], e[2]) for e in entries] == [
        (b"libcuda.so.1", b"/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
        (b"libc.so.6", b"/lib/x86_64-linux-gnu/libc.so.6"),
    ]


def test_a_library_directory_is_listed_in_ld_so_conf_d(tmp_path, monkeypatch, capsys) -> None:
    """So that an ldconfig the container runs later (a package install) keeps the driver;
    only in an image whose ldconfig reads that directory."""
    root, argv = _bundle_with_cache(tmp_path, monkeypatch)
    cuda = ["libcuda.so.1", "/usr/lib/x86_64-linux-gnu/nvidia-driver/libcuda.so.1", 0x303]
    monkeypatch.setenv(CDI_LD_CACHE_ENV, json.dumps([cuda]))
    conf = ["--ld-conf", "/usr/lib/x86_64-linux-gnu/nvidia-driver"]
    image_cache = (root / "etc/ld.so.cache").read_bytes()
    assert cdi_hook.main([*argv, *conf]) == 0, capsys.readouterr().err
    assert not (root / "etc/ld.so.conf.d").exists()  # no such directory: none is made
    (root / "etc/ld.so.conf.d").mkdir()
    (root / "etc/ld.so.cache").write_bytes(image_cache)
    sys.stdin.buffer.seek(0)  # the same state again
    assert cdi_hook.main([*argv, *conf]) == 0, capsys.readouterr().err
    listed = (root / "etc/ld.so.conf.d/000-nvidia-driver.conf").read_text().splitlines()
    assert listed[1:] == ["/usr/lib/x86_64-linux-gnu/nvidia-driver"]


@pytest.mark.parametrize("entries", [None, "", "not json", '[["libcuda.so.1", 771]]', "{}"])
def test_without_readable_entries_ldconfig_runs(tmp_path, monkeypatch, capsys, entries) -> None:
    # A spec written before the entries were, or entries it cannot read: ldconfig decides
    # (here one that does not exist, so the run fails and says so).
    root, argv = _bundle_with_cache(tmp_path, monkeypatch)
    if entries is None:
        monkeypatch.delenv(CDI_LD_CACHE_ENV, raising=False)
    else:
        monkeypatch.setenv(CDI_LD_CACHE_ENV, entries)
    before = (root / "etc/ld.so.cache").read_bytes()
    assert cdi_hook.main(argv) == 1
    assert "ldconfig" in capsys.readouterr().err
    assert (root / "etc/ld.so.cache").read_bytes() == before


class _Stdin:
    def __init__(self, data: bytes) -> None:
        import io

        self.buffer = io.BytesIO(data)
