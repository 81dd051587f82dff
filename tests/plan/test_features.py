"""MIG management caps, IMEX channels and GDS/MOFED/NVSWITCH/GDRCOPY in the plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvct.base.errors import RequestError
from nvct.host.arch import host_arch
from nvct.host.load import load_inventory
from nvct.plan.build import build_plan
from nvct.plan.model import Plan
from nvct.plan.workorder import from_plan
from nvct.request.parse import parse_request
from tests.conftest import IMEX_MAJOR, sim_config, with_feature_nodes

pytestmark = pytest.mark.root


def plan_for(sim, tmp: Path, env: dict[str, str], *, privileged: bool = True, extended=True):
    dev_root, proc_root = with_feature_nodes(sim, tmp) if extended else (None, None)
    overrides = {"dev_root": dev_root, "proc_root": proc_root} if extended else {}
    config = sim_config(sim, tmp, **overrides)
    inventory = load_inventory(config, use_cache=False)
    request = parse_request(env, privileged=privileged, config=config)
    return build_plan(request, inventory, config, host_arch()), config


def nodes(plan: Plan) -> dict[str, tuple[int, int, str]]:
    return {d.node.path: (d.node.major, d.node.minor, d.reason) for d in plan.devices}


def test_mig_config_grants_the_config_cap_and_the_gpus_mig_caps(a100mig, tmp_path) -> None:
    plan, config = plan_for(
        a100mig,
        tmp_path,
        {"NVIDIA_VISIBLE_DEVICES": "none", "NVIDIA_MIG_CONFIG_DEVICES": "1"},
    )
    got = nodes(plan)
    assert (
        got["/dev/nvidia-caps/nvidia-cap1"][2]
        == "MIG config capability (NVIDIA_MIG_CONFIG_DEVICES)"
    )
    minors = dict(load_inventory(config, use_cache=False).cap_minors)
    gpu1 = {m for name, m in minors.items() if name.startswith("gpu1/")}
    gpu0 = {m for name, m in minors.items() if name.startswith("gpu0/")}
    granted = {minor for path, (_, minor, _) in got.items() if "nvidia-cap" in path}
    existing = {
        int(p.name[len("nvidia-cap") :])
        for p in Path(a100mig.dev_root, "dev/nvidia-caps").iterdir()
    }
    assert granted == ({1} | gpu1) & existing and not granted & gpu0
    assert len(granted) > 2  # the config cap and GPU 1's MIG caps
    assert "/dev/nvidia-caps/nvidia-cap2" not in got  # monitoring was not asked for
    order = from_plan(plan, config)
    assert order["proc_driver"] is not None
    assert {"capabilities/mig/config", "capabilities/gpu1"} <= set(order["proc_driver"][1])


def test_mig_monitor_and_the_unprivileged_refusal(a100mig, tmp_path) -> None:
    env = {"NVIDIA_VISIBLE_DEVICES": "0:1", "NVIDIA_MIG_MONITOR_DEVICES": "all"}
    plan, _ = plan_for(a100mig, tmp_path, env)
    assert "/dev/nvidia-caps/nvidia-cap2" in nodes(plan)
    assert "/dev/nvidia-caps/nvidia-cap1" not in nodes(plan)
    with pytest.raises(RequestError, match="NVIDIA_MIG_MONITOR_DEVICES is set in an unprivileged"):
        parse_request(env, privileged=False, config=sim_config(a100mig, tmp_path))


def test_imex_channels_by_number_and_all(h100x4, tmp_path) -> None:
    plan, _ = plan_for(
        h100x4, tmp_path, {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_IMEX_CHANNELS": "1,5"}
    )
    got = nodes(plan)
    # channel1 exists on the host; channel5 does not: made in the container with the major
    # /proc/devices gives, as NVIDIA's toolkit makes it.
    assert got["/dev/nvidia-caps-imex-channels/channel1"][:2] == (IMEX_MAJOR, 1)
    assert got["/dev/nvidia-caps-imex-channels/channel5"][:2] == (IMEX_MAJOR, 5)
    assert "/dev/nvidia-caps-imex-channels/channel0" not in got
    (tmp_path / "b").mkdir()
    plan, _ = plan_for(
        h100x4, tmp_path / "b", {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_IMEX_CHANNELS": "all"}
    )
    assert [p for p in nodes(plan) if "imex" in p] == [
        "/dev/nvidia-caps-imex-channels/channel0",
        "/dev/nvidia-caps-imex-channels/channel1",
    ]
    with pytest.raises(RequestError, match="'x1', not a channel number"):
        parse_request(
            {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_IMEX_CHANNELS": "x1"},
            config=sim_config(h100x4, tmp_path),
        )


def test_gated_features_bring_their_nodes(h100x4, tmp_path) -> None:
    gated = ("NVIDIA_GDS", "NVIDIA_MOFED", "NVIDIA_NVSWITCH", "NVIDIA_GDRCOPY")
    env = {"NVIDIA_VISIBLE_DEVICES": "0", **dict.fromkeys(gated, "enabled")}
    plan, _ = plan_for(h100x4, tmp_path, env)
    got = nodes(plan)
    for path in (
        "/dev/nvidia-fs0",
        "/dev/nvidia-fs1",
        "/dev/infiniband/uverbs0",
        "/dev/infiniband/rdma_cm",
        "/dev/nvidia-nvswitchctl",
        "/dev/nvidia-nvswitch0",
        "/dev/gdrdrv",
    ):
        assert path in got, path
    assert got["/dev/gdrdrv"][2] == "gdrcopy (NVIDIA_GDRCOPY)"
    assert plan.notes == () and plan.request.ignored == ()


def test_features_asked_for_and_absent_are_said(h100x4, tmp_path) -> None:
    env = {
        "NVIDIA_VISIBLE_DEVICES": "0",
        "NVIDIA_GDS": "enabled",
        "NVIDIA_GDRCOPY": "yes",
        "NVIDIA_IMEX_CHANNELS": "0",
        "NVIDIA_MIG_CONFIG_DEVICES": "all",
    }
    plan, _ = plan_for(h100x4, tmp_path, env, extended=False)
    assert not any("nvidia-fs" in p or "imex" in p or "nvidia-cap" in p for p in nodes(plan))
    assert set(plan.notes) == {
        "NVIDIA_GDS=enabled: no /dev/nvidia-fs* on this host (load the nvidia-fs module)",
        "NVIDIA_IMEX_CHANNELS=0: the nvidia-caps-imex-channels driver is not loaded "
        "(not in /proc/devices)",
        "NVIDIA_MIG_CONFIG_DEVICES: this host has no MIG config capability node",
    }
    assert plan.request.ignored == (
        "NVIDIA_GDRCOPY='yes' ignored: only 'enabled' turns gdrcopy on",
    )


def test_imex_request_brings_the_imex_daemon_and_its_config(h100x4, tmp_path) -> None:
    import subprocess

    root = tmp_path / "driver"
    subprocess.run(["cp", "-a", str(h100x4.driver_root), str(root)], check=True)
    for rel in ("usr/bin/nvidia-imex", "usr/bin/nvidia-imex-ctl"):  # any ELF executable
        subprocess.run(["cp", str(root / "usr/bin/nvidia-smi"), str(root / rel)], check=True)
    (root / "etc/nvidia-imex").mkdir(parents=True)
    (root / "etc/nvidia-imex/config.cfg").write_text("SERVER_PORT=50000\n")
    dev_root, proc_root = with_feature_nodes(h100x4, tmp_path)
    config = sim_config(h100x4, tmp_path, driver_root=root, dev_root=dev_root, proc_root=proc_root)
    inventory = load_inventory(config, use_cache=False)

    def targets(env: dict[str, str]) -> set[str]:
        request = parse_request({"NVIDIA_VISIBLE_DEVICES": "0", **env}, config=config)
        return {m.target for m in build_plan(request, inventory, config, host_arch()).mounts}

    imex = {"/usr/bin/nvidia-imex", "/usr/bin/nvidia-imex-ctl", "/etc/nvidia-imex/config.cfg"}
    assert imex <= targets({"NVIDIA_IMEX_CHANNELS": "0"})
    assert not imex & targets({})


def test_cdi_spec_of_the_imex_channels(h100x4, tmp_path) -> None:
    import json

    from tests.cli.test_cli import cli

    dev_root, proc_root = with_feature_nodes(h100x4, tmp_path)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"cache-dir = '{tmp_path / 'cache'}'\n[log]\nfile = '{tmp_path / 'log'}'\n")
    roots = ["--config", str(cfg), "--driver-root", str(h100x4.driver_root)]
    out = cli(
        *roots,
        "--dev-root",
        str(dev_root),
        "--proc-root",
        str(proc_root),
        "cdi",
        "generate",
        "--kind",
        "imex-channel",
    ).stdout
    spec = json.loads(out)
    assert spec["kind"] == "nvidia.com/imex-channel"
    names = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
    assert set(names) == {"0", "1", "all"}
    assert names["1"] == [
        {
            "path": "/dev/nvidia-caps-imex-channels/channel1",
            "hostPath": str(dev_root / "dev/nvidia-caps-imex-channels/channel1"),
            "type": "c",
            "major": IMEX_MAJOR,
            "minor": 1,
        }
    ]
    none = cli(
        *roots,
        "--dev-root",
        str(h100x4.dev_root),
        "--proc-root",
        str(h100x4.proc_root),
        "cdi",
        "generate",
        "--kind",
        "imex-channel",
        check=False,
    )
    assert none.returncode == 1 and "no IMEX channel nodes" in none.stderr
