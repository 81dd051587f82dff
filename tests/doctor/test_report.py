"""The whole doctor command: every check in order, the report's text and JSON, exit status."""

from __future__ import annotations

import json
import os

import pytest

from nvct.doctor import FAIL, PASS, SKIP, WARN, CheckResult, run_doctor
from tests.cli.test_cli import cli, roots
from tests.doctor.conftest import by_name, healthy_dev_root, nvct_runtime_json, sim_ctx


@pytest.mark.root
def test_doctor_cli_text_json_and_fix_dev_char(h100x4, tmp_path) -> None:
    from integration.simdriver import make_dev_nodes

    dev = tmp_path / "devroot"
    make_dev_nodes(h100x4.spec, dev)
    args = [*roots(h100x4, tmp_path)]
    args[args.index("--dev-root") + 1] = str(dev)
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    cli(*args, "cdi", "generate", "--output", str(cdi_dir / "nvidia.json"))  # current: PASS
    daemon_json = tmp_path / "daemon.json"
    daemon_json.write_text(json.dumps(nvct_runtime_json(tmp_path)))
    common = [
        "--cdi-dir", str(cdi_dir),
        "--docker-config", str(daemon_json),
        "--docker-pidfile", str(tmp_path / "none.pid"),
        "--docker-host", f"unix://{tmp_path}/none.sock",
        "--containerd-config", str(tmp_path / "containerd.toml"),
        "--crio-config", str(tmp_path / "crio.conf"),
        "--crio-dropin-dir", str(tmp_path / "crio.d"),
        "--host-proc", str(tmp_path / "proc"),
        "--sysfs-root", str(tmp_path / "sys"),
        "--snap-dir", str(tmp_path / "snap"),
    ]  # fmt: skip
    (tmp_path / "proc").mkdir()
    text = cli(*args, "doctor", *common, check=False)
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    fail = next(i for i, x in enumerate(lines) if x.startswith("FAIL dev-char-links:"))
    assert lines[fail + 1].startswith("     fix: nvct-cli doctor --fix-dev-char")
    assert "PASS nvml: NVML" in text.stdout and "PASS cdi-spec:" in text.stdout
    assert "WARN persistence:" in text.stdout and lines[-1].startswith("FAILED:")
    fixed = cli(*args, "doctor", "--fix-dev-char", "--json", *common, check=False)
    data = json.loads(fixed.stdout)
    statuses = {c["name"]: c["status"] for c in data["checks"]}
    assert statuses["dev-char-fix"] == PASS and statuses["dev-char-links"] == PASS
    assert statuses["device-nodes"] == PASS and statuses["docker-config"] == PASS
    assert statuses["docker-daemon"] == WARN  # no daemon at that socket
    assert statuses["containerd"] == SKIP and statuses["crio"] == SKIP
    assert os.readlink(dev / "dev/char/195:3") == "../nvidia3"
    assert data["ok"] is (fixed.returncode == 0)
    assert all(c["fix"] for c in data["checks"] if c["status"] == FAIL)


def test_report_exit_status_follows_fails() -> None:
    from nvct.doctor.report import DoctorReport

    ok = DoctorReport((CheckResult("a", PASS, "x"), CheckResult("b", WARN, "y", "do z")))
    assert not ok.failed and ok.to_text()[-1] == "OK: 1 PASS, 1 WARN"
    assert ok.to_text()[1:3] == ["WARN b: y", "     fix: do z"]
    bad = DoctorReport((CheckResult("c", FAIL, "broken", "fix it"),))
    assert bad.failed and bad.to_dict()["ok"] is False


@pytest.mark.root
def test_run_doctor_end_to_end_in_process(h100x4, tmp_path) -> None:
    dev = healthy_dev_root(h100x4, tmp_path)
    ctx = sim_ctx(h100x4, tmp_path, dev_root=dev)
    report = run_doctor(ctx)
    names = [r.name for r in report.results]
    assert names[:6] == [
        "nvml",
        "kernel-module",
        "ldcache",
        "device-nodes",
        "dev-char-links",
        "persistence",
    ]
    assert by_name(report.results, "docker").status == SKIP
    assert by_name(report.results, "cdi-spec").status == WARN
