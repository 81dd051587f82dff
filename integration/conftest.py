"""Fixtures for the real-container tests (see integration/harness).

Session-wide: ``glibc_rootfs_dir`` (built once), ``dockerd_factory`` (private dockerds, all
stopped at session end), ``plain_dockerd`` (one with an empty daemon.json),
``import_glibc_image`` (puts the glibc rootfs into a given dockerd), ``glibc_image`` (its tag in
``plain_dockerd``), ``served_hook_path`` (the native prestart hook served by a private shim
daemon). Per test: ``runc_bundle_factory``, ``container_id``, ``hook_path`` (the hook's
executable for each of ``integration.harness.shimd.HOOK_PATHS``).

Each fixture skips its tests, saying what is missing, when not root or without docker/runc.

Fixtures only: what tests and harness modules share otherwise (``NVCT_BIN``,
``write_nvct_config``) is in integration/harness/nvct_config.py, and the device plugin's fixtures
(``plugin_factory``, ``kubelet``) are defined in integration/harness/deviceplugin.py and
imported here to register them, as is ``cri_node`` (integration/harness/crinode.py: a private
containerd driven over CRI, one per module).
"""

from __future__ import annotations

import itertools
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from integration.harness import HarnessError
from integration.harness.bundles import BundleFactory, make_bundle
from integration.harness.crinode import cri_node  # noqa: F401 - fixture
from integration.harness.deviceplugin import kubelet, plugin_factory  # noqa: F401 - fixtures
from integration.harness.dockerd import Dockerd, DockerdFactory
from integration.harness.images import GLIBC_TAG, ImageImporter, docker_import, glibc_rootfs
from integration.harness.nvct_config import NVCT_BIN, write_nvct_config
from integration.harness.podman import private_podman
from integration.harness.shimd import served_hook
from integration.harness.skips import (
    need_binary,
    need_busybox,
    need_cc,
    need_docker,
    need_root,
    require,
)
from nvct.runtime.launch.build import build_native, hook_command


@pytest.fixture(scope="session")
def glibc_rootfs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Busybox + host glibc, Debian-like, with an ld.so.cache. Treat it as read-only: copy it
    (``runc_bundle_factory`` does) before anything writes into it."""
    require(need_root(), need_busybox(), need_binary("ldconfig"))
    return glibc_rootfs(tmp_path_factory.mktemp("glibc") / "rootfs")


@pytest.fixture(scope="session")
def dockerd_factory() -> Iterator[DockerdFactory]:
    require(need_docker())
    started: list[Dockerd] = []

    def start(daemon_json: Mapping[str, Any] | None = None) -> Dockerd:
        dockerd = Dockerd(daemon_json)
        started.append(dockerd)
        return dockerd.start()

    yield start
    failures = []
    for dockerd in reversed(started):
        try:
            dockerd.stop()
        except (HarnessError, OSError) as exc:
            failures.append(f"{dockerd!r}: {exc}")
    if failures:
        raise HarnessError("could not stop every dockerd:\n" + "\n".join(failures))


@pytest.fixture(scope="session")
def plain_dockerd(dockerd_factory: DockerdFactory) -> Dockerd:
    """A dockerd with ``{}`` as daemon.json, shared by the session: leave it as you found it."""
    return dockerd_factory({})


@pytest.fixture(scope="session")
def import_glibc_image(glibc_rootfs_dir: Path) -> ImageImporter:
    def importer(dockerd: Dockerd, tag: str = GLIBC_TAG) -> str:
        if dockerd.docker("image", "inspect", tag, check=False).returncode != 0:
            docker_import(dockerd, glibc_rootfs_dir, tag)
        return tag

    return importer


@pytest.fixture(scope="session")
def glibc_image(plain_dockerd: Dockerd, import_glibc_image: ImageImporter) -> str:
    """Tag of the glibc rootfs image in ``plain_dockerd``."""
    return import_glibc_image(plain_dockerd)


@pytest.fixture(scope="session")
def native_hook_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The native prestart hook as installed but asking no daemon: a kind of container it has
    an entry for it does itself (nativehook.h), any other through the Python hook, which
    writes the entry for the next."""
    require(need_cc())
    hook = tmp_path_factory.mktemp("native-hook") / "nvidia-container-runtime-hook"
    build_native(hook, hook_command(), socket="", hook=True)
    return hook


@pytest.fixture(scope="session")
def served_native_hook_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The native prestart hook as installed, asking a private shim daemon: a kind of
    container it has an entry for it does itself, any other through a daemon's worker."""
    require(need_root(), need_cc())
    shimd, hook = served_hook(tmp_path_factory.mktemp("served-native-hook"), native=True)
    try:
        yield hook
    finally:
        shimd.stop()


@pytest.fixture(scope="session")
def served_hook_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The native prestart hook, asking a private shim daemon (stopped at session end)."""
    require(need_root(), need_cc())
    shimd, hook = served_hook(tmp_path_factory.mktemp("served-hook"))
    try:
        yield hook
    finally:
        shimd.stop()


@pytest.fixture(scope="session")
def python_hook_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The native prestart hook built to ask no daemon: it always runs the Python hook (the
    installed one may find a daemon of this very code on the default socket, such as the
    packages test's). Without a C compiler, the installed hook: the Python console script."""
    if need_cc() is not None:
        return NVCT_BIN / "nvidia-container-runtime-hook"
    hook = tmp_path_factory.mktemp("python-hook") / "nvidia-container-runtime-hook"
    build_native(hook, hook_command(), socket="", hook=True, native=False)
    return hook


@pytest.fixture
def hook_path(request: pytest.FixtureRequest) -> Callable[[str], Path]:
    """The prestart hook's executable for a path of ``HOOK_PATHS``: ``python``, the native hook
    that asks no daemon (it runs the Python hook), ``daemon``, the native hook served by a
    private shim daemon (started on first use); and ``native``, the native hook as installed
    with no daemon (a kind of container done before it does itself)."""

    def path(how: str) -> Path:
        name = {"daemon": "served_hook_path", "native": "native_hook_path"}.get(
            how, "python_hook_path"
        )
        hook: Path = request.getfixturevalue(name)
        return hook

    return path


@pytest.fixture
def runc_bundle_factory(tmp_path: Path, glibc_rootfs_dir: Path) -> BundleFactory:
    require(need_root(), need_binary("runc"))
    counter = itertools.count()

    def make(
        args: Sequence[str],
        env: Sequence[str] = (),
        *,
        extra: Mapping[str, Any] | None = None,
        rootfs: Path | None = None,
    ) -> Path:
        bundle = tmp_path / f"bundle-{next(counter)}"
        if rootfs is None:
            rootfs = bundle / "rootfs"
            shutil.copytree(glibc_rootfs_dir, rootfs, symlinks=True)
        return make_bundle(bundle, rootfs, args, env, extra=extra)

    return make


@pytest.fixture
def podman(tmp_path: Path, glibc_rootfs_dir: Path) -> Iterator[list[str]]:
    """podman with private storage and the glibc image (``integration.harness.podman``)."""
    require(need_root(), need_binary("podman"), need_binary("runc"))
    with private_podman(tmp_path, glibc_rootfs_dir) as base:
        yield base


@pytest.fixture
def container_id() -> str:
    """A container id no other test (or run) uses."""
    return f"nvct-test-{uuid.uuid4().hex[:12]}"


# --- nvct on the simulated driver ------------------------------------------------------------


@pytest.fixture(scope="session")
def sim_driver(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The 4 x H100 simulated driver (550.54.15), built once per session."""
    require(need_root(), need_binary("gcc"), need_binary("ldconfig"))
    from integration.simdriver import cached_driver, preset

    return cached_driver(preset("h100x4-550"), Path("/tmp/nvct-test-simdrivers"))


@pytest.fixture(scope="session")
def nvct_config(sim_driver: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_nvct_config(tmp_path_factory.mktemp("nvct") / "config.toml", sim_driver)


@pytest.fixture(scope="session")
def nvidia_dockerd(
    dockerd_factory: DockerdFactory, nvct_config: Path, import_glibc_image: ImageImporter
) -> Dockerd:
    """A dockerd whose runtime ``nvidia`` is nvct-runtime (pointed at the test config), with
    the glibc image imported."""
    dockerd = dockerd_factory(
        {
            "runtimes": {
                "nvidia": {
                    "path": str(NVCT_BIN / "nvct-runtime"),
                    "runtimeArgs": ["--nvct-config", str(nvct_config)],
                }
            }
        }
    )
    import_glibc_image(dockerd)
    return dockerd
