"""Shared fakes for the doctor tests: temporary trees standing for /etc, /proc, /sys and /snap,
fake docker/containerd CLIs, and contexts whose every host path is under a test's tmp_path."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nvct.doctor import PASS, CheckResult, Completed, DoctorContext, devices, driver
from tests.conftest import sim_config

NOW = time.time()
BTIME = int(NOW) - 1000
DAEMON_START = BTIME + 500  # the fake daemons started 500 s before the tests


class FakeCommands:
    """Answers for ``docker info`` / ``containerd config dump`` / the hook import check."""

    def __init__(self, answers: dict[str, Completed] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> Completed:
        self.calls.append(list(argv))
        for key, answer in self.answers.items():
            if key in " ".join(argv):
                return answer
        if "-c" in argv and "import nvct.hook.__main__" in argv:
            return Completed(0, "", "")
        return Completed(127, "", f"{argv[0]}: not found")


def docker_info(**fields: Any) -> Completed:
    info = {
        "Runtimes": {"runc": {"path": "runc"}},
        "DefaultRuntime": "runc",
        "CgroupDriver": "systemd",
        "CgroupVersion": "2",
        "SecurityOptions": ["name=seccomp,profile=builtin", "name=cgroupns"],
    }
    info.update(fields)
    return Completed(0, json.dumps(info), "")


def fake_process(
    proc: Path,
    pid: int,
    name: str,
    argv: Sequence[str],
    *,
    uid: int = 0,
    exe: str | None = None,
    start: float = DAEMON_START,
) -> None:
    """A /proc/<pid> entry as doctor reads it (stat, status, cmdline, comm, exe)."""
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "stat").write_text(f"cpu  1 2 3 4\nbtime {BTIME}\n")
    base = proc / str(pid)
    base.mkdir(parents=True)
    ticks = round((start - BTIME) * os.sysconf("SC_CLK_TCK"))
    fields = ["S", *["0"] * 18, str(ticks), "0"]
    (base / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    (base / "status").write_text(f"Name:\t{name}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (base / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (base / "comm").write_text(name + "\n")
    (base / "exe").symlink_to(exe or argv[0])


def set_mtime(path: Path, when: float) -> None:
    os.utime(path, (when, when))


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def context(tmp: Path, config: Any = None, **kw: Any) -> DoctorContext:
    """A context whose every host path is under ``tmp`` (and nothing is installed)."""
    (tmp / "proc").mkdir(parents=True, exist_ok=True)
    values: dict[str, Any] = {
        "config": config,
        "docker_pidfile": tmp / "docker.pid",
        "containerd_config": tmp / "containerd/config.toml",
        "crio_config": tmp / "crio/crio.conf",
        "crio_dropin_dir": tmp / "crio/crio.conf.d",
        "cdi_dirs": (tmp / "cdi",),
        "shim_socket": tmp / "shim.sock",
        "sysfs_root": tmp / "sys",
        "host_proc": tmp / "proc",
        "snap_dir": tmp / "snap",
        "env": {},
        "run": FakeCommands(),
        "which": lambda name: None,
    }
    values.update(kw)
    if values["config"] is None:
        from nvct.config import Config

        values["config"] = Config()
    return DoctorContext(**values)


def by_name(results: Sequence[CheckResult], name: str) -> CheckResult:
    found = [r for r in results if r.name == name]
    assert len(found) == 1, results
    return found[0]


def healthy_dev_root(sim: Any, tmp: Path, **kw: Any) -> Path:
    from integration.simdriver import make_dev_nodes

    root = tmp / "devroot"
    make_dev_nodes(sim.spec, root, **kw)
    devices.fix_dev_char_links(root)
    return root


def sim_ctx(sim: Any, tmp: Path, **kw: Any) -> DoctorContext:
    overrides = {k: kw.pop(k) for k in ("dev_root", "proc_root", "driver_root") if k in kw}
    return context(tmp, sim_config(sim, tmp, **overrides), **kw)


def facts_of(ctx: DoctorContext) -> driver.DriverFacts:
    facts, result = driver.probe_nvml(ctx)
    assert result.status == PASS, result
    return facts


def nvct_runtime_json(tmp: Path) -> dict[str, Any]:
    runtime = executable(tmp / "usr/bin/nvct-runtime")
    return {"runtimes": {"nvidia": {"path": str(runtime), "args": []}}, "log-level": "warn"}


def write_cdi(directory: Path, name: str, version: str | None, *, annotation: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    spec: dict[str, Any] = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": []}
    if version and annotation:
        spec["annotations"] = {"nvct.driver-version": version}
    elif version:
        spec["containerEdits"] = {"env": [f"NVCT_CDI_DRIVER_VERSION={version}"]}
    path = directory / name
    path.write_text(json.dumps(spec))
    return path


def containerd_files(tmp: Path, *, imported: bool, relative: bool = True) -> Path:
    root = tmp / "containerd/config.toml"
    root.parent.mkdir(parents=True)
    pattern = "conf.d/*.toml" if relative else f"{root.parent}/conf.d/*.toml"
    imports = f'imports = ["/nowhere/*.toml", "{pattern}"]\n' if imported else ""
    root.write_text(f"version = 2\n{imports}\n[plugins]\n")
    drop = tmp / "containerd/conf.d/99-nvct.toml"
    drop.parent.mkdir()
    drop.write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        'BinaryName = "/usr/bin/nvct-runtime"\n'
    )
    return root


def cdi_generator(sim: Any, tmp: Path) -> Any:
    """doctor's view of `cdi generate` now, for the recorded driver ``sim``."""
    from nvct.host.arch import host_arch
    from nvct.plan.cdi_spec import build_spec, options_like

    config = sim_config(sim, tmp)

    def generate(on_disk: Any) -> Any:
        options, hook = options_like(on_disk)
        return build_spec(
            sim.inventory, config, host_arch(), options=options, hook=hook or "/x", create=False
        )

    return generate
