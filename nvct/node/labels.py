"""Node labels for Kubernetes, as NVIDIA's GPU feature discovery names them, from the inventory.

The scheduler picks nodes by these (``nvidia.com/gpu.product``, ``gpu.memory``,
``gpu.family``, ``cuda.driver-version.*``, ``mig.*``...), so the keys and value rules are
NVIDIA's (GFD, ``internal/lm``): existing node selectors and affinities keep working.

A node with two GPU models gets a documented, deterministic answer instead of whichever GPU an
enumeration returns first: the model the node has most of describes the node (ties: the model
of the lowest-index GPU), ``gpu.count`` counts every GPU, and ``nvidia.com/gpu.models`` (nvct's
own label) says how many models there are, so a selector can avoid mixed nodes.

Sharing comes from the device plugin's plan (``nvct.node.sharing``), which is per GPU:
``<resource>.replicas`` is the most replicas any GPU shared inside that resource has,
``<resource>.sharing-strategy`` their strategy (``mixed`` where time-slicing and MPS GPUs share
one resource: nvct's value). GPUs renamed (``<resource>.shared``, or a rule's ``resource``) get
a label group of their own (``.count`` = how many GPUs; product without ``-SHARED``, as GFD
writes a renamed resource); ``nvidia.com/gpu.count`` stays the count of physical GPUs, as GFD's.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

from nvct.config.kubernetes import MIG_STRATEGIES
from nvct.host.inventory import Gpu, Inventory, MigDevice
from nvct.node.sharing import SharingPlan, mig_resource, single_fits
from nvct.node.vgpu import VgpuDevices

PREFIX = "nvidia.com/"
# GFD's family by CUDA compute capability (major, or (major, minor) where it splits).
_FAMILIES = (
    ((1, 0), "tesla"),
    ((2, 0), "fermi"),
    ((3, 0), "kepler"),
    ((5, 0), "maxwell"),
    ((6, 0), "pascal"),
    ((7, 0), "volta"),
    ((7, 5), "turing"),
    ((8, 0), "ampere"),
    ((8, 9), "ada-lovelace"),
    ((9, 0), "hopper"),
    ((10, 0), "blackwell"),
    ((11, 0), "undefined"),
    ((12, 0), "blackwell"),
    ((13, 0), "rubin"),
    ((14, 0), "undefined"),
)
VGPU_GUEST = 2  # NVML_GPU_VIRTUALIZATION_MODE_VGPU: a VM given a vGPU
LABEL_VALUE_MAX = 63  # Kubernetes: at most 63 characters, alphanumeric at both ends
# GFD's gpu.mode by the first GPU's PCI class (sysfs ``class``; lm/nvml.go newGPUModeLabeler).
_MODES = {"0x030000": "graphics", "0x030200": "compute"}


def sanitise(name: str, suffix: str = "") -> str:
    """A product name as a label value: GFD keeps ``A-Za-z0-9-_.``, spaces become ``-``; then
    cut to fit 63 characters with ``suffix`` and trimmed to begin and end alphanumeric."""
    kept = re.sub(r"[^A-Za-z0-9._ -]", "", name)
    text = "-".join(kept.split())[: LABEL_VALUE_MAX - len(suffix)]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", text) + suffix


def gpu_mode(pci_classes: Sequence[str]) -> str:
    """GFD's ``gpu.mode``: the first GPU's PCI class (GFD stops at the first that differs and
    keeps the first), ``unknown`` when unreadable or neither VGA nor 3D controller."""
    return _MODES.get(pci_classes[0].strip().lower(), "unknown") if pci_classes else "unknown"


def family(compute: str) -> str:
    """GFD's family name of a compute capability (``"9.0"`` -> ``hopper``)."""
    major, _, minor = compute.partition(".")
    try:
        key = (int(major), int(minor or 0))
    except ValueError:
        return "undefined"
    found = "undefined"
    for bound, name in _FAMILIES:
        if key >= bound:
            found = name
    return found


def node_labels(
    inventory: Inventory,
    *,
    mig_strategy: str = "none",
    replicas: Mapping[str, int] | None = None,
    sharing: str | Mapping[str, str] = "none",
    plan: SharingPlan | None = None,
    machine: str = "",
    pci_classes: Sequence[str] = (),
    vgpu: VgpuDevices | None = None,
    timestamp: int | None = None,
) -> dict[str, str]:
    """The label set of a node (keys without values are never emitted).

    ``replicas`` maps a resource (``gpu``, ``mig-1g.10gb``) to its replicas per device
    (time-slicing or MPS, ``sharing``: one strategy, or one per resource); ``plan`` (the device
    plugin's sharing plan) replaces both; ``machine`` is the DMI product name (``unknown``
    when unreadable, as GFD); ``pci_classes`` the GPUs' sysfs PCI classes (``0x030200``);
    ``vgpu`` the vGPUs found in the PCI config space (``nvct.node.vgpu.scan``; None where it
    was not read: ``vgpu.present`` then comes from NVML's virtualization mode).
    """
    if mig_strategy not in MIG_STRATEGIES:
        raise ValueError(f"MIG strategy {mig_strategy!r}: use one of {', '.join(MIG_STRATEGIES)}")
    labels = _driver_labels(inventory)
    if timestamp is not None:
        labels[f"{PREFIX}gfd.timestamp"] = str(timestamp)
    gpus = inventory.gpus
    if not gpus:
        return labels
    replicas = dict(replicas or {})
    # The GPU operator's label, which the RuntimeClass and the DaemonSets select nodes by.
    labels[f"{PREFIX}gpu.present"] = "true"
    renamed: dict[str, tuple[str, int]] = {}
    if plan is not None:
        replicas, sharing, renamed = _from_plan(plan)
    model = _majority(gpus)
    labels.update(_node_wide(gpus, sharing, machine, pci_classes))
    labels.update(_vgpu(gpus, vgpu))
    migs = [m for g in gpus if g.mig_enabled for m in g.migs]
    if mig_strategy != "none":
        labels[f"{PREFIX}mig.strategy"] = mig_strategy
    described: dict[str, tuple[str, int]] = {}  # resource -> (product, memory)
    if mig_strategy == "single" and migs:
        # single: every GPU in MIG mode with one profile, advertised as nvidia.com/gpu. Any
        # other layout cannot be served so: NVIDIA's "-MIG-INVALID" with no devices.
        profiles = sorted({m.profile for m in migs})
        valid = single_fits(inventory)
        product = sanitise(model.name, f"-MIG-{profiles[0] if valid else 'INVALID'}")
        count, memory = (len(migs), migs[0].memory_mib) if valid else (0, 0)
        labels.update(_resource("gpu", product, count, memory, model, replicas, sharing))
        if valid:
            labels.update(_mig_attributes("gpu", migs[0]))
        else:  # GFD's invalid-single labels: nothing to share
            labels[f"{PREFIX}gpu.replicas"] = "0"
            labels[f"{PREFIX}gpu.sharing-strategy"] = ""
        described["gpu"] = (product, memory)
    else:
        # GFD counts every GPU of the model, MIG-enabled ones included, under any strategy.
        product, memory = sanitise(model.name), model.memory_mib
        labels.update(_resource("gpu", product, len(gpus), memory, model, replicas, sharing))
        if all(g.mig_enabled for g in gpus if g.name == model.name):
            # GFD labels a model it has only in MIG mode without sharing: 0 replicas
            labels.update({f"{PREFIX}gpu.replicas": "0", f"{PREFIX}gpu.sharing-strategy": "none"})
            labels[f"{PREFIX}gpu.product"] = product
        described["gpu"] = (product, memory)
    if mig_strategy == "mixed":
        for profile in sorted({m.profile for m in migs}):
            of = [m for m in migs if m.profile == profile]
            product = sanitise(model.name, f"-MIG-{profile}")
            name = mig_resource(profile)
            labels.update(
                _resource(name, product, len(of), of[0].memory_mib, model, replicas, sharing)
            )
            labels.update(_mig_attributes(name, of[0]))
            described[name] = (product, of[0].memory_mib)
    for name, (base, count) in sorted(renamed.items()):
        if base in described:
            product, memory = described[base]
            labels.update(_resource(name, product, count, memory, model, replicas, sharing, False))
    return labels


def _node_wide(
    gpus: tuple[Gpu, ...],
    sharing: str | Mapping[str, str],
    machine: str,
    pci_classes: Sequence[str],
) -> dict[str, str]:
    """The labels about the node rather than one resource."""
    labels: dict[str, str] = {}
    # GFD asks NVML: a GPU whose MIG mode NVML answers is MIG-capable, whatever its name.
    capable = any(g.mig_capable or g.mig_enabled for g in gpus)
    labels[f"{PREFIX}mig.capable"] = _bool(capable)
    # GFD's meaning (NVIDIA's MPS DaemonSet selects nodes by it): the node shares GPUs with
    # MPS and no GPU is in MIG mode (GFD refuses MPS on MIG).
    strategies = {sharing} if isinstance(sharing, str) else set(sharing.values())
    mps = bool(strategies & {"mps", "mixed"}) and not any(g.mig_enabled for g in gpus)
    labels[f"{PREFIX}mps.capable"] = _bool(mps)
    labels[f"{PREFIX}gpu.mode"] = gpu_mode(pci_classes)
    labels[f"{PREFIX}gpu.models"] = str(len({g.name for g in gpus}))
    labels[f"{PREFIX}gpu.machine"] = sanitise(machine) or "unknown"
    cliques = {g.fabric_clique for g in gpus if g.fabric_clique}
    if len(cliques) == 1:  # GFD: one cluster and clique for every attached GPU, else none
        labels[f"{PREFIX}gpu.clique"] = cliques.pop()
    return labels


def _vgpu(gpus: tuple[Gpu, ...], found: VgpuDevices | None) -> dict[str, str]:
    """GFD's vGPU labeler: present when a PCI function carries the vGPU signature, with the
    host's vGPU manager version and branch when its record is there. Where the config space
    could not be read (GFD: no vgpu.* label; nvct's labeller runs without CAP_SYS_ADMIN, so
    the kernel gives it 64 bytes), NVML's virtualization mode still answers ``present``."""
    if found is None:
        return {
            f"{PREFIX}vgpu.present": _bool(any(g.virtualization_mode == VGPU_GUEST for g in gpus))
        }
    labels = {f"{PREFIX}vgpu.present": _bool(bool(found.addresses))}
    if found.host_driver is not None:
        version, branch = found.host_driver
        labels[f"{PREFIX}vgpu.host-driver-version"] = sanitise(version)
        labels[f"{PREFIX}vgpu.host-driver-branch"] = sanitise(branch)
    return labels


def _mig_attributes(name: str, mig: MigDevice) -> dict[str, str]:
    """GFD's labels of a MIG profile from its first device's NVML attributes (none where
    NVML did not answer: a real MIG device has at least one slice)."""
    if not mig.slices_gi:
        return {}
    key = f"{PREFIX}{name}."
    values = {
        "multiprocessors": mig.multiprocessors,
        "slices.gi": mig.slices_gi,
        "slices.ci": mig.slices_ci,
        "engines.copy": mig.engines_copy,
        "engines.decoder": mig.engines_decoder,
        "engines.encoder": mig.engines_encoder,
        "engines.jpeg": mig.engines_jpeg,
        "engines.ofa": mig.engines_ofa,
    }
    return {key + k: str(v) for k, v in values.items()}


def _from_plan(
    plan: SharingPlan,
) -> tuple[dict[str, int], dict[str, str], dict[str, tuple[str, int]]]:
    """Replicas and strategy per resource; the renamed resources' base and device count."""
    groups: dict[str, list[tuple[int, str]]] = {}
    bases: dict[str, str] = {}
    for share in plan.shares.values():
        groups.setdefault(share.resource, []).append((share.replicas, share.strategy))
        bases[share.resource] = share.base
    replicas = {n: max(r for r, _ in g) for n, g in groups.items()}
    strategies = {
        n: s.pop() if len(s := {st for _, st in g}) == 1 else "mixed" for n, g in groups.items()
    }
    renamed = {n: (bases[n], len(g)) for n, g in groups.items() if n != bases[n]}
    return replicas, strategies, renamed


def _driver_labels(inventory: Inventory) -> dict[str, str]:
    labels: dict[str, str] = {}
    parts = inventory.driver_version.split(".")
    if len(parts) in (2, 3):  # GFD accepts X.Y[.Z]; the revision is then empty
        major, minor, rev = (*parts, "")[:3]
        labels.update(
            {
                f"{PREFIX}cuda.driver-version.major": major,
                f"{PREFIX}cuda.driver-version.minor": minor,
                f"{PREFIX}cuda.driver-version.revision": rev,
                f"{PREFIX}cuda.driver-version.full": inventory.driver_version,
                f"{PREFIX}cuda.driver.major": major,  # deprecated names GFD still writes
                f"{PREFIX}cuda.driver.minor": minor,
                f"{PREFIX}cuda.driver.rev": rev,
            }
        )
    cuda = inventory.cuda_version.split(".")
    if len(cuda) >= 2:
        labels.update(
            {
                f"{PREFIX}cuda.runtime-version.major": cuda[0],
                f"{PREFIX}cuda.runtime-version.minor": cuda[1],
                f"{PREFIX}cuda.runtime-version.full": f"{cuda[0]}.{cuda[1]}",
                f"{PREFIX}cuda.runtime.major": cuda[0],
                f"{PREFIX}cuda.runtime.minor": cuda[1],
            }
        )
    return labels


def _resource(
    name: str,
    product: str,
    count: int,
    memory: int,
    model: Gpu,
    replicas: Mapping[str, int],
    sharing: str | Mapping[str, str],
    suffix: bool = True,
) -> dict[str, str]:
    key = f"{PREFIX}{name}."
    shared = replicas.get(name, 1)
    strategy = sharing if isinstance(sharing, str) else sharing.get(name, "none")
    major, _, minor = model.compute_capability.partition(".")
    return {
        f"{key}product": sanitise(product, "-SHARED") if shared > 1 and suffix else product,
        f"{key}count": str(count),
        f"{key}replicas": str(shared),
        f"{key}sharing-strategy": strategy if shared > 1 else "none",
        f"{key}memory": str(memory),
        f"{key}family": family(model.compute_capability),
        f"{key}compute.major": major,
        f"{key}compute.minor": minor or "0",
    }


def _majority(gpus: tuple[Gpu, ...]) -> Gpu:
    counts = Counter(g.name for g in gpus)
    first = {g.name: g for g in reversed(gpus)}  # each model's lowest-index GPU
    return min(first.values(), key=lambda g: (-counts[g.name], g.index))


def _bool(value: bool) -> str:
    return "true" if value else "false"


def feature_file(labels: Mapping[str, str]) -> str:
    """NFD's local feature file: one ``key=value`` a line, sorted."""
    return "".join(f"{k}={v}\n" for k, v in sorted(labels.items()))
