"""nvct from its wheel (``pip wheel .``) in a fresh venv: ``nvct-runtime`` is the native
launcher, a passthrough call starts no Python, and a GPU container started through it gets its
GPU from the venv's own shim."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from integration.harness.apiserver import (
    CONFIGS,
    LABEL,
    NODE,
    Pod,
    apiserver,  # noqa: F401 - fixture
    kube_certs,  # noqa: F401 - fixture
)
from integration.harness.bundles import BundleFactory, minimal_gpu_bundle, run_runc
from integration.harness.nvct_config import write_nvct_config
from integration.harness.packages import DAEMON_SOCKET
from integration.harness.skips import need_binary, need_cc, need_root, require
from integration.harness.wheel import PIP, ROOT, install_as_user, install_wheel, unused_uid
from nvct.cli.daemon_cmd import answers


def build_wheel(out: Path, env: dict[str, str] | None = None) -> tuple[Path, str]:
    """The wheel, and what the build printed (``-v``: pip shows a backend's output then)."""
    done = subprocess.run(
        [*PIP, "wheel", "-v", "--no-deps", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = out.glob("nvct-*.whl")
    return wheel, done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv on the system's python3 with nvct from its wheel (its libraries from this
    venv, as pip would have fetched them); its bin directory."""
    require(need_cc(), need_binary("/usr/bin/python3"))
    work = tmp_path_factory.mktemp("wheel")
    wheel, _ = build_wheel(work / "dist")
    return install_wheel(wheel, work / "venv")


def test_the_wheel_is_a_platform_wheel_whose_nvct_runtime_is_native(wheel_venv: Path) -> None:
    (wheel,) = wheel_venv.parent.parent.glob("dist/nvct-*.whl")
    assert wheel.name.endswith("-py3-none-linux_x86_64.whl") or "-py3-none-linux_" in wheel.name
    with zipfile.ZipFile(wheel) as z:
        entry_points = z.read("nvct-0.1.0.dist-info/entry_points.txt").decode()
        metadata = z.read("nvct-0.1.0.dist-info/METADATA").decode()
    # YAML CDI specs (NVIDIA's nvidia.yaml) are read by every install, not only the packages'.
    requires = [
        ln.split(":", 1)[1].strip()
        for ln in metadata.splitlines()
        if ln.startswith("Requires-Dist:")
    ]
    assert any(r.startswith("PyYAML") and "extra ==" not in r for r in requires), requires
    assert "nvct-cli=" in entry_points.replace(" ", "")
    # The runtime, docker --gpus's hook and the CDI hook are native programs, not console scripts.
    for name in ("nvct-runtime", "nvct-hook", "nvidia-container-runtime-hook", "nvct-cdi-hook"):
        assert f"\n{name}=" not in entry_points.replace(" ", ""), name
        assert (wheel_venv / name).read_bytes()[:4] == b"\x7fELF", name
        assert os.access(wheel_venv / name, os.X_OK)
    # Their Python fallbacks: the venv's interpreter, isolated and without site.
    assert b"from nvct.hook.__main__ import main" in (wheel_venv / "nvct-hook").read_bytes()
    assert b"from nvct.runtime.__main__ import main" in (wheel_venv / "nvct-runtime").read_bytes()
    assert b"from nvct.hook.cdi import main" in (wheel_venv / "nvct-cdi-hook").read_bytes()


def test_a_cached_create_without_a_daemon_runs_no_site(
    wheel_venv: Path, sim_driver: Any, tmp_path: Path
) -> None:
    """The wheel's launcher, no daemon answering, runs the venv's Python shim with ``-I -S``
    and the venv's site-packages on its path: a create of a kind seen before processes no
    ``.pth`` file (site and a venv's .pth files cost ~3 ms a start), where the same
    interpreter with site does."""
    if answers(str(DAEMON_SOCKET)):  # the wheel's launcher would hand it the create
        pytest.skip(f"a shim daemon answers on {DAEMON_SOCKET}: stop it to run this test")
    python = wheel_venv / "python3"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    marker = tmp_path / "site-ran"
    probe = Path(purelib) / "nvct-test-site-probe.pth"
    probe.write_text(f"import pathlib; pathlib.Path({str(marker)!r}).touch()\n")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "runc").write_text('#!/bin/sh\necho "RUNC $*"\n')
    (fake / "runc").chmod(0o755)
    low_level = {"runtime.low-level": f'["{fake / "runc"}"]'}
    config = write_nvct_config(tmp_path / "nvct" / "config.toml", sim_driver, **low_level)
    env = {"PATH": "/usr/bin:/bin", "NVCT_CONFIG": str(config)}
    try:
        for n in range(2):
            marker.unlink(missing_ok=True)
            bundle = minimal_gpu_bundle(tmp_path / f"b{n}")
            done = subprocess.run(
                [wheel_venv / "nvct-runtime", "create", "--bundle", bundle, "c"],
                capture_output=True, text=True, env=env, timeout=60, check=False,
            )  # fmt: skip
            assert done.stdout.strip() == f"RUNC create --bundle {bundle} c", done.stderr
            if n == 0:  # the probe works: site runs it
                marker.unlink(missing_ok=True)
                subprocess.run([python, "-I", "-c", "pass"], check=True)
                assert marker.exists()
            else:
                assert not marker.exists()
    finally:
        probe.unlink()
    events = [json.loads(line) for line in (config.parent / "nvct.log").read_text().splitlines()]
    prepared = [e for e in events if e.get("event") == "container_prepared"]
    assert [(e["via"], e["cached"]) for e in prepared] == [("shim", False), ("shim", True)]


def test_a_passthrough_call_starts_no_python(wheel_venv: Path, tmp_path: Path) -> None:
    """Every program the call executes, traced: the launcher, then runc; nothing else."""
    require(need_binary("strace"))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "runc").write_text('#!/bin/sh\necho "RUNC $*"\n')
    (fake / "runc").chmod(0o755)
    trace = tmp_path / "trace"
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    strace = ["strace", "-f", "-qq", "-e", "trace=execve", "-o", str(trace)]
    done = subprocess.run(
        [*strace, str(wheel_venv / "nvct-runtime"), "--root", "/r", "state", "ctr"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == "RUNC --root /r state ctr", done.stderr
    executed = [line.split('"')[1] for line in trace.read_text().splitlines() if "execve(" in line]
    assert executed[0] == str(wheel_venv / "nvct-runtime")
    assert executed[1:] == [str(fake / "runc"), "/bin/sh"] or executed[1:] == [str(fake / "runc")]
    assert not [e for e in executed if "python" in e], executed


@pytest.mark.root
@pytest.mark.runc
def test_a_gpu_container_through_the_wheels_launcher_gets_its_gpu(
    wheel_venv: Path,
    runc_bundle_factory: BundleFactory,
    container_id: str,
    sim_driver: Any,
    tmp_path: Path,
) -> None:
    """No shim daemon answers (its socket is elsewhere): the launcher runs the Python shim
    with the venv's interpreter beside it, which prepares the bundle; runc then runs it."""
    config = write_nvct_config(tmp_path / "nvct" / "config.toml", sim_driver)
    bundle = runc_bundle_factory(["/bin/sh", "-c", "nvidia-smi -L"], ["NVIDIA_VISIBLE_DEVICES=1"])
    result = run_runc(
        bundle,
        container_id,
        runtime=wheel_venv / "nvct-runtime",
        env={**os.environ, "NVCT_CONFIG": str(config), "PATH": os.environ["PATH"]},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("UUID: GPU-") == 1
    assert sim_driver.spec.gpus[1].uuid in result.stdout


def test_without_a_compiler_the_wheel_stays_pure_and_says_why(tmp_path: Path) -> None:
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc")}
    wheel, output = build_wheel(tmp_path / "dist", env)
    assert wheel.name.endswith("-py3-none-any.whl")
    assert "no C compiler" in output and "Python console script" in output
    with zipfile.ZipFile(wheel) as z:
        assert "nvct-runtime=" in z.read("nvct-0.1.0.dist-info/entry_points.txt").decode()
        assert not [n for n in z.namelist() if ".data/scripts/" in n]


def test_the_sdist_builds_the_same_platform_wheel(tmp_path: Path) -> None:
    """pip's path for an sdist: the backend and the launcher's source travel in it."""
    require(need_cc())
    made = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(tmp_path / "s")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    (sdist,) = (tmp_path / "s").glob("nvct-*.tar.gz")
    done = subprocess.run(
        [*PIP, "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(sdist)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("nvct-*.whl")
    assert "-py3-none-linux_" in wheel.name


def test_the_wheels_config_manager_run_by_an_ordinary_user_writes_the_labelled_entry(
    wheel_venv: Path,
    apiserver: Any,  # noqa: F811 - the fixture's name
) -> None:
    """pip's install path for nvct-config-manager: a new, ordinary user makes a venv and pip
    installs the wheel into it; the user's nvct-config-manager (its console script, its own
    lightkube and msgspec) reads its Node at the stand-in API server over HTTPS and writes the
    labelled entry, as the chart's init container does."""
    require(need_root())
    (wheel,) = wheel_venv.parent.parent.glob("dist/nvct-*.whl")
    uid = unused_uid()
    home = Path(tempfile.mkdtemp(prefix="nvct-wheel-user-"))  # tmp_path is root's alone
    try:
        home.chmod(0o755)
        binary = install_as_user(wheel, home / "user", uid)
        (home / "pod").mkdir()
        pod = Pod(home / "pod", apiserver, CONFIGS)
        for path in (home / "pod", *(home / "pod").rglob("*")):
            os.lchown(path, uid, uid)
        apiserver.put_node(NODE, {LABEL: "ts4"})
        manager = pod.manager(
            binary / "nvct-config-manager", user=uid, ONESHOT="true", SEND_SIGNAL="false"
        )
        assert manager.wait() == 0, manager.output()
        assert pod.dst.read_text() == CONFIGS["ts4"]
        assert pod.dst.stat().st_uid == uid  # written by the user's process
        assert '"config_updated"' in manager.output() and manager.errors() == []
        # the user's venv served every import: nothing came from this checkout
        code = "import lightkube, msgspec, nvct; print(lightkube.__file__, msgspec.__file__, nvct.__file__)"  # noqa: E501
        where = subprocess.run(
            [binary / "python3", "-c", code],
            user=uid, group=uid, extra_groups=[], cwd=home / "user",
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert all(w.startswith(str(binary.parent)) for w in where), where
    finally:
        shutil.rmtree(home, ignore_errors=True)
