"""nvct's labels against GPU feature discovery's, label by label, per simulated preset.

The expected sets are written here from GFD's rules (k8s-device-plugin ``internal/lm``:
nvml.go, mig-strategy.go, resource.go, imex.go, vgpu.go; ``internal/resource/nvml-mig-device.go``),
not from nvct's output: each ``gfd_*`` helper below is one of GFD's labelers. nvct's own
labels (``gpu.present``, ``gpu.models``, the family and compute capability of MIG resources)
are named in ``NVCT_ONLY`` and compared separately.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nvct.config import parse_config
from nvct.node.labels import node_labels, sanitise
from nvct.node.sharing import plan_sharing
from tests.cli.test_cli import cli, roots
from tests.node.test_labels import DRIVER_550, inventory

N = "nvidia.com/"
COMPUTE, VGA = "0x030200", "0x030000"
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
DRIVER_570 = {
    "cuda.driver-version.major": "570",
    "cuda.driver-version.minor": "86",
    "cuda.driver-version.revision": "15",
    "cuda.driver-version.full": "570.86.15",
    "cuda.driver.major": "570",
    "cuda.driver.minor": "86",
    "cuda.driver.rev": "15",
    "cuda.runtime-version.major": "12",
    "cuda.runtime-version.minor": "8",
    "cuda.runtime-version.full": "12.8",
    "cuda.runtime.major": "12",
    "cuda.runtime.minor": "8",
}


def gfd_node(
    *,
    mig_capable: bool,
    mode: str = "compute",
    mps: bool = False,
    vgpu_host: tuple[str, str] | None = None,
) -> dict[str, str]:
    """Machine type (unreadable: ``unknown``), MIG capability, sharing, GPU mode, vGPU
    (``vgpu_host``: the host's vGPU manager version and branch in a vGPU's config space)."""
    labels = {
        "gpu.machine": "unknown",
        "mig.capable": str(mig_capable).lower(),
        "mps.capable": str(mps).lower(),
        "gpu.mode": mode,
        "vgpu.present": str(vgpu_host is not None).lower(),
    }
    if vgpu_host is not None:
        labels["vgpu.host-driver-version"], labels["vgpu.host-driver-branch"] = vgpu_host
    return labels


def gfd_full(
    product: str, count: int, memory: int, fam: str, cc: str, replicas: int = 1, how: str = "none"
) -> dict[str, str]:
    """NewGPUResourceLabeler: product (``-SHARED`` when replicated), count, replicas, sharing
    strategy, memory, family and compute capability of ``nvidia.com/gpu``."""
    major, minor = cc.split(".")
    return {
        "gpu.product": product + ("-SHARED" if replicas > 1 else ""),
        "gpu.count": str(count),
        "gpu.replicas": str(replicas),
        "gpu.sharing-strategy": how,
        "gpu.memory": str(memory),
        "gpu.family": fam,
        "gpu.compute.major": major,
        "gpu.compute.minor": minor,
    }


# A100-80GB's profiles as nvidia-smi mig -lgip lists them: SMs, copy, decoder, encoder, JPEG,
# OFA engines, slices (what nvmlDeviceGetAttributes_v2 answers on the real GPU); the engines as
# NVIDIA's MIG user guide tables them for A100
# (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html).
A100_PROFILES = {
    "1g.10gb": (14, 1, 0, 0, 0, 0, 1, 9856),
    "2g.20gb": (28, 2, 1, 0, 0, 0, 2, 19968),
    "3g.40gb": (42, 3, 2, 0, 0, 0, 3, 40192),
    "4g.40gb": (56, 4, 2, 0, 0, 0, 4, 40192),
}
# H100 80GB HBM3's, as its nvidia-smi mig -lgip lists them (the guide above tables the engines:
# a JPEG engine with each NVDEC, no NVENC), with the memory NVML gives each MIG device.
H100_PROFILES = {
    "1g.10gb": (16, 1, 1, 0, 1, 0, 1, 9984),
    "2g.20gb": (32, 2, 2, 0, 2, 0, 2, 20096),
    "3g.40gb": (60, 3, 3, 0, 3, 0, 3, 40448),
}


def gfd_mig(
    resource: str,
    profile: str,
    count: int,
    model: str = A100,
    profiles: dict[str, tuple[int, ...]] = A100_PROFILES,
) -> dict[str, str]:
    """NewMIGResourceLabeler: product ``<model>-MIG-<profile>``, count, replicas, sharing and
    the MIG device's attributes (memory, SMs, slices, engines)."""
    sms, copy, dec, enc, jpeg, ofa, slices, memory = profiles[profile]
    values = {
        "product": f"{model}-MIG-{profile}",
        "count": count,
        "replicas": 1,
        "sharing-strategy": "none",
        "memory": memory,
        "multiprocessors": sms,
        "slices.gi": slices,
        "slices.ci": slices,
        "engines.copy": copy,
        "engines.decoder": dec,
        "engines.encoder": enc,
        "engines.jpeg": jpeg,
        "engines.ofa": ofa,
    }
    return {f"{resource}.{k}": str(v) for k, v in values.items()}


def nvct_only(labels: dict[str, str]) -> dict[str, str]:
    keys = {"gpu.present", "gpu.models"}
    return {
        k: v
        for k, v in labels.items()
        if k in keys or (k.startswith("mig-") and (".family" in k or ".compute." in k))
    }


def short(labels: dict[str, str]) -> dict[str, str]:
    return {k.removeprefix(N): v for k, v in labels.items()}


def compare(found: dict[str, str], expected: dict[str, str]) -> None:
    """Every GFD label with GFD's value, and nothing else but nvct's own labels."""
    found = short(found)
    ours = nvct_only(found)
    gfd = {k: v for k, v in found.items() if k not in ours}
    missing = {k: v for k, v in expected.items() if gfd.get(k) != v}
    extra = {k: v for k, v in gfd.items() if k not in expected}
    assert not missing and not extra, f"differs from GFD: want {missing}, not {extra}"
    assert ours.get("gpu.present") == "true"


def _plan(toml: str, preset: str, mig: str = "none"):  # type: ignore[no-untyped-def]
    text = f'[device-plugin]\nmig-strategy = "{mig}"\n{toml}'
    return plan_sharing(parse_config(text.encode(), source="t"), inventory(preset))


SLICED = '[[device-plugin.sharing.gpus]]\ndevices = ["all"]\nreplicas = 4\n'
MPS = SLICED + 'strategy = "mps"\n'

# (preset, MIG strategy, sharing rules) -> GFD's labels
CASES = {
    ("h100x4-550", "none", ""): {
        **DRIVER_550,
        **gfd_node(mig_capable=True),
        **gfd_full(H100, 4, 81559, "hopper", "9.0"),
    },
    # mig.strategy whenever the strategy is not none, even with no GPU in MIG mode
    ("h100x4-550", "mixed", ""): {
        **DRIVER_550,
        **gfd_node(mig_capable=True),
        "mig.strategy": "mixed",
        **gfd_full(H100, 4, 81559, "hopper", "9.0"),
    },
    ("h100x4-550", "none", SLICED): {
        **DRIVER_550,
        **gfd_node(mig_capable=True),
        **gfd_full(H100, 4, 81559, "hopper", "9.0", 4, "time-slicing"),
    },
    # mps.capable: sharing with MPS and no GPU in MIG mode (NVIDIA's MPS DaemonSet selector)
    ("h100x4-550", "none", MPS): {
        **DRIVER_550,
        **gfd_node(mig_capable=True, mps=True),
        **gfd_full(H100, 4, 81559, "hopper", "9.0", 4, "mps"),
    },
    ("a100x8-570-mig", "none", ""): {
        **DRIVER_570,
        **gfd_node(mig_capable=True),
        **gfd_full(A100, 8, 81920, "ampere", "8.0"),
    },
    # MPS asked for, but GPUs 0 and 1 are in MIG mode: not MPS-capable
    ("a100x8-570-mig", "none", MPS.replace('"all"', '"2", "3"')): {
        **DRIVER_570,
        **gfd_node(mig_capable=True, mps=False),
        **gfd_full(A100, 8, 81920, "ampere", "8.0", 4, "mps"),
    },
    # single needs every GPU in MIG mode with one profile: GFD's invalid labels
    ("a100x8-570-mig", "single", ""): {
        **DRIVER_570,
        **gfd_node(mig_capable=True),
        "mig.strategy": "single",
        **gfd_full(A100, 8, 81920, "ampere", "8.0"),
        "gpu.product": f"{A100}-MIG-INVALID",
        "gpu.count": "0",
        "gpu.replicas": "0",
        "gpu.sharing-strategy": "",
        "gpu.memory": "0",
    },
    # mixed: gpu.count counts every A100, the two in MIG mode too
    ("a100x8-570-mig", "mixed", ""): {
        **DRIVER_570,
        **gfd_node(mig_capable=True),
        "mig.strategy": "mixed",
        **gfd_full(A100, 8, 81920, "ampere", "8.0"),
        **gfd_mig("mig-1g.10gb", "1g.10gb", 1),
        **gfd_mig("mig-2g.20gb", "2g.20gb", 1),
        **gfd_mig("mig-3g.40gb", "3g.40gb", 2),
        **gfd_mig("mig-4g.40gb", "4g.40gb", 1),
    },
}


@pytest.mark.parametrize(("preset", "strategy", "rules"), list(CASES))
def test_labels_match_gfds_for_each_recorded_preset(preset: str, strategy: str, rules: str) -> None:
    gpus = inventory(preset).gpus
    labels = node_labels(
        inventory(preset),
        mig_strategy=strategy,
        plan=_plan(rules, preset, strategy),
        pci_classes=[COMPUTE] * len(gpus),
    )
    compare(labels, CASES[(preset, strategy, rules)])


def test_single_labels_carry_the_mig_devices_attributes() -> None:
    """Valid single: ``nvidia.com/gpu`` is the MIG profile, with its attributes (GFD's
    NewMIGResourceLabeler under the name nvidia.com/gpu), family from the full GPUs."""
    inv = inventory("a100x8-570-mig")
    first = inv.gpus[0]
    same = dataclasses.replace(first, migs=tuple(m for m in first.migs if m.profile == "2g.20gb"))
    alike = dataclasses.replace(inv, gpus=(same, dataclasses.replace(same, index=1)))
    labels = node_labels(alike, mig_strategy="single", pci_classes=[COMPUTE, COMPUTE])
    mig = {
        k.replace("mig-2g.20gb.", "gpu."): v
        for k, v in gfd_mig("mig-2g.20gb", "2g.20gb", 2).items()
    }
    compare(
        labels,
        {
            **DRIVER_570,
            **gfd_node(mig_capable=True),
            "mig.strategy": "single",
            **gfd_full(A100, 2, 81920, "ampere", "8.0"),
            **mig,
        },
    )


@pytest.mark.parametrize("strategy", ["none", "mixed"])
def test_a_model_only_in_mig_mode_has_no_replicas(strategy: str) -> None:
    """GFD's NewGPUResourceLabelerWithoutSharing for MIG-enabled GPUs: replicas 0, whatever
    the sharing rules say; counted all the same."""
    inv = inventory("a100x8-570-mig")
    two = dataclasses.replace(inv, gpus=inv.gpus[:2])
    labels = node_labels(two, mig_strategy=strategy, sharing="time-slicing", replicas={"gpu": 4})
    found = short(labels)
    assert (found["gpu.replicas"], found["gpu.sharing-strategy"]) == ("0", "none")
    assert (found["gpu.count"], found["gpu.product"]) == ("2", A100)
    assert found["mps.capable"] == "false"


@pytest.mark.parametrize(
    ("classes", "mode"),
    [([COMPUTE] * 2, "compute"), ([VGA, VGA], "graphics"), ([], "unknown"),
     (["0x038000"], "unknown"), ([COMPUTE, VGA], "compute")],  # GFD keeps the first
)  # fmt: skip
def test_gpu_mode_follows_the_pci_class(classes: list[str], mode: str) -> None:
    labels = node_labels(inventory("h100x4-550"), pci_classes=classes)
    assert labels[f"{N}gpu.mode"] == mode
    assert f"{N}gpu.mode" in labels and not [
        k for k in labels if k.endswith(".mode") and "gpu.mode" not in k
    ]


def test_mig_capability_comes_from_nvml_not_the_name() -> None:
    """An unknown name NVML calls MIG-capable is; an H100 whose NVML says no is not."""
    inv = inventory("h100x4-550")
    renamed = [
        dataclasses.replace(g, name="NVIDIA RTX PRO 6000 Blackwell Server") for g in inv.gpus
    ]
    assert node_labels(dataclasses.replace(inv, gpus=tuple(renamed)))[f"{N}mig.capable"] == "true"
    plain = [dataclasses.replace(g, mig_capable=False) for g in inv.gpus]
    assert node_labels(dataclasses.replace(inv, gpus=tuple(plain)))[f"{N}mig.capable"] == "false"


def test_clique_from_nvml() -> None:
    inv = inventory("h100x4-550")
    clique = "7a0e3b4c-2d35-4c6e-9a9b-4d1f0e6f2a11.32766"
    guest = [dataclasses.replace(g, fabric_clique=clique) for g in inv.gpus]
    labels = node_labels(dataclasses.replace(inv, gpus=tuple(guest)))
    assert labels[f"{N}gpu.clique"] == clique
    split = [
        *guest[:2],
        *(dataclasses.replace(g, fabric_clique=clique[:-1] + "7") for g in guest[2:]),
    ]
    assert f"{N}gpu.clique" not in node_labels(dataclasses.replace(inv, gpus=tuple(split)))


def test_driver_version_x_y_and_long_values() -> None:
    inv = dataclasses.replace(inventory("h100x4-550"), driver_version="560.28")
    labels = short(node_labels(inv))
    assert labels["cuda.driver-version.full"] == "560.28"
    assert (labels["cuda.driver-version.minor"], labels["cuda.driver-version.revision"]) == (
        "28",
        "",
    )
    long = "NVIDIA " + "X" * 50 + " ---- Y"
    value = sanitise(long, "-SHARED")
    assert len(value) <= 63 and value.endswith("-SHARED") and value[0].isalnum()
    assert sanitise("x" * 62 + "-.y") == "x" * 62  # cut at 63, then no trailing "-"
    assert sanitise("  (NVIDIA)  A  ") == "NVIDIA-A"


def _with_sysfs(sim, tmp_path: Path, mig: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The CLI's options on ``sim`` with its sysfs (PCI class, config space) and ``mig``."""
    options = roots(sim, tmp_path)
    config = Path(options[options.index("--config") + 1])
    config.write_text(
        config.read_text()
        + f"[device-plugin]\nmig-strategy = '{mig}'\nsysfs-root = '{sim.sys_root}'\n"
    )
    return options


# Presets discovered from their simulated driver (root, gcc): gpu.mode from the sysfs PCI class
# nvct reads as GFD does, everything else from the simulated NVML.
LIVE = {
    "mixed-ecc-x3": {  # two RTX 4090 (VGA) and an L40S (3D, first): GFD keeps the first class
        **gfd_node(mig_capable=False, mode="compute"),
        **gfd_full("NVIDIA-GeForce-RTX-4090", 3, 24564, "ada-lovelace", "8.9"),
    },
    "l40sx8-pcie": {
        **gfd_node(mig_capable=False),
        **gfd_full("NVIDIA-L40S", 8, 46068, "ada-lovelace", "8.9"),
    },
    "h100x8-nvswitch": {  # NVSwitch, but no NVLink fabric registration: no gpu.clique
        **gfd_node(mig_capable=True),
        **gfd_full(H100, 8, 81559, "hopper", "9.0"),
    },
    "h100pcie-x8-nvlink-pairs": {
        **gfd_node(mig_capable=True),
        **gfd_full("NVIDIA-H100-PCIe", 8, 81559, "hopper", "9.0"),
    },
    "t4x1-535": {
        **gfd_node(mig_capable=False),
        **gfd_full("Tesla-T4", 1, 15360, "turing", "7.5"),
    },
    "a100x8-570-mig": {
        **DRIVER_570,
        **gfd_node(mig_capable=True),
        "mig.strategy": "mixed",
        **gfd_full(A100, 8, 81920, "ampere", "8.0"),
        **gfd_mig("mig-1g.10gb", "1g.10gb", 1),
        **gfd_mig("mig-2g.20gb", "2g.20gb", 1),
        **gfd_mig("mig-3g.40gb", "3g.40gb", 2),
        **gfd_mig("mig-4g.40gb", "4g.40gb", 1),
    },
    "h100x2-550-mig": {  # GPU 0 in MIG mode: one 3g.40gb, one 2g.20gb, one 1g.10gb
        **gfd_node(mig_capable=True),
        "mig.strategy": "mixed",
        **gfd_full(H100, 2, 81559, "hopper", "9.0"),
        **gfd_mig("mig-1g.10gb", "1g.10gb", 1, H100, H100_PROFILES),
        **gfd_mig("mig-2g.20gb", "2g.20gb", 1, H100, H100_PROFILES),
        **gfd_mig("mig-3g.40gb", "3g.40gb", 1, H100, H100_PROFILES),
    },
    # a VM given an L40S-24Q (a VGA function): the vGPU capability in its config space names
    # the host's vGPU manager; NVML answers no MIG mode on Ada
    "l40s-vgpu-guest": {
        **gfd_node(mig_capable=False, mode="graphics", vgpu_host=("535.161.05", "r535_00")),
        **gfd_full("NVIDIA-L40S-24Q", 1, 24576, "ada-lovelace", "8.9"),
    },
}


@pytest.mark.root
@pytest.mark.parametrize("preset", list(LIVE))
def test_the_cli_labels_match_gfds_on_the_simulated_driver(
    sim_factory, preset: str, tmp_path: Path
) -> None:
    sim = sim_factory(preset)
    options = _with_sysfs(sim, tmp_path, "mixed" if preset.endswith("-mig") else "none")
    out = cli(*options, "--no-cache", "labels", "--no-timestamp", "--sysfs-root", str(tmp_path))
    found = dict(line.split("=", 1) for line in out.stdout.splitlines())
    expected = LIVE[preset]
    driver = {k: v for k, v in short(found).items() if k.startswith("cuda.")}
    compare(found, {**expected, **driver} if "cuda.driver.major" not in expected else expected)


CLUSTER = "5f2a9c1e-0b7d-4e38-a6c4-91d2e3f4a5b6"


@pytest.mark.root
def test_a_fabric_attached_vgpu_guest_with_a_new_gpu_name(tmp_path: Path) -> None:
    """From the simulated NVML through discovery: a GPU no name pattern knows is MIG-capable
    because NVML answers its MIG mode, the fabric's cluster and clique give gpu.clique (GFD's
    ``<clusterUUID>.<cliqueID>``), and a vGPU guest says vgpu.present and its host's driver."""
    from integration.simdriver import cached_driver, preset
    from tests.conftest import SIM_CACHE, _need_sim

    _need_sim()
    base = preset("h100x4-550")
    gpus = tuple(
        dataclasses.replace(
            g,
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            compute_capability=(12, 0),
            virtualization_mode=2,
            vgpu_host=("550.54.16", "r550_00"),
            fabric=(CLUSTER, 32766),
        )
        for g in base.gpus
    )
    sim = cached_driver(dataclasses.replace(base, gpus=gpus), SIM_CACHE)
    options = _with_sysfs(sim, tmp_path, "none")
    lines = cli(*options, "--no-cache", "labels", "--no-timestamp").stdout.splitlines()
    found = short(dict(line.split("=", 1) for line in lines))
    assert found["gpu.clique"] == f"{CLUSTER}.32766"
    assert (found["vgpu.present"], found["mig.capable"]) == ("true", "true")
    assert (found["vgpu.host-driver-version"], found["vgpu.host-driver-branch"]) == (
        "550.54.16",
        "r550_00",
    )
    assert found["gpu.product"] == "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
    assert found["gpu.family"] == "blackwell"
    split = (*gpus[:3], dataclasses.replace(gpus[3], fabric=(CLUSTER, 7)))
    other = cached_driver(dataclasses.replace(base, gpus=split), SIM_CACHE)
    lines = cli(*_with_sysfs(other, tmp_path, "none"), "--no-cache", "labels").stdout.splitlines()
    assert not [ln for ln in lines if "gpu.clique" in ln]  # GFD: two cliques, no label
