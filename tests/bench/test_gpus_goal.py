"""The goal bench's own mechanics: moving the daemon's socket aside, the hook link, and the
count of each start's path in nvct's log."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from bench import gpus_goal
from nvct.cli.daemon_cmd import answers


def test_a_hidden_socket_finds_no_daemon_and_comes_back_listening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock = tmp_path / "shim.sock"
    monkeypatch.setattr(gpus_goal, "SOCKET", sock)
    monkeypatch.setattr(gpus_goal, "HIDDEN", tmp_path / "shim.sock.bench-hidden")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(sock))
        listener.listen(4)
        with gpus_goal.socket_hidden(True):
            assert not answers(str(sock))  # the launcher's connect: no daemon
        assert answers(str(sock))  # the same listening socket, back in place
        with gpus_goal.socket_hidden(False):
            assert answers(str(sock))
        with pytest.raises(RuntimeError), gpus_goal.socket_hidden(True):
            raise RuntimeError("a failed start")
        assert answers(str(sock))


def test_hook_link_is_repointed(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_text("a")
    second.write_text("b")
    link = tmp_path / "bin" / gpus_goal.HOOK
    link.parent.mkdir()
    gpus_goal.point_hook(link, first)
    gpus_goal.point_hook(link, second)
    assert link.read_text() == "b"
    assert sorted(p.name for p in link.parent.iterdir()) == [gpus_goal.HOOK]


def test_start_paths_counts_creates_and_hooks_by_who_did_them(tmp_path: Path) -> None:
    log = tmp_path / "nvct.log"
    events = [
        {"event": "container_prepared", "via": "daemon"},  # an earlier phase's
        {"event": "container_prepared", "via": "daemon"},
        {"event": "container_prepared", "via": "shim"},
        {"event": "container_configured", "via": "daemon"},
        {"event": "container_configured", "via": "hook"},
        {"event": "container_configured", "via": "hook"},
        {"event": "passthrough_create"},
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert gpus_goal.start_paths(log, 1) == {
        "create:daemon": 1,
        "create:shim": 1,
        "hook:daemon": 1,
        "hook:hook": 2,
    }


def test_mounts_per_start_lists_the_distinct_counts_per_kind(tmp_path: Path) -> None:
    log = tmp_path / "nvct.log"
    events = [
        {"event": "container_prepared", "via": "daemon", "mounts": 15},  # an earlier phase's
        {"event": "container_prepared", "via": "daemon", "mounts": 6},
        {"event": "container_prepared", "via": "shim", "mounts": 6},
        {"event": "container_prepared", "via": "daemon", "mounts": 0},  # no GPU asked
        {"event": "container_configured", "via": "daemon", "mounts": 6},
        {"event": "passthrough_create"},
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert gpus_goal.mounts_per_start(log, 1) == {"create": [0, 6], "hook": [6]}


def test_podmans_hooks_dir_is_the_packages_entry_naming_the_installs_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVCT_CONFIG", "/x/config.toml")
    hook = tmp_path / "venv/bin/nvidia-container-runtime-hook"
    empty, full = gpus_goal.hooks_dirs(tmp_path, hook)
    assert list(empty.iterdir()) == []
    (entry_file,) = full.iterdir()
    shipped = json.loads((gpus_goal.ROOT / "hooks" / entry_file.name).read_text())
    entry = json.loads(entry_file.read_text())
    assert entry["hook"]["path"] == str(hook)
    assert entry["hook"]["env"] == [*shipped["hook"]["env"], "NVCT_CONFIG=/x/config.toml"]
    assert (entry["when"], entry["stages"], entry["hook"]["args"]) == (
        shipped["when"],
        shipped["stages"],
        shipped["hook"]["args"],
    )


def test_pooled_goals_join_every_install_paths_rounds() -> None:
    runc = [100.0 + i % 7 for i in range(20)]
    phase = {
        "samples": {
            "runc": runc,
            "1 GPU": [x * 1.02 for x in runc],
            "--gpus device=0": [x * 1.08 for x in runc],
            "no GPU": runc,
        }
    }
    found = gpus_goal.pooled({"venv": phase, "wheel": phase}, seed=1)
    assert found["1 GPU"]["rounds"] == 40  # type: ignore[index]
    assert found["1 GPU"]["verdict"] == "met"  # type: ignore[index]
    assert found["--gpus device=0"]["verdict"] == "not met"  # type: ignore[index]
    assert "podman hooks.d, 1 GPU" not in found  # not run: no podman samples
    assert gpus_goal.pooled({"venv": phase}, seed=1) == {}  # one install: nothing to pool
