"""nvct-cli configure --runtime docker: daemon.json edits, dry-run, undo, backups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvct.cli.main import main
from nvct.engines import EngineOptions, configure
from nvct.engines import docker as engine
from nvct.engines.files import BACKUP_SUFFIX

RUNTIME = "/opt/nvct/bin/nvct-runtime"


def opts(path: Path, **kw: object) -> EngineOptions:
    return EngineOptions(config_path=path, runtime_path=RUNTIME, **kw)  # type: ignore[arg-type]


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["configure", "--runtime-path", RUNTIME, *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_fresh_file_gets_the_runtime(tmp_path: Path) -> None:
    new = engine.edit(None, opts(tmp_path / "daemon.json")).new
    assert new is not None
    assert json.loads(new) == {"runtimes": {"nvidia": {"path": RUNTIME, "args": []}}}
    assert new.startswith('{\n    "runtimes"')  # 4-space indent for a new file


def test_unrelated_keys_values_and_order_stay(tmp_path: Path) -> None:
    original = {
        "log-level": "warn",
        "runtimes": {"crun": {"path": "/usr/bin/crun"}},
        "storage-driver": "overlay2",
        "registry-mirrors": ["https://m.example"],
        "default-ulimits": {"nofile": {"Name": "nofile", "Hard": 64000, "Soft": 64000}},
    }
    text = json.dumps(original, indent=2)
    new = engine.edit(text, opts(tmp_path / "d.json", set_as_default=True)).new
    assert new is not None
    data = json.loads(new)
    assert list(data) == [*original, "default-runtime"]
    assert data["runtimes"] == {
        "crun": {"path": "/usr/bin/crun"},
        "nvidia": {"path": RUNTIME, "args": []},
    }
    assert data["default-runtime"] == "nvidia"
    assert {k: v for k, v in data.items() if k not in ("runtimes", "default-runtime")} == {
        k: v for k, v in original.items() if k != "runtimes"
    }
    assert new.startswith('{\n  "log-level"')  # the file's own 2-space indent


def test_same_config_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    first = configure("docker", opts(path))
    assert first.applied is not None and first.applied.action == "written"
    before = path.read_bytes()
    again = configure("docker", opts(path))
    assert again.applied is not None and again.applied.action == "unchanged"
    assert not again.change.changed and again.next_step == ""
    assert path.read_bytes() == before


def test_backup_holds_the_previous_content(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text('{"debug": true}\n')
    path.chmod(0o600)
    result = configure("docker", opts(path))
    assert result.applied is not None
    assert result.applied.backup == tmp_path / ("daemon.json" + BACKUP_SUFFIX)
    assert result.applied.backup.read_text() == '{"debug": true}\n'
    assert path.stat().st_mode & 0o777 == 0o600  # permissions kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["daemon.json", "daemon.json.nvct-backup"]


def test_dry_run_prints_a_diff_and_writes_nothing(tmp_path: Path, capsys) -> None:
    path = tmp_path / "daemon.json"
    path.write_text('{"debug": true}\n')
    rc, out, _ = run_cli(capsys, "--config", str(path), "--dry-run")
    assert rc == 0
    assert out.startswith(f"--- {path}\n+++ {path}\n@@")
    assert f'+            "path": "{RUNTIME}",' in out
    assert path.read_text() == '{"debug": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["daemon.json"]


def test_undo_removes_exactly_what_was_added(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(json.dumps({"debug": True, "runtimes": {"crun": {"path": "/x"}}}, indent=4))
    configure("docker", opts(path, set_as_default=True))
    configure("docker", opts(path, undo=True))
    assert json.loads(path.read_text()) == {"debug": True, "runtimes": {"crun": {"path": "/x"}}}


def test_undo_of_a_file_nvct_created_removes_it(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    configure("docker", opts(path, set_as_default=True))
    result = configure("docker", opts(path, undo=True))
    assert result.applied is not None and result.applied.action == "removed"
    assert not path.exists()


def test_undo_leaves_a_foreign_runtime_of_that_name(tmp_path: Path) -> None:
    text = json.dumps({"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}})
    edit = engine.edit(text, opts(tmp_path / "d.json", undo=True))
    assert edit.new == text
    assert "does not point at nvct-runtime" in edit.notes[0]


def test_replacing_nvidias_runtime_is_reported(tmp_path: Path) -> None:
    text = json.dumps({"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}})
    edit = engine.edit(text, opts(tmp_path / "d.json"))
    assert edit.new is not None
    assert json.loads(edit.new)["runtimes"]["nvidia"]["path"] == RUNTIME
    assert "replaced" in edit.notes[0]


def test_runtime_args_carry_the_nvct_config(tmp_path: Path, capsys) -> None:
    path = tmp_path / "daemon.json"
    cfg = tmp_path / "nvct.toml"
    rc, out, _ = run_cli(capsys, "--config", str(path), "--nvct-config", str(cfg))
    assert rc == 0, out
    assert json.loads(path.read_text())["runtimes"]["nvidia"] == {
        "path": RUNTIME,
        "runtimeArgs": ["--nvct-config", str(cfg)],  # the key dockerd reads
    }
    assert "next: kill -HUP" in out


def test_runtime_path_defaults_to_this_installation(tmp_path: Path, capsys) -> None:
    path = tmp_path / "daemon.json"
    assert main(["configure", "--config", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    runtime = json.loads(path.read_text())["runtimes"]["nvidia"]["path"]
    assert runtime.startswith("/") and runtime.endswith("nvct-runtime")
    assert report["action"] == "written" and report["engine"] == "docker"


@pytest.mark.parametrize("name", ["", "a b", "x/../y", "-flag", "n" * 65])
def test_bad_runtime_names_are_click_errors(tmp_path: Path, capsys, name: str) -> None:
    rc, _, err = run_cli(capsys, "--config", str(tmp_path / "d.json"), "--runtime-name", name)
    assert rc == 2
    assert "--runtime-name" in err
    assert not (tmp_path / "d.json").exists()


def test_checks_without_a_daemon_reading_the_file(tmp_path: Path) -> None:
    warnings = engine.checks(opts(tmp_path / "daemon.json"))
    assert len(warnings) == 1
    assert "no dockerd is running" in warnings[0] or "no running dockerd reads" in warnings[0]
