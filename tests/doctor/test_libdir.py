"""doctor's library-dir check: a root-only cache dir on the driver libraries' filesystem."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from nvct.config.container import Inject
from nvct.doctor import FAIL, PASS, WARN, CheckResult, libdir
from tests.conftest import sim_config
from tests.doctor.conftest import context


@pytest.mark.root
def test_library_dir_needs_a_root_only_cache_dir_on_the_libraries_filesystem(
    h100x4, tmp_path
) -> None:
    def check(**config: Any) -> CheckResult:
        return libdir.check_library_dir(context(tmp_path, sim_config(h100x4, tmp_path, **config)))

    ok = check()
    assert ok.status == PASS and "bound as one directory" in ok.message
    assert "/usr/bin/nvidia-smi a link there" in ok.message
    mounted = check(inject=Inject(binaries="mounts"))
    assert mounted.status == PASS and 'inject.binaries = "mounts"' in mounted.message
    assert check(inject=Inject(library_mounts="files")).status == PASS
    assert check(cache_dir="").status == WARN
    shared = tmp_path / "shared-cache"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    writable = check(cache_dir=str(shared))
    assert writable.status == FAIL and "writable by others than root" in writable.message
    assert writable.fix == f"chown root:root {shared} && chmod go-w {shared}"
    shm = Path("/dev/shm")
    if shm.is_dir() and shm.stat().st_dev != Path(h100x4.driver_root).stat().st_dev:
        other = shm / f"nvct-doctor-test-{os.getpid()}"
        other.mkdir(mode=0o755)
        try:
            elsewhere = check(cache_dir=str(other))
        finally:
            other.rmdir()
        assert elsewhere.status == WARN and "another filesystem" in elsewhere.message


@pytest.mark.root
def test_library_dir_names_copies_and_passes_with_them(h100x4, tmp_path) -> None:
    """A cache dir on another filesystem than the libraries: the fix names
    "directory-copies"; set, the check passes and says what the copies cost."""
    from integration.harness.tmpfs import mounted_tmpfs
    from nvct.store.libcopies import copies_dir, ensure_copies

    with mounted_tmpfs(tmp_path / "otherfs") as mount:
        cache = mount / "cache"

        def check(**config: Any) -> CheckResult:
            cfg = sim_config(h100x4, tmp_path, cache_dir=str(cache), **config)
            return libdir.check_library_dir(context(tmp_path, cfg))

        links = check()
        assert links.status == WARN and "another filesystem" in links.message
        assert 'inject.library-mounts = "directory-copies"' in (links.fix or "")
        copies = Inject(library_mounts="directory-copies")
        before = check(inject=copies)
        assert before.status == PASS and "of copies" in before.message
        assert "none made yet" in before.message
        lib = Path(h100x4.lib_dir)
        files = [
            [str(p), p.name] for p in sorted(lib.glob("libnvidia-ml.so.*")) if not p.is_symlink()
        ]
        assert files
        ensure_copies(copies_dir(str(cache), "fp", files, []), files, [])
        made = check(inject=copies)
        size = sum(Path(f).stat().st_size for f, _ in files) / 1e6
        assert made.status == PASS and f"{len(files)} copies, {size:.1f} MB" in made.message
