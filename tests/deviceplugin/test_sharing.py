"""GPU sharing: the config's validation, the per-GPU plan, replica IDs, what Allocate answers
for replicas, the replicas' preferred allocation and their health."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvct.base.errors import ConfigError
from nvct.cdi.names import PLUGIN_KIND
from nvct.config import Config, parse_config
from nvct.deviceplugin.allocate import AllocationError, Answer, SharingPolicy, allocate
from nvct.deviceplugin.preferred import preferred
from nvct.host.inventory import Inventory
from nvct.node.devices import PluginDevice, replica_id, resources
from nvct.node.health.state import Health
from nvct.node.mps import MpsPaths, memory_limit_is
from nvct.node.sharing import SharingConfigError, mps_max_replicas, plan_sharing

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SOURCE = "/etc/nvct/config.toml"


def inventory(name: str) -> Inventory:
    return Inventory.from_dict(json.loads((FIXTURES / f"{name}.json").read_text()))


H100 = inventory("h100x4-550")
A100 = inventory("a100x8-570-mig")
UUIDS = [g.uuid for g in H100.gpus]


def config(sharing: str, plugin: str = "") -> Config:
    return parse_config(f"[device-plugin]\n{plugin}\n{sharing}".encode(), source=SOURCE)


def rule(devices: str, replicas: int = 4, extra: str = "") -> str:
    return f"[[device-plugin.sharing.gpus]]\ndevices = {devices}\nreplicas = {replicas}\n{extra}\n"


# --- config --------------------------------------------------------------------------------


def test_a_rule_is_read_with_its_defaults() -> None:
    c = config("[device-plugin.sharing]\nrename-by-default = true\n" + rule('["0"]'))
    assert c.device_plugin.sharing.rename_by_default is True
    (only,) = c.device_plugin.sharing.gpus
    assert (only.devices, only.replicas, only.strategy, only.rename) == (
        ("0",),
        4,
        "time-slicing",
        None,
    )
    assert (
        Config().device_plugin.sharing.gpus == ()
        and Config().device_plugin.sharing.mps_root == "/run/nvct/mps"
    )


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (rule('["0"]', 1), r"'device-plugin.sharing.gpus.0.replicas'.*expected an integer >= 2"),
        (rule("[]"), r"device-plugin.sharing.gpus.0.devices"),
        (rule('["0"]', 2, 'strategy = "slicing"'), r"one of time-slicing, mps"),
        (rule('["0"]', 2, "cores = 3"), r"unknown key \[device-plugin.sharing.gpus.0\] 'cores'"),
        ("[[device-plugin.sharing.gpus]]\ndevices = ['0']\n", r"misses 'replicas'.*add replicas"),
        (
            rule('["0"]', 2, 'strategy = "mps"\nactive-thread-percentage = 150'),
            r"active-thread-percentage.*<= 100",
        ),
        ("[device-plugin.sharing]\nreplicas-of-one-gpu = 'ok'", r"one of error, warn"),
        ("[device-plugin.sharing]\nmps-root = 'run/mps'", r"mps-root.*absolute path"),
    ],
)
def test_bad_sharing_config_is_one_line_naming_the_key(toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        config(toml)
    assert err.value.one_line().startswith(f"{SOURCE}: ") and "\n" not in err.value.one_line()


# --- the plan ------------------------------------------------------------------------------


def test_gpus_are_selected_per_gpu_by_index_uuid_or_product_name() -> None:
    c = config(
        rule('["0"]', 4)
        + rule(f'["{UUIDS[1]}"]', 2, 'strategy = "mps"')
        + rule('["nvidia h100 80gb hbm3"]', 3)  # the rest, by name (case-insensitive)
    )
    with pytest.raises(SharingConfigError, match=r"rule 3 .*GPU 0 .*matched by rule 1 too"):
        plan_sharing(c, H100)
    c = config(rule('["0"]', 4) + rule(f'["{UUIDS[1]}"]', 2, 'strategy = "mps"'))
    plan = plan_sharing(c, H100)
    assert {u: (s.strategy, s.replicas) for u, s in plan.shares.items()} == {
        UUIDS[0]: ("time-slicing", 4),
        UUIDS[1]: ("mps", 2),
    }
    mps = plan.shares[UUIDS[1]]
    assert (mps.pinned_memory_mib, mps.active_thread_percentage) == (81559 // 2, 50)
    assert plan.strategy_of(UUIDS[2]) == "none"
    assert any("beside whole GPUs" in w for w in plan.warnings)  # not renamed: said so
    assert any("MPS GPUs share the resource nvidia.com/gpu:" in w for w in plan.warnings)
    apart = rule('["0"]', 4, "rename = true") + rule(
        '["1"]', 2, 'strategy = "mps"\nresource = "nvidia.com/gpu.mps"'
    )
    assert plan_sharing(config(apart + rule('["2", "3"]', 2)), H100).warnings == ()


def test_all_and_names_match_every_gpu_and_a_selector_matching_nothing_warns() -> None:
    plan = plan_sharing(config(rule('["all", "7", "Tesla T4"]', 2)), H100)
    assert set(plan.shares) == set(UUIDS)
    assert [w for w in plan.warnings if "matches no GPU" in w] == [
        w for w in plan.warnings if "'7'" in w or "'Tesla T4'" in w
    ]
    assert len([w for w in plan.warnings if "matches no GPU" in w]) == 2


@pytest.mark.parametrize(
    ("toml", "plugin", "message"),
    [
        (rule('["0"]', 49, 'strategy = "mps"'), "", r"49 MPS replicas.*at most 48"),
        (
            rule('["0"]', 2, 'strategy = "mps"\npinned-memory-mib = 90000'),
            "",
            r"pinned-memory-mib 90000 exceeds.*81559",
        ),
        (rule('["0"]', 2, "pinned-memory-mib = 10"), "", r"are MPS limits.*strategy = \"mps\""),
    ],
)
def test_semantic_errors_name_the_rule_and_the_fix(toml: str, plugin: str, message: str) -> None:
    with pytest.raises(SharingConfigError, match=message) as err:
        plan_sharing(config(toml, plugin), H100)
    line = err.value.one_line()
    assert "rule 1 (devices ['0'])" in line and "(fix: " in line and "\n" not in line


def test_mig_devices_are_time_sliced_under_mixed_never_mps() -> None:
    mixed = 'mig-strategy = "mixed"'
    plan = plan_sharing(config(rule('["0"]', 2), mixed), A100)  # GPU 0's MIG devices
    assert sorted(s.device.index for s in plan.shares.values()) == ["0:0", "0:1", "0:2"]
    with pytest.raises(SharingConfigError, match=r"mps with mig-strategy mixed.*fix: "):
        plan_sharing(config(rule('["2"]', 2, 'strategy = "mps"'), mixed), A100)
    single = 'mig-strategy = "single"'
    with pytest.raises(SharingConfigError, match=r"mps on MIG device 0:0.*whole GPUs only"):
        plan_sharing(config(rule('["0"]', 2, 'strategy = "mps"'), single), A100)
    assert plan_sharing(config(rule('["0"]', 2)), A100).shares == {}  # none: not advertised


def test_mps_replica_limit_follows_compute_capability() -> None:
    assert [mps_max_replicas(c) for c in ("7.0", "7.5", "9.0", "x")] == [16, 48, 48, 16]


# --- replicas advertised -------------------------------------------------------------------


def advertised(c: Config, inv: Inventory = H100) -> dict[str, list[str]]:
    found = resources(
        inv,
        mig_strategy=c.device_plugin.mig_strategy,
        sysfs_root=Path("/nonexistent"),
        plan=plan_sharing(c, inv),
    )
    return {r.name: [d.id for d in r.devices] for r in found}


def test_gpu_0_sliced_others_whole_and_the_renamed_variant() -> None:
    sliced = [f"{UUIDS[0]}::{n}" for n in range(4)]
    assert advertised(config(rule('["0"]'))) == {"nvidia.com/gpu": [*sliced, *UUIDS[1:]]}
    renamed = config("[device-plugin.sharing]\nrename-by-default = true\n" + rule('["0"]'))
    assert advertised(renamed) == {"nvidia.com/gpu": UUIDS[1:], "nvidia.com/gpu.shared": sliced}
    assert replica_id(UUIDS[0], 3) == f"{UUIDS[0]}::3"


def test_a_rule_can_name_its_own_resource_for_whole_gpus_only() -> None:
    mps = 'strategy = "mps"\nresource = "nvidia.com/gpu.mps"'
    c = config(
        "[device-plugin.sharing]\nrename-by-default = true\n"
        + rule('["0"]')
        + rule('["1"]', 2, mps)
    )
    assert advertised(c) == {
        "nvidia.com/gpu": UUIDS[2:],
        "nvidia.com/gpu.shared": [f"{UUIDS[0]}::{n}" for n in range(4)],
        "nvidia.com/gpu.mps": [f"{UUIDS[1]}::0", f"{UUIDS[1]}::1"],
    }
    with pytest.raises(ConfigError, match=r"gpus.0.resource.*a resource name such as"):
        config(rule('["0"]', 2, 'resource = "example.com/gpu"'))
    with pytest.raises(SharingConfigError, match=r"looks like a MIG profile's resource"):
        plan_sharing(config(rule('["0"]', 2, 'resource = "nvidia.com/mig-x"')), H100)
    mixed = config(rule('["0:1"]', 2, 'resource = "nvidia.com/gpu.x"'), 'mig-strategy = "mixed"')
    with pytest.raises(SharingConfigError, match=r"MIG devices keep their profile's resource"):
        plan_sharing(mixed, A100)


def test_a_rule_can_rename_alone_and_mig_replicas_keep_their_profile() -> None:
    c = config(rule('["1"]', 2, "rename = true"))
    assert advertised(c)["nvidia.com/gpu.shared"] == [f"{UUIDS[1]}::0", f"{UUIDS[1]}::1"]
    c = config(rule('["0:2"]', 3, "rename = true"), 'mig-strategy = "mixed"')
    mig = A100.gpus[0].migs[2].uuid
    assert advertised(c, A100)["nvidia.com/mig-1g.10gb.shared"] == [f"{mig}::{n}" for n in range(3)]


# --- Allocate ------------------------------------------------------------------------------


def device(uuid: str, gpu: int, replica: int = -1, sharing: str = "none") -> PluginDevice:
    id_ = replica_id(uuid, replica) if replica >= 0 else uuid
    return PluginDevice(
        id_, uuid, str(gpu), gpu, f"0000:{gpu:02x}:00.0", None, gpu, replica, sharing
    )


SLICED = {
    d.id: d for g in (0, 1) for d in (device(UUIDS[g], g, n, "time-slicing") for n in range(4))
}
MPS_GPU = {d.id: d for d in (device(UUIDS[2], 2, n, "mps") for n in range(2))}


def answer(ids: list[str], devices: dict[str, PluginDevice], **policy: object) -> Answer:
    return allocate(
        ids,
        devices,
        {},
        resource="nvidia.com/gpu.shared",
        strategies=("envvar", "cdi-cri"),
        id_strategy="uuid",
        cdi_names={f"{PLUGIN_KIND}={u}" for u in UUIDS},
        sharing=SharingPolicy(**policy),  # type: ignore[arg-type]
    )


def test_replicas_are_stripped_to_their_gpus() -> None:
    got = answer([f"{UUIDS[1]}::2", f"{UUIDS[0]}::0"], SLICED)
    assert got.envs == {"NVIDIA_VISIBLE_DEVICES": f"{UUIDS[1]},{UUIDS[0]}"}
    assert got.cdi_devices == [f"{PLUGIN_KIND}={UUIDS[1]}", f"{PLUGIN_KIND}={UUIDS[0]}"]


def test_two_replicas_of_one_gpu_are_refused_or_told() -> None:
    two = [f"{UUIDS[0]}::0", f"{UUIDS[0]}::3"]
    with pytest.raises(AllocationError, match=rf"2 replicas of one GPU \({UUIDS[0]}\)") as err:
        answer(two, SLICED)
    assert 'replicas-of-one-gpu = "warn"' in err.value.one_line()
    warned = answer(two, SLICED, replicas_of_one_gpu="warn")
    assert warned.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[0]  # de-duplicated
    assert warned.envs["NVCT_SHARED_GPU_REPLICAS"] == f"{UUIDS[0]}=2"
    assert warned.cdi_devices == [f"{PLUGIN_KIND}={UUIDS[0]}"]
    assert warned.warnings and UUIDS[0] in warned.warnings[0]


def test_requests_greater_than_one_are_refused_when_configured_and_always_on_mps() -> None:
    two = [f"{UUIDS[0]}::0", f"{UUIDS[1]}::0"]
    assert answer(two, SLICED).envs["NVIDIA_VISIBLE_DEVICES"] == f"{UUIDS[0]},{UUIDS[1]}"
    with pytest.raises(AllocationError, match=r"2 nvidia.com/gpu.shared devices .*one per"):
        answer(two, SLICED, fail_greater_than_one=True)
    with pytest.raises(AllocationError, match=r"\(MPS GPUs\)"):
        answer([f"{UUIDS[2]}::0", f"{UUIDS[2]}::1"], MPS_GPU, replicas_of_one_gpu="warn")


def test_an_mps_replica_gets_the_pipe_directory_and_shared_memory_writable() -> None:
    got = answer([f"{UUIDS[2]}::1"], MPS_GPU, mps_root="/run/x")
    assert got.envs == {
        "NVIDIA_VISIBLE_DEVICES": UUIDS[2],
        "CUDA_MPS_PIPE_DIRECTORY": f"/mps/{UUIDS[2]}/pipe",
    }
    assert got.writable == [
        (f"/run/x/{UUIDS[2]}/pipe", f"/mps/{UUIDS[2]}/pipe"),
        (f"/run/x/{UUIDS[2]}/shm", "/dev/shm"),
    ]
    assert got.mounts == []
    paths = MpsPaths("/run/x/", UUIDS[2])
    assert (paths.pipe, paths.log) == (f"/run/x/{UUIDS[2]}/pipe", f"/run/x/{UUIDS[2]}/log")


@pytest.mark.parametrize(
    ("answer_", "mib", "same"),
    [
        ("40960M", 40960, True),
        ("40G", 40960, True),
        ("0", 0, True),
        ("39G", 40779, True),  # driver 580.159.04 on an H100, set to 40779M: 39.8 GiB
        ("39G", 40960, False),  # 40 GiB would be printed 40G
        ("39G", 39935, False),
        ("1000M", 1000, True),
        ("1000M", 1001, False),
        ("39.5G", 40448, True),
        ("many", 1, False),
    ],
)
def test_a_pinned_memory_answer_is_the_limit_in_the_daemons_unit(
    answer_: str, mib: int, same: bool
) -> None:
    assert memory_limit_is(answer_, mib) is same


# --- preferred allocation ------------------------------------------------------------------


def test_replicas_spread_over_gpus_fewest_allocated_first() -> None:
    devices = list(SLICED.values())
    totals = {UUIDS[0]: 4, UUIDS[1]: 4}
    # GPU 0 has one replica allocated already (3 available): GPU 1 first, then alternate
    available = [d for d in devices if d.id != f"{UUIDS[0]}::0"]
    assert preferred(available, [], 1, replicas=totals) == [f"{UUIDS[1]}::0"]
    assert preferred(available, [], 3, replicas=totals) == [
        f"{UUIDS[1]}::0",
        f"{UUIDS[0]}::1",
        f"{UUIDS[1]}::1",
    ]
    # must_include is kept and counts: the next replica comes from the other GPU
    must = [f"{UUIDS[1]}::3"]
    assert preferred(available, must, 2, replicas=totals) == [must[0], f"{UUIDS[0]}::1"]
    shuffled = list(reversed(available))
    assert preferred(shuffled, [], 3, replicas=totals) == preferred(
        available, [], 3, replicas=totals
    )


# --- health --------------------------------------------------------------------------------


def test_a_blocked_device_stays_unhealthy_until_unblocked_whatever_nvml_says() -> None:
    health = Health(["a", "b"], quiet=30, ignored_xids=())
    assert health.block("a", "MPS control daemon died").health == "Unhealthy"  # type: ignore[union-attr]
    assert health.answered("a", True, "", 100.0) is None  # NVML fine: still blocked
    assert health.tick(1000.0) == []
    back = health.unblock("a", "restarted", 1000.0)
    assert back is not None and (back.health, back.reason) == ("Healthy", "restarted")
    health.xid("b", 94, 10.0)  # restart the application: over after the quiet period
    health.block("b", "daemon died")
    assert health.unblock("b", "restarted", 20.0) is None  # the XID's quiet period still runs
    assert health.tick(41.0)[0].health == "Healthy"
