"""GSP firmware bound as its directory only where that shows the container the same files."""

from __future__ import annotations

import os
import posixpath
from dataclasses import replace
from pathlib import Path

from nvct.host.arch import host_arch
from nvct.plan.build import build_plan
from nvct.plan.firmware_dir import with_firmware_dir
from nvct.plan.model import Plan, RootfsLayout
from nvct.request.parse import parse_request
from tests.conftest import sim_config


def _plan(sim, tmp: Path) -> tuple[Plan, Path]:
    """The sim's 1-GPU plan with its firmware files moved to a real directory in ``tmp``."""
    cfg = sim_config(sim, tmp)
    env = {"NVIDIA_VISIBLE_DEVICES": "0"}
    plan = build_plan(
        parse_request(env, config=cfg), sim.inventory, cfg, host_arch(), RootfsLayout()
    )
    host = tmp / "firmware" / sim.spec.driver_version
    host.mkdir(parents=True)
    mounts = []
    for m in plan.mounts:
        if m.kind == "firmware":
            (host / posixpath.basename(m.source)).write_bytes(b"gsp")
        moved = str(host / posixpath.basename(m.source))
        mounts.append(replace(m, source=moved) if m.kind == "firmware" else m)
    return replace(plan, mounts=tuple(mounts)), host


def _firmware(plan: Plan) -> list[tuple[str, str]]:
    return [(m.source, m.target) for m in plan.mounts if m.kind == "firmware"]


def test_firmware_files_alone_in_their_directory_become_one_mount(
    recorded_h100x4, tmp_path
) -> None:
    plan, host = _plan(recorded_h100x4, tmp_path)
    version = recorded_h100x4.spec.driver_version
    assert len(_firmware(plan)) == 2
    folded = with_firmware_dir(plan)
    assert _firmware(folded) == [(str(host), f"/lib/firmware/nvidia/{version}")]
    others = [m for m in plan.mounts if m.kind != "firmware"]
    assert [m for m in folded.mounts if m.kind != "firmware"] == others  # order kept
    (mount,) = [m for m in folded.mounts if m.kind == "firmware"]
    assert mount.options == plan.mounts[[m.kind for m in plan.mounts].index("firmware")].options


def test_a_directory_holding_more_or_links_keeps_the_file_mounts(recorded_h100x4, tmp_path) -> None:
    plan, host = _plan(recorded_h100x4, tmp_path)
    (host / "gsp_gb10x.bin").write_bytes(b"not planned")
    assert with_firmware_dir(plan) == plan  # the extra file must not show in the container
    (host / "gsp_gb10x.bin").unlink()
    name = posixpath.basename(_firmware(plan)[0][0])
    (host / name).unlink()
    os.symlink("/etc/shadow", host / name)
    assert with_firmware_dir(plan) == plan  # only regular files are folded
    (host / name).unlink()
    (host / name).write_bytes(b"gsp")
    assert with_firmware_dir(plan) != plan
    linked = tmp_path / "linked"
    os.symlink(host, linked)
    moved = replace(
        plan,
        mounts=tuple(
            replace(m, source=str(linked / posixpath.basename(m.source)))
            if m.kind == "firmware"
            else m
            for m in plan.mounts
        ),
    )
    assert with_firmware_dir(moved) == moved  # nor a directory reached through a link
