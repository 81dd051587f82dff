"""nvct-cli configure --runtime crio (drop-in) and --runtime podman (hooks.d JSON)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nvct.cli.configure_cmd import HOOK_PATH_ENV
from nvct.cli.main import main
from nvct.engines import EngineOptions, configure, crio, podman
from nvct.engines.hooksd import hooksd_entry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

RUNTIME = "/opt/nvct/bin/nvct-runtime"
REPO = Path(__file__).resolve().parents[2]


def test_crio_drop_in_parses_to_the_handler(tmp_path: Path) -> None:
    path = tmp_path / "crio.conf.d" / "99-nvct.toml"
    result = configure(
        "crio", EngineOptions(config_path=path, runtime_path=RUNTIME, set_as_default=True)
    )
    assert result.applied is not None and result.applied.action == "written"
    data = tomllib.loads(path.read_text())
    assert data == {
        "crio": {
            "runtime": {
                "default_runtime": "nvidia",
                "runtimes": {"nvidia": {"runtime_path": RUNTIME, "runtime_type": "oci"}},
            }
        }
    }
    assert result.next_step == "systemctl restart crio"
    undone = configure("crio", EngineOptions(config_path=path, undo=True))
    assert undone.applied is not None and undone.applied.action == "removed"
    assert not path.exists()


def test_crio_keeps_no_backup_in_its_drop_in_directory(tmp_path: Path) -> None:
    """CRI-O applies every file of crio.conf.d in name order: a backup of the drop-in beside it
    would be applied after it and bring the old handlers back. Registering a second handler
    (the installer's nvct-system) leaves the directory holding the drop-in alone, and the
    previous content outside it."""
    dropins = tmp_path / "crio.conf.d"
    path = dropins / "99-nvct.toml"
    configure("crio", EngineOptions(config_path=path, runtime_path=RUNTIME))
    first = path.read_text()
    second = configure(
        "crio", EngineOptions(config_path=path, runtime_path=RUNTIME, runtime_name="nvct-system")
    )
    assert [p.name for p in dropins.iterdir()] == ["99-nvct.toml"]
    assert second.applied is not None and second.applied.backup is not None
    kept = tmp_path / "crio.conf.d.nvct-backup" / "99-nvct.toml.nvct-backup"
    assert second.applied.backup == kept
    assert second.applied.backup.read_text() == first
    handlers = tomllib.loads(path.read_text())["crio"]["runtime"]["runtimes"]
    assert sorted(handlers) == ["nvct-system", "nvidia"]


def test_crio_existing_drop_in_keeps_its_content() -> None:
    text = '# mine\n[crio.runtime]\n  log_level = "debug"\n'
    o = EngineOptions(config_path=Path("/x.toml"), runtime_path=RUNTIME, set_as_default=True)
    new = crio.edit(text, o).new
    assert new is not None
    assert tomllib.loads(new)["crio"]["runtime"]["log_level"] == "debug"
    assert tomllib.loads(new)["crio"]["runtime"]["default_runtime"] == "nvidia"
    assert crio.edit(new, EngineOptions(config_path=Path("/x.toml"), undo=True)).new == text


def test_repo_hook_file_is_what_configure_installs() -> None:
    packaged = hooksd_entry("", "/usr/bin/nvct-hook", [HOOK_PATH_ENV])
    assert (REPO / "hooks" / "oci-nvct-hook.json").read_text() == podman.render(packaged)
    doc = json.loads((REPO / "hooks" / "oci-nvct-hook.json").read_text())
    assert doc["version"] == "1.0.0" and doc["stages"] == ["prestart"]
    assert doc["hook"]["env"] == [HOOK_PATH_ENV]  # explicit: no container env inherited


def test_podman_hook_install_and_undo(tmp_path: Path, capsys) -> None:
    hooks = tmp_path / "hooks.d"
    cfg = tmp_path / "nvct.toml"
    assert (
        main(
            [
                "configure",
                "--runtime",
                "podman",
                "--hooks-dir",
                str(hooks),
                "--nvct-config",
                str(cfg),
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    installed = json.loads((hooks / "oci-nvct-hook.json").read_text())
    assert installed["hook"]["args"][-1] == "prestart"
    assert installed["hook"]["path"].endswith("nvct-hook")
    assert f"NVCT_CONFIG={cfg}" in installed["hook"]["env"]
    assert "cdi generate" in out  # how to use CDI instead
    assert f"--hooks-dir {hooks}" in err  # podman would not read this directory by default
    assert main(["configure", "--runtime", "podman", "--hooks-dir", str(hooks), "--undo"]) == 0
    assert [p.name for p in hooks.iterdir()] == ["oci-nvct-hook.json.nvct-backup"]  # not *.json


def test_podman_refuses_to_overwrite_a_foreign_hook(tmp_path: Path, capsys) -> None:
    hooks = tmp_path / "hooks.d"
    hooks.mkdir()
    foreign = hooks / "oci-nvct-hook.json"
    foreign.write_text('{"hook": {"path": "/usr/bin/other"}}')
    assert main(["configure", "--runtime", "podman", "--hooks-dir", str(hooks)]) == 1
    assert "is not nvct's hook" in capsys.readouterr().err
    assert foreign.read_text() == '{"hook": {"path": "/usr/bin/other"}}'
