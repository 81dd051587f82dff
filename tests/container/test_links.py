"""The driver's binaries as links into their library directory (nvct.container.links)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nvct.container.links import link_binaries
from nvct.container.rootfs import Rootfs

DIR = "/usr/lib/x86_64-linux-gnu/nvidia-driver"
OPTIONS = ["bind", "ro", "nosuid", "nodev", "private"]


def rows(*names: str) -> list[tuple[str, str, str, list[str]]]:
    return [(f"/usr/bin/{n}", f"{DIR}/{n}", f"/host/usr/bin/{n}", OPTIONS) for n in names]


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def rootfs(request: pytest.FixtureRequest, tmp_path: Path):
    root = tmp_path / "rootfs"
    (root / "usr").mkdir(parents=True)
    with Rootfs(str(root), openat2=request.param) as fs:
        yield fs


def test_links_are_made_where_the_image_has_nothing(rootfs: Rootfs) -> None:
    assert link_binaries(rootfs, rows("nvidia-smi", "nvidia-cuda-mps-control")) == []
    bin_dir = Path(rootfs.path) / "usr/bin"  # made, as a mount point's parent would be
    assert os.readlink(bin_dir / "nvidia-smi") == f"{DIR}/nvidia-smi"
    assert os.readlink(bin_dir / "nvidia-cuda-mps-control") == f"{DIR}/nvidia-cuda-mps-control"
    # the next start of the same container (a restart) finds its own links and keeps them
    assert link_binaries(rootfs, rows("nvidia-smi")) == []
    assert os.readlink(bin_dir / "nvidia-smi") == f"{DIR}/nvidia-smi"


def test_an_image_file_or_foreign_link_is_kept_and_the_binary_bound_over_it(
    rootfs: Rootfs,
) -> None:
    bin_dir = Path(rootfs.path) / "usr/bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho the image's own\n")
    os.symlink("/usr/local/nvidia/bin/nvidia-debugdump", bin_dir / "nvidia-debugdump")
    binds = link_binaries(rootfs, rows("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"))
    assert binds == [
        ("/host/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi", OPTIONS),
        ("/host/usr/bin/nvidia-debugdump", "/usr/bin/nvidia-debugdump", OPTIONS),
    ]
    assert (bin_dir / "nvidia-smi").read_text() == "#!/bin/sh\necho the image's own\n"
    assert os.readlink(bin_dir / "nvidia-debugdump") == "/usr/local/nvidia/bin/nvidia-debugdump"
    assert os.readlink(bin_dir / "nvidia-persistenced") == f"{DIR}/nvidia-persistenced"


@pytest.mark.parametrize("escape", ["/etc", "../../../../../../etc", "/../../etc"])
def test_a_hostile_bin_directory_link_stays_inside_the_rootfs(
    rootfs: Rootfs, tmp_path: Path, escape: str
) -> None:
    root = Path(rootfs.path)
    (root / "etc").mkdir()
    os.symlink(escape, root / "usr/bin")
    outside = tmp_path / "etc"  # where ../ from the rootfs would land on the host side
    outside.mkdir()
    assert link_binaries(rootfs, rows("nvidia-smi")) == []
    assert os.readlink(root / "etc/nvidia-smi") == f"{DIR}/nvidia-smi"
    assert not (outside / "nvidia-smi").exists() and not os.path.lexists("/etc/nvidia-smi")
