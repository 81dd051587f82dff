"""The .deb and the .rpm: built by ``make -C packaging deb rpm``, linted, installed, used, removed.

- Both packages build (once per session, under packaging/build/), lintian reports no error
  and rpmlint no error or warning (packaging/rpm/nvct.rpmlintrc filters say why), and they
  carry the same payload. nvct is architecture-specific: ``/usr/bin/nvct-runtime`` is the
  native launcher (an ELF executable), and the code id compiled into it is the one the
  packaged private tree computes, so the packaged shim daemon (``nvct-runtime-daemon.service``,
  shipped and wired to the package scripts) accepts it.
- The .deb installs on this machine (``dpkg -i``; CI is a throwaway root VM): the installed
  ``nvct-cli info`` sees the simulated driver's GPUs even with a hostile PYTHONPATH, and a real
  docker container runs through the installed ``/usr/bin/nvct-runtime`` and ``nvct-hook``, and
  the installed daemon prepares a GPU container's create for the installed launcher.
  An admin's edit of the conffile survives a reinstall, and ``dpkg -r`` keeps it (policy);
  ``dpkg -P`` then leaves nothing of nvct's behind (conffile, cache and log included), and
  the developer's own nvct (this interpreter's) still works. The purge runs in a finalizer,
  so a failing test never leaves the package installed.
- The .rpm installs with ``rpm --root DIR -i --nodeps`` where DIR is an overlay of this
  machine's root (so its scriptlets run with a real /bin/sh and python3), in a private mount
  namespace: %post byte-compiles, ``nvct-cli`` runs in the chroot, ``rpm -e`` removes it all.

Tests that install skip, saying why, when nvct (or NVIDIA's toolkit, which it replaces) is
already installed here: they would remove or clash with it.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.apiserver.certs import ServingCerts
from integration.apiserver.server import NODES, APIServer
from integration.harness.apiserver import (
    CONFIGS,
    LABEL,
    NODE,
    Pod,
    SignalRecorder,
    kube_certs,  # noqa: F401 - fixture
)
from integration.harness.bundles import minimal_gpu_bundle
from integration.harness.deviceplugin import PluginProcess, numa_sysfs
from integration.harness.dockerd import DockerdFactory
from integration.harness.images import ImageImporter
from integration.harness.nvct_config import NVCT_BIN, write_nvct_config
from integration.harness.packages import (
    DAEMON_SOCKET,
    DEB_UNIT,
    EXPECTED,
    GRPC,
    HOOK_JSONS,
    HOT_PATH,
    MPS_UNIT,
    PACKAGING,
    PLUGIN_UNIT,
    PLUGIN_UNIT_SOURCE,
    PRIVATE,
    PYTHON_LAUNCHERS,
    REFRESH_PATH,
    REFRESH_SERVICE,
    ROOT,
    RPM_ROOT_SCRIPT,
    RPM_UNIT,
    UNIT,
    UNIT_SOURCE,
    VERSION,
    Installed,
    Packages,
    build_packages,
    compiled_code_ids,
    deb_install_lock,
    deb_member,
    deb_paths,
    dpkg_installed,
    extract_deb,
    extract_rpm,
    install_debs,
    is_elf_executable,
    need_build_tools,
    need_no_installed_nvct,
    payload,
    purge,
    rpm_paths,
    sections,
    sh,
    target_ext_suffix,
    tree_code_id,
    unit_settings,
)
from integration.harness.processes import until
from integration.harness.shimd import ShimDaemon
from integration.harness.skips import need_binary, need_docker, need_root, require
from integration.kubelet.standin import Kubelet, sockets
from nvct.cdi.names import PLUGIN_KIND
from nvct.cli.daemon_cmd import answers

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="session")
def packages() -> Packages:
    require(need_build_tools())
    return build_packages()


@pytest.fixture(scope="module")
def installed_deb(packages: Packages) -> Iterator[Installed]:
    require(need_root(), need_binary("dpkg"))
    # The bench's packages path installs them too: wait for it rather than skip.
    with deb_install_lock():
        require(need_no_installed_nvct())
        with install_debs(packages) as installed:
            yield installed


# --- the .deb -------------------------------------------------------------------------------


def test_deb_lintian_has_no_errors(packages: Packages) -> None:
    done = sh(
        "lintian", "--fail-on", "error", "--info", packages.deb, packages.deb_hook, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [line for line in done.stdout.splitlines() if line.startswith("E:")]


def test_deb_payload(packages: Packages) -> None:
    paths = deb_paths(packages.deb)
    assert paths >= EXPECTED, sorted(EXPECTED - paths)
    assert payload(deb_paths(packages.deb_hook)) == HOOK_JSONS
    assert HOOK_JSONS, "hooks/ holds no OCI hook JSON"
    # No byte code from the build host: postinst compiles for the installed Python.
    assert not [p for p in paths if p.endswith(".pyc") or "__pycache__" in p]
    assert not [p for p in paths if p.startswith(f"{PRIVATE}/bin/")]
    # The conffile is the project's config/config.toml, byte for byte.
    assert (
        deb_member(packages.deb, "etc/nvct/config.toml")
        == (ROOT / "config/config.toml").read_bytes()
    )
    for hook in HOOK_JSONS:
        name = Path(hook).name
        assert deb_member(packages.deb_hook, hook) == (ROOT / "hooks" / name).read_bytes()
    conffiles = sh("dpkg-deb", "-I", packages.deb, "conffiles").stdout
    assert conffiles.split() == ["/etc/nvct/config.toml"], conffiles
    for launcher in PYTHON_LAUNCHERS:
        first = deb_member(packages.deb, launcher).split(b"\n", 1)[0]
        assert first == b"#!/usr/bin/python3 -IS", (launcher, first)
    # nvct-runtime is the native launcher, built to start the packaged shim and to ask the
    # daemon on its default socket.
    runtime = deb_member(packages.deb, "usr/bin/nvct-runtime")
    assert is_elf_executable(runtime), runtime[:64]
    assert b"/usr/libexec/nvct/nvct-runtime\0" in runtime
    assert bytes(DAEMON_SOCKET) + b"\0" in runtime
    # nvct-hook too: the native hook, asking the same daemon, the Python hook in libexec after.
    hook = deb_member(packages.deb, "usr/bin/nvct-hook")
    assert is_elf_executable(hook), hook[:64]
    assert b"/usr/libexec/nvct/nvct-hook\0" in hook
    assert bytes(DAEMON_SOCKET) + b"\0" in hook
    # nvct-cdi-hook: the native CDI hook, the Python one in libexec for what it does not take.
    cdi_hook = deb_member(packages.deb, "usr/bin/nvct-cdi-hook")
    assert is_elf_executable(cdi_hook), cdi_hook[:64]
    assert b"/usr/libexec/nvct/nvct-cdi-hook\0" in cdi_hook
    assert DEB_UNIT in paths
    assert f"lib/systemd/system/{PLUGIN_UNIT}" in paths
    # Man pages exist and come from the CLI's help.
    cli_page = gzip.decompress(deb_member(packages.deb, "usr/share/man/man1/nvct-cli.1.gz"))
    assert b".SH OPTIONS" in cli_page and b"\\-\\-driver\\-root" in cli_page
    assert b"nvct\\-cli info" in cli_page
    plugin_page = gzip.decompress(
        deb_member(packages.deb, "usr/share/man/man1/nvct-device-plugin.1.gz")
    )
    assert rb"systemctl enable \-\-now nvct\-device\-plugin" in plugin_page


CONFIG_MANAGER = "usr/bin/nvct-config-manager"
PLUGINS = ("usr/bin/nvct-device-plugin", "usr/bin/nvct-dra-plugin")


def test_deb_carries_grpc_for_its_python_where_only_its_launchers_look(
    packages: Packages,
) -> None:
    """grpcio's compiled module is the one for the target's /usr/bin/python3 (its ABI suffix),
    with protobuf, typing_extensions and lightkube's msgspec beside it in GRPC;
    nvct-device-plugin, nvct-cli and nvct-config-manager append GRPC to sys.path after the
    private tree; nothing on the hot path names it."""
    paths = deb_paths(packages.deb)
    grpc = sorted(p.removeprefix(GRPC + "/") for p in paths if p.startswith(GRPC + "/"))
    assert f"grpc/_cython/cygrpc{target_ext_suffix()}" in grpc, grpc[:20]
    assert sorted(p for p in grpc if p.endswith(".so")) == [
        f"grpc/_cython/cygrpc{target_ext_suffix()}",
        f"msgspec/_core{target_ext_suffix()}",  # lightkube's, for nvct-config-manager
    ]
    infos = {p.split("/", 1)[0] for p in grpc if ".dist-info/" in p}
    assert infos == {
        "grpcio-1.85.3.dist-info",
        "msgspec-0.22.0.dist-info",
        "protobuf-7.36.2.dist-info",
        "typing_extensions-4.16.0.dist-info",
    }
    # protobuf's pure-Python wheel: no second compiled module (google/_upb)
    assert not [p for p in grpc if p.startswith("google/_upb")]
    assert not [p for p in paths if p.startswith(f"{PRIVATE}/grpc/")]
    for launcher in (*PLUGINS, "usr/bin/nvct-cli", CONFIG_MANAGER):
        text = deb_member(packages.deb, launcher).decode()
        assert f'sys.path.insert(0, "/{PRIVATE}")' in text, text
        assert text.index(f'sys.path.insert(0, "/{PRIVATE}")') < text.index(
            f'sys.path.append("/{GRPC}")'
        ), text
    for name in ("nvct-device-plugin", "nvct-dra-plugin"):
        plugin = deb_member(packages.deb, f"usr/bin/{name}").decode()
        assert f'require_grpc("{name}")' in plugin, plugin
    for hot in HOT_PATH:
        assert f"/{GRPC}".encode() not in deb_member(packages.deb, hot), hot


def test_deb_control_fields(packages: Packages) -> None:
    fields = sh(
        "dpkg-deb", "-f", packages.deb, "Architecture", "Depends", "Conflicts", "Replaces"
    ).stdout
    deb_arch = sh("dpkg", "--print-architecture").stdout.strip()
    assert f"Architecture: {deb_arch}" in fields
    assert "python3 (>= 3.10)" in fields
    assert "libc6" in fields  # ${shlibs:Depends}, for the native launcher
    assert "python3-" not in fields.replace("python3:any", "")  # nothing from the vendored tree
    for name in ("nvidia-container-toolkit", "nvidia-container-runtime-hook"):
        assert fields.count(name) == 2, fields  # Conflicts and Replaces
    hook = sh("dpkg-deb", "-f", packages.deb_hook, "Architecture", "Depends").stdout
    assert "Architecture: all" in hook and f"nvct (>= {VERSION})" in hook, hook
    scripts = sh("dpkg-deb", "-I", packages.deb, "postinst").stdout
    assert "nvct-cli configure" in scripts and "py3compile" in scripts
    assert "daemon.json" not in scripts
    # The daemon and the CDI refresh units are enabled and started on installation and
    # restarted on upgrade (so that the daemon runs the new code, and the spec is rewritten by
    # the new nvct); prerm stops them on removal. No other unit is touched.
    units = (REFRESH_PATH, REFRESH_SERVICE, UNIT)
    listed = " ".join(f"'{u}'" for u in units)
    assert f"deb-systemd-helper enable '{UNIT}'" in scripts
    assert f"deb-systemd-helper enable '{REFRESH_PATH}'" in scripts
    assert "_dh_action=restart" in scripts and f"deb-systemd-invoke $_dh_action {listed}" in scripts
    prerm = sh("dpkg-deb", "-I", packages.deb, "prerm").stdout
    assert f"deb-systemd-invoke stop {listed}" in prerm
    postrm = sh("dpkg-deb", "-I", packages.deb, "postrm").stdout
    assert "/var/cache/nvct" in postrm and "/var/log/nvct.log" in postrm
    assert f"deb-systemd-helper purge {listed}" in postrm
    # The device plugin's and mps-control's units: enabled again only where they were enabled
    # before (an upgrade), never started on installation; restarted on upgrade only if they
    # run; stopped on removal; their enablement state purged.
    for kube_unit in (PLUGIN_UNIT, MPS_UNIT):
        quoted = f"'{kube_unit}'"
        enabled_again = (
            f"if deb-systemd-helper --quiet was-enabled {quoted}; then\n"
            f"\t\t\t# Create new symlinks, if any.\n\t\t\tdeb-systemd-helper enable {quoted}"
        )
        assert enabled_again in scripts
        assert scripts.count(f"deb-systemd-helper enable {quoted}") == 1
        assert quoted in scripts.split("deb-systemd-invoke try-restart", 1)[1].split("\n")[0]
        assert not re.search(rf"deb-systemd-invoke (start|\$_dh_action)[^\n]*{kube_unit}", scripts)
        assert kube_unit in prerm.split("deb-systemd-invoke stop", 1)[1].split("\n")[0]
        assert re.search(rf"deb-systemd-helper purge [^\n]*{quoted}", postrm)
    for script in (scripts, prerm, postrm):
        lines = [ln for ln in script.splitlines() if "deb-systemd-" in ln]
        named = {u for ln in lines for u in re.findall(r"'([^'\n]+)'", ln)}
        assert named <= {*units, PLUGIN_UNIT, MPS_UNIT}, named


def test_daemon_unit(packages: Packages) -> None:
    """Both formats ship packaging/nvct-runtime-daemon.service, which runs the packaged daemon
    in the host's mount namespace and lets in-flight creates finish when it stops."""
    text = deb_member(packages.deb, DEB_UNIT)
    assert text == UNIT_SOURCE.read_bytes()
    unit = unit_settings(text.decode())
    assert unit["Service.ExecStart"] == ["/usr/libexec/nvct/nvct-runtime-daemon"]
    assert unit["Service.Type"] == ["simple"]
    assert unit["Service.KillMode"] == ["mixed"]
    assert unit["Service.Restart"] == ["on-failure"]
    assert unit["Install.WantedBy"] == ["multi-user.target"]
    assert unit["Unit.Documentation"] == ["man:nvct-runtime(1)"]
    assert set(unit["Unit.Before"][0].split()) == {
        "containerd.service",
        "docker.service",
        "crio.service",
    }
    # The daemon declines callers in another mount namespace, and /run/nvct is not the unit's.
    sandboxing = {"PrivateTmp", "PrivateMounts", "ProtectSystem", "ProtectHome", "RootDirectory"}
    assert not [k for k in unit if k.split(".", 1)[1] in sandboxing | {"RuntimeDirectory"}]
    # The page it names documents the daemon.
    page = gzip.decompress(deb_member(packages.deb, "usr/share/man/man1/nvct-runtime.1.gz"))
    assert rb"nvct\-runtime\-daemon.service" in page


@pytest.mark.parametrize("fmt", ["deb", "rpm"])
def test_device_plugin_unit(packages: Packages, fmt: str, tmp_path: Path) -> None:
    """Both formats ship packaging/nvct-device-plugin.service: it runs the packaged plugin,
    restarts it after a failure with a pause but not after a bad config (exit 2), orders itself
    after the kubelet without needing one, and its hardening leaves /dev, /var and /run alone."""
    if fmt == "deb":
        root = extract_deb(packages.deb, tmp_path / "root")
        unit_path = root / "lib/systemd/system" / PLUGIN_UNIT
    else:
        root = extract_rpm(packages.rpm, tmp_path / "root")
        unit_path = root / "usr/lib/systemd/system" / PLUGIN_UNIT
    assert unit_path.read_bytes() == PLUGIN_UNIT_SOURCE.read_bytes()
    unit = unit_settings(unit_path.read_text())
    (command,) = unit["Service.ExecStart"]
    assert command == "/usr/bin/nvct-device-plugin"
    program = root / command.lstrip("/")
    assert program.is_file() and os.access(program, os.X_OK)
    assert unit["Service.Restart"] == ["on-failure"]
    assert unit["Service.RestartSec"] == ["10s"]
    assert unit["Service.RestartPreventExitStatus"] == ["2"]
    assert unit["Install.WantedBy"] == ["multi-user.target"]
    assert unit["Unit.Documentation"] == ["man:nvct-device-plugin(1)"]
    assert "kubelet.service" in unit["Unit.After"][0].split()
    assert not [k for k in unit if k.split(".", 1)[1] in {"Wants", "Requires", "BindsTo"}]
    # NVML needs /dev/nvidia*; the plugin writes the device-plugins directory and /var/run/cdi.
    hiding = {"PrivateDevices", "DevicePolicy", "DeviceAllow", "ReadOnlyPaths", "InaccessiblePaths"}
    assert not [k for k in unit if k.split(".", 1)[1] in hiding]
    assert unit["Service.ProtectSystem"] == ["full"]  # /usr, /boot, /etc; not /var or /run
    assert unit["Service.NoNewPrivileges"] == ["yes"]
    assert (root / "usr/share/man/man1/nvct-device-plugin.1.gz").is_file()


@pytest.mark.parametrize("fmt", ["deb", "rpm"])
def test_mps_control_unit(packages: Packages, fmt: str, tmp_path: Path) -> None:
    """Both formats ship packaging/nvct-mps-control.service: the packaged nvct-cli's
    mps-control, a unit apart from the plugin's (restarting the plugin leaves the daemons)."""
    name = MPS_UNIT
    if fmt == "deb":
        root = extract_deb(packages.deb, tmp_path / "root")
        unit_path = root / "lib/systemd/system" / name
    else:
        root = extract_rpm(packages.rpm, tmp_path / "root")
        unit_path = root / "usr/lib/systemd/system" / name
    assert unit_path.read_bytes() == (PACKAGING / name).read_bytes()
    unit = unit_settings(unit_path.read_text())
    (command,) = unit["Service.ExecStart"]
    program, subcommand = command.split()
    assert (program, subcommand) == ("/usr/bin/nvct-cli", "mps-control")
    assert os.access(root / program.lstrip("/"), os.X_OK)
    assert unit["Unit.Before"] == [PLUGIN_UNIT]
    assert unit["Service.RestartPreventExitStatus"] == ["2"]
    assert not [k for k in unit if k.split(".", 1)[1] in {"PrivateDevices", "DevicePolicy"}]


@pytest.mark.parametrize("fmt", ["deb", "rpm"])
def test_launcher_carries_the_packaged_trees_code_id(
    packages: Packages, fmt: str, tmp_path: Path
) -> None:
    """The code id compiled into /usr/bin/nvct-runtime is the one the packaged private tree
    computes, which is what the packaged daemon checks: it accepts the packaged launcher."""
    if fmt == "deb":
        root = extract_deb(packages.deb, tmp_path / "root")
    else:
        root = extract_rpm(packages.rpm, tmp_path / "root")
    launcher = (root / "usr/bin/nvct-runtime").read_bytes()
    assert is_elf_executable(launcher)
    assert compiled_code_ids(launcher) == [tree_code_id(root / PRIVATE)]
    unit = root / (DEB_UNIT if fmt == "deb" else RPM_UNIT)
    assert unit.read_bytes() == UNIT_SOURCE.read_bytes()


# --- the .rpm -------------------------------------------------------------------------------


def test_rpmlint_is_clean(packages: Packages) -> None:
    require(need_binary("rpmlint"))
    done = sh(
        "rpmlint",
        "-c",
        PACKAGING / "rpm/rpmlint.toml",
        "-r",
        PACKAGING / "rpm/nvct.rpmlintrc",
        packages.rpm,
        packages.rpm_hook,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 errors, 0 warnings" in done.stdout, done.stdout


def test_rpm_payload_matches_deb(packages: Packages) -> None:
    rpm_files = rpm_paths(packages.rpm)
    deb_files = deb_paths(packages.deb)

    assert payload(rpm_files) == payload(deb_files)
    assert RPM_UNIT in rpm_files
    assert rpm_paths(packages.rpm_hook) == HOOK_JSONS
    arch = "%{ARCH}\n"
    assert sh("rpm", "-qp", "--qf", arch, packages.rpm).stdout.strip() == packages.rpm_arch
    assert sh("rpm", "-qp", "--qf", arch, packages.rpm_hook).stdout.strip() == "noarch"
    requires = sh("rpm", "-qp", "--requires", packages.rpm).stdout.split("\n")
    assert "/usr/bin/python3" in requires
    assert [r for r in requires if r.startswith("libc.so.6")]  # the native launcher's
    # systemd's scriptlets: preset on installation, disable and stop on erase, restart after
    # an upgrade (so that the daemon runs the new code).
    scripts = sh("rpm", "-qp", "--scripts", packages.rpm).stdout
    assert UNIT in scripts and "daemon.json" not in scripts
    assert re.search(r"(preset|install-system-units) [^\n]*" + re.escape(UNIT), scripts)
    # The device plugin: the presets decide on installation (EL and Fedora: disabled), stopped
    # and disabled on erase, restarted on upgrade if it runs; %post says how to enable it.
    assert re.search(r"(preset|install-system-units) [^\n]*" + re.escape(PLUGIN_UNIT), scripts)
    assert re.search(r"disable --now [^\n]*" + re.escape(PLUGIN_UNIT), scripts)
    assert f"systemctl enable --now {PLUGIN_UNIT}" in scripts
    # %post compiles the grpc directory too, %preun removes that byte code.
    assert scripts.count(f"/{GRPC}") >= 2
    assert re.search(r"(try-restart|mark-restart-system-units) [^\n]*" + re.escape(UNIT), scripts)
    assert sh("rpm", "-qp", "--conflicts", packages.rpm).stdout.split() == [
        "nvidia-container-runtime-hook",
        "nvidia-container-toolkit",
    ]
    config = sh("rpm", "-qp", "--configfiles", packages.rpm).stdout.split()
    assert config == ["/etc/nvct/config.toml"]
    provides = sh("rpm", "-qp", "--provides", packages.rpm).stdout
    assert "bundled(python3dist(click))" in provides
    for bundled in ("grpcio)) = 1.85.3", "protobuf)) = 7.36.2", "typing-extensions)) = 4.16.0"):
        assert f"bundled(python3dist({bundled}" in provides, provides
    assert "bundled(boringssl)" in provides and "bundled(c-ares)" in provides
    # grpcio's module is private: rpm offers no cygrpc...so() to other packages
    assert "cygrpc" not in provides
    grpc_so = f"/{GRPC}/grpc/_cython/cygrpc{target_ext_suffix()}"
    assert grpc_so.lstrip("/") in rpm_files


def test_rpm_installs_into_a_root_and_its_scripts_run(
    packages: Packages, tmp_path: Path, sim_driver: Any
) -> None:
    require(need_root(), need_binary("unshare"), need_binary("chroot"))
    if "overlay" not in Path("/proc/filesystems").read_text():
        pytest.skip("needs overlayfs (modprobe overlay) to give rpm --root a root with /bin/sh")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    done = sh(
        "unshare",
        "-m",
        "sh",
        "-c",
        RPM_ROOT_SCRIPT,
        "rpm-root",
        scratch,
        packages.rpm,
        packages.rpm_hook,
        check=False,
        timeout=300,
        env={**os.environ, "SIM_ROOT": str(sim_driver.driver_root)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = sections(done.stdout)
    assert out.get("end") == [], done.stdout + done.stderr
    # %post ran: a first installation points at the explicit configure step...
    assert any("nvct-cli configure --runtime docker" in line for line in out["install"])
    installed = {line.removeprefix("./") for line in out["upper"]}
    wanted = EXPECTED | HOOK_JSONS | {RPM_UNIT}
    assert installed >= wanted, sorted(wanted - installed)
    # ...and byte-compiled the private tree for the installed python3.
    assert any(p.startswith(f"{PRIVATE}/nvct/__pycache__/") for p in installed)
    assert f"nvct-{VERSION}-1.{packages.rpm_arch}" in out["query"]
    assert f"nvct-oci-hook-{VERSION}-1.noarch" in out["query"] and "verified" in out["query"]
    assert out["run"] == [f"nvct-cli, version {VERSION}"]
    # the rpm's nvct-device-plugin imports the rpm's grpc (its launcher checks that first)
    assert out["plugin"] == ["Usage: nvct-device-plugin [OPTIONS]"], done.stdout + done.stderr
    # the rpm's nvct-config-manager loads lightkube and the grpc directory's msgspec
    assert out["configmanager"] == ['"event": "api_retry"'], done.stdout + done.stderr
    assert any(p.startswith(f"{GRPC}/grpc/__pycache__/") for p in installed)
    # CDI from the rpm: its spec names the rpm's own hook, and its cdi list reads the YAML back
    cdi = out["cdi"]
    assert cdi[:2] == ['"path": "/usr/bin/nvct-cdi-hook"', "hook installed"], done.stdout
    assert {"nvidia.com/gpu=1", "nvidia.com/gpu=all"} <= set(cdi[2:]), done.stdout
    # rpm -e removed every file, %preun the byte code, %postun the cache.
    assert out["left"] == []


# --- installing the .deb on this machine ----------------------------------------------------


def test_installed_deb_is_complete(installed_deb: Installed) -> None:
    listed = set(sh("dpkg", "-L", "nvct").stdout.split())
    assert {"/" + p for p in EXPECTED} <= listed
    # postinst byte-compiled the private tree for this machine's python3.
    assert list(Path("/usr/share/nvct/lib/nvct/__pycache__").glob("*.pyc"))
    assert list(Path(f"/{GRPC}/grpc/__pycache__").glob("*.pyc"))  # and the grpc directory
    status = sh("dpkg", "--verify", "nvct", "nvct-oci-hook", check=False)
    assert status.returncode == 0, status.stdout + status.stderr
    # The installed unit is valid as systemd reads it, ExecStart included (its man page is in
    # EXPECTED; --man=no: man-db may be missing).
    if shutil.which("systemd-analyze") is not None:
        verify = sh("systemd-analyze", "verify", "--man=no", f"/{DEB_UNIT}", check=False)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert UNIT not in verify.stderr, verify.stderr


def test_installed_cli_info_on_the_simulated_driver(
    installed_deb: Installed, sim_driver: Any, tmp_path: Path
) -> None:
    # A hostile PYTHONPATH and working directory: -I -S must keep both out of the launcher.
    evil = tmp_path / "evil"
    evil.mkdir()
    for module in ("click.py", "nvct.py", "structlog.py", "sitecustomize.py"):
        (evil / module).write_text("raise SystemExit('imported from PYTHONPATH or cwd')\n")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(evil), "PYTHONHOME": ""}
    env["PYTHONSTARTUP"] = str(evil / "click.py")
    done = sh(
        "/usr/bin/nvct-cli",
        "--driver-root",
        sim_driver.driver_root,
        "--dev-root",
        sim_driver.dev_root,
        "--proc-root",
        sim_driver.proc_root,
        "info",
        cwd=evil,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    uuids = [gpu.uuid for gpu in sim_driver.spec.gpus]
    assert [line.split()[-1] for line in done.stdout.splitlines() if "UUID:" in line] == uuids


def test_installed_runtime_runs_a_docker_container(
    installed_deb: Installed,
    sim_driver: Any,
    dockerd_factory: DockerdFactory,
    import_glibc_image: ImageImporter,
    tmp_path: Path,
) -> None:
    require(need_docker())
    # Default hook command: the installed shim's own Python, isolated, told where the
    # private tree is (no hook-path needed).
    config = write_nvct_config(tmp_path / "nvct" / "config.toml", sim_driver)
    dockerd = dockerd_factory(
        {
            "runtimes": {
                "nvidia": {
                    "path": "/usr/bin/nvct-runtime",
                    "runtimeArgs": ["--nvct-config", str(config)],
                }
            }
        }
    )
    try:
        image = import_glibc_image(dockerd)
        result = dockerd.docker(
            "run", "--rm", "--network", "none", "--runtime", "nvidia",
            "-e", "NVIDIA_VISIBLE_DEVICES=1", image, "nvidia-smi", "-L",
            check=False, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        gpus = sim_driver.spec.gpus
        assert gpus[1].uuid in result.stdout
        assert not [g.uuid for g in gpus if g.uuid in result.stdout and g is not gpus[1]]
        events = [
            json.loads(line) for line in (config.parent / "nvct.log").read_text().splitlines()
        ]
        assert "container_prepared" in {e.get("event") for e in events}
    finally:
        dockerd.stop()


def test_installed_daemon_prepares_a_create_for_the_installed_launcher(
    installed_deb: Installed, sim_driver: Any, tmp_path: Path
) -> None:
    """The installed daemon accepts the installed launcher (the same code id): it prepares a
    GPU container's bundle, and the launcher execs the configured runtime. The packaged Python
    shim is not executable meanwhile, so a declined request (the launcher's fallback) fails."""
    unit_active = (
        shutil.which("systemctl") is not None
        and sh("systemctl", "is-active", "--quiet", UNIT, check=False).returncode == 0
    )
    running = answers(str(DAEMON_SOCKET))
    if running and not unit_active:
        pytest.skip(f"another shim daemon listens on {DAEMON_SOCKET}; stop it to run this test")
    # The packaged daemon started by systemd (postinst) serves as well as one started here.
    shimd = None
    if not running:
        daemon = ShimDaemon(
            ["/usr/libexec/nvct/nvct-runtime-daemon"], DAEMON_SOCKET, tmp_path / "shimd.log"
        )
        shimd = daemon.start()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    runc = bindir / "runc"
    runc.write_text('#!/bin/sh\necho "RUNC $*"\n')
    runc.chmod(0o755)
    config = write_nvct_config(
        tmp_path / "nvct" / "config.toml", sim_driver, **{"runtime.low-level": f'["{runc}"]'}
    )
    bundle = minimal_gpu_bundle(tmp_path / "bundle")
    shim = Path("/usr/libexec/nvct/nvct-runtime")
    shim.chmod(0o644)
    try:
        done = sh(
            "/usr/bin/nvct-runtime", "--nvct-config", config, "--root", "/r",
            "create", "--bundle", bundle, "ctr",
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, cwd=tmp_path, check=False,
        )  # fmt: skip
    finally:
        shim.chmod(0o755)
        if shimd is not None:
            shimd.stop()
    assert done.returncode == 0, "the daemon declined (the fallback shim cannot run): " + (
        done.stdout + done.stderr
    )
    assert done.stdout.strip() == f"RUNC --root /r create --bundle {bundle} ctr"
    prepared = json.loads((bundle / "config.json").read_text())
    devices = [d["path"] for d in prepared["linux"].get("devices", [])]
    assert "/dev/nvidia1" in devices and "/dev/nvidia0" not in devices, devices
    events = [json.loads(line) for line in (config.parent / "nvct.log").read_text().splitlines()]
    assert "container_prepared" in {e.get("event") for e in events}


GPU = "nvidia.com/gpu"


def test_installed_device_plugin_registers_and_answers_allocate(
    installed_deb: Installed, sim_driver: Any, tmp_path: Path
) -> None:
    """The installed /usr/bin/nvct-device-plugin, a real process on the simulated driver with
    the packaged grpc (its compiled module is mapped from GRPC), serves, registers with the
    kubelet stand-in, advertises NVML's GPUs and answers Allocate with the CDI device of the
    spec it wrote; SIGTERM removes its socket and it exits 0."""
    numa_sysfs(tmp_path, sim_driver)
    kubelet = Kubelet(tmp_path / "device-plugins").start()
    plugin = PluginProcess(
        tmp_path, sim_driver, kubelet.plugin_dir, program=("/usr/bin/nvct-device-plugin",)
    )
    try:
        plugin.start()
        registered = kubelet.wait(
            lambda: GPU in kubelet.plugins and kubelet.plugins[GPU].updates > 0, timeout=30
        )
        assert registered, plugin.output()
        ids = [gpu.uuid for gpu in sim_driver.spec.gpus]
        assert kubelet.devices(GPU) == dict.fromkeys(ids, "Healthy")
        response = kubelet.allocate(GPU, [ids[1]])
        assert [d.name for d in response.cdi_devices] == [f"{PLUGIN_KIND}={ids[1]}"]
        spec = (tmp_path / "cdi" / "nvct-device-plugin.json").read_text()
        assert ids[1] in spec
        assert plugin.proc is not None
        maps = Path(f"/proc/{plugin.proc.pid}/maps").read_text()
        assert f"/{GRPC}/grpc/_cython/cygrpc{target_ext_suffix()}" in maps
        # the installed nvct-cli asks it over gRPC too (its launcher appends GRPC)
        doctor = sh(
            "/usr/bin/nvct-cli", "doctor", "--json", "--kubernetes",
            "--plugin-dir", kubelet.plugin_dir,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "NVCT_CONFIG": str(plugin.config)},
            check=False, timeout=300,
        )  # fmt: skip
        checks = json.loads(doctor.stdout)["checks"]
        serving = [c for c in checks if c["name"] == "device-plugin"]
        assert [c["status"] for c in serving] == ["PASS"], serving
        assert (
            "nvidia-gpu.sock (nvidia.com/gpu) answers GetDevicePluginOptions"
            in (serving[0]["message"])
        )
    finally:
        code = plugin.stop()
        kubelet.stop()
    assert code == 0, plugin.output()
    assert "nvidia-gpu.sock" not in sockets(kubelet.plugin_dir)


def test_installed_device_plugin_unit_is_valid_and_not_enabled(installed_deb: Installed) -> None:
    unit = Path("/lib/systemd/system") / PLUGIN_UNIT
    assert unit.read_bytes() == PLUGIN_UNIT_SOURCE.read_bytes()
    # postinst enabled the daemon's unit, not the plugin's (no kubelet on most nodes)
    wants = Path("/etc/systemd/system/multi-user.target.wants")
    assert os.path.lexists(wants / UNIT)
    assert not os.path.lexists(wants / PLUGIN_UNIT)
    state = Path("/var/lib/systemd/deb-systemd-helper-enabled")
    assert not os.path.lexists(state / f"multi-user.target.wants/{PLUGIN_UNIT}")
    if shutil.which("systemd-analyze") is not None:
        verify = sh("systemd-analyze", "verify", "--man=no", unit, check=False)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert PLUGIN_UNIT not in verify.stderr, verify.stderr


def other_python() -> str | None:
    """A CPython 3.10+ other than the packages' target (/usr/bin/python3), if one is here."""
    target = sh("/usr/bin/python3", "-c", "import sys; print(sys.version_info[:2])").stdout
    candidates = [
        *sorted(Path("/usr/bin").glob("python3.1[0-9]")),
        *sorted(Path("/usr/local/bin").glob("python3.1[0-9]")),
        *sorted((Path.home() / ".pyenv/versions").glob("3.1[0-9]*/bin/python3")),
    ]
    for python in candidates:
        probe = [str(python), "-I", "-c", "import sys; print(sys.version_info[:2])"]
        done = subprocess.run(probe, capture_output=True, text=True, check=False, timeout=30)
        if done.returncode == 0 and done.stdout != target:
            return str(python)
    return None


def test_installed_device_plugin_under_another_python_says_which_in_one_line(
    installed_deb: Installed,
) -> None:
    """As after an upgrade of the system Python: the packaged grpcio cannot load, and the plugin
    names the Python it was built for, the one running it, and the fix."""
    python = other_python()
    if python is None:
        pytest.skip("needs a CPython 3.10+ other than /usr/bin/python3")
    built = sh("/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])")
    running = sh(python, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])")
    done = sh(python, "-I", "-S", "/usr/bin/nvct-device-plugin", "--help", check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        f"nvct-device-plugin: error: the grpc in /{GRPC} is built for Python "
        f"{built.stdout.strip()}, but this is Python {running.stdout.strip()}"
    ), line
    assert f"reinstall the nvct package built for Python {running.stdout.strip()}" in line


def test_installed_config_manager_follows_its_nodes_label(
    installed_deb: Installed,
    tmp_path: Path,
    kube_certs: ServingCerts,  # noqa: F811 - the fixture's name
) -> None:
    """The packaged /usr/bin/nvct-config-manager (its vendored lightkube, the grpc directory's
    msgspec) against the stand-in API server: the label's entry reaches the plugin's file and
    the plugin is signalled."""
    server = APIServer(kube_certs)
    server.start()
    try:
        pod = Pod(tmp_path, server, CONFIGS)
        server.put_node(NODE, {LABEL: "ts4"})
        plugin = SignalRecorder(tmp_path, pod.dst)
        try:  # the recorder stops even when the manager cannot start
            manager = pod.manager(
                Path("/usr/bin/nvct-config-manager"),
                ONESHOT="false",
                PROCESS_TO_SIGNAL=plugin.name,
            )
            try:
                assert until(pod.dst.is_file, 20), manager.output()
                assert pod.dst.read_text() == CONFIGS["ts4"]
                server.set_node_labels(NODE, {LABEL: "mig-mixed"})
                assert until(
                    lambda: any(s["content"] == CONFIGS["mig-mixed"] for s in plugin.signals()),
                    5,
                ), manager.output()
            finally:
                manager.stop()
        finally:
            plugin.stop()
    finally:
        server.stop()


def test_installed_cli_labels_its_node_as_the_installer_does(
    installed_deb: Installed,
    tmp_path: Path,
    kube_certs: ServingCerts,  # noqa: F811 - the fixture's name
) -> None:
    """The packaged /usr/bin/nvct-cli node-label (what node-install.sh runs in the image: the
    vendored lightkube, the grpc directory's msgspec) with the installer's token and env."""
    from integration.harness.nodelabel import LABEL as READY
    from integration.harness.nodelabel import installer_account, installer_env

    server = APIServer(kube_certs)
    server.start()
    try:
        server.put_node(NODE)
        env = installer_env(server, installer_account(server, tmp_path / "sa"))
        done = subprocess.run(
            ["/usr/bin/nvct-cli", "node-label", f"{READY}=true"],
            env={"PATH": "/usr/bin:/bin", **env},
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        node = server.store.get(NODES, "", NODE)
        assert node["metadata"]["labels"][READY] == "true"
    finally:
        server.stop()


def test_conffile_edit_survives_reinstall(installed_deb: Installed) -> None:
    config = Path("/etc/nvct/config.toml")
    config.write_text(config.read_text() + "# edited by the admin\n")
    done = sh("dpkg", "-i", installed_deb.packages.deb, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert config.read_text().endswith("# edited by the admin\n")


# Last in the module: it purges the package every installed_deb test above shares.
def test_purge_leaves_nothing_behind(installed_deb: Installed) -> None:
    # Removing keeps the conffile (policy); the program and its byte code go.
    done = sh("dpkg", "-r", "nvct-oci-hook", "nvct", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert Path("/etc/nvct/config.toml").exists()
    assert not os.path.lexists("/usr/bin/nvct-cli")
    assert not os.path.lexists("/usr/share/nvct/lib/nvct/__pycache__")
    # What the refresh service's `cdi generate --library-mounts directory` makes: the purge
    # takes it (only checked where this machine had no /var/lib/nvct of its own).
    state_dir = Path("/var/lib/nvct")
    made_state = not os.path.lexists(state_dir)
    if made_state:
        (state_dir / "cdi/libdirs/0123").mkdir(parents=True)
        (state_dir / "cdi/libdirs/0123.sources").write_text("[]")
    done = purge()
    assert done.returncode == 0, done.stdout + done.stderr
    assert not dpkg_installed("nvct") and not dpkg_installed("nvct-oci-hook")
    left = sorted(
        p for p in installed_deb.paths - installed_deb.existed_before if os.path.lexists("/" + p)
    )
    assert left == []
    for path in (
        "/etc/nvct",
        "/var/cache/nvct",
        "/usr/share/nvct",
        "/usr/libexec/nvct",
        "/usr/lib/nvct",
    ):
        assert not os.path.lexists(path), f"{path} survived the purge"
    # deb-systemd-helper's enable symlink and state, and the daemon's empty /run/nvct, go too.
    assert not os.path.lexists(f"/etc/systemd/system/multi-user.target.wants/{UNIT}")
    for unit in (UNIT, PLUGIN_UNIT):
        assert not os.path.lexists(f"/var/lib/systemd/deb-systemd-helper-enabled/{unit}.dsh-also")
    if not installed_deb.run_dir_existed:
        assert not os.path.lexists(DAEMON_SOCKET.parent)
    if made_state:
        assert not os.path.lexists(state_dir), "the CDI library directory survived the purge"
    if installed_deb.log_created:
        assert not os.path.lexists("/var/log/nvct.log")
    # The developer's nvct (this interpreter's, editable or not) is untouched.
    version = sh(sys.executable, "-m", "nvct.cli.main", "--version").stdout
    assert VERSION in version
    dev_cli = NVCT_BIN / "nvct-cli"
    if dev_cli.exists() and dev_cli != Path("/usr/bin/nvct-cli"):
        assert VERSION in sh(dev_cli, "--version").stdout
