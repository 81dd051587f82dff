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
from collections.abc import Mapping

from nvct.config.kubernetes import MIG_STRATEGIES
from nvct.host.inventory import Gpu, Inventory
from nvct.node.sharing import SharingPlan, mig_resource, single_fits

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
# Data-center GPUs that can be partitioned with MIG (NVML answers the MIG mode only for them).
_MIG_CAPABLE = re.compile(r"\b(A100|A30|H100|H200|H20|H800|GH200|B200|B100|GB200|B300)\b")


def sanitise(name: str) -> str:
    """A product name as a label value: GFD keeps ``A-Za-z0-9-_.`` and turns spaces to ``-``."""
    return re.sub(r"[^A-Za-z0-9._-]", "", name.strip().replace(" ", "-"))[:63]


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
    timestamp: int | None = None,
) -> dict[str, str]:
    """The label set of a node (keys without values are never emitted).

    ``replicas`` maps a resource (``gpu``, ``mig-1g.10gb``) to its replicas per device
    (time-slicing or MPS, ``sharing``: one strategy, or one per resource); ``plan`` (the device
    plugin's sharing plan) replaces both; ``machine`` is the DMI product name.
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
    capable = any(g.mig_enabled or _MIG_CAPABLE.search(g.name) for g in gpus)
    labels[f"{PREFIX}mig.capable"] = _bool(capable)
    labels[f"{PREFIX}mps.capable"] = _bool(all(_major(g) >= 7 for g in gpus))
    labels[f"{PREFIX}gpu.models"] = str(len({g.name for g in gpus}))
    if machine:
        labels[f"{PREFIX}gpu.machine"] = sanitise(machine)
    migs = [m for g in gpus if g.mig_enabled for m in g.migs]
    if capable and mig_strategy != "none":
        labels[f"{PREFIX}mig.strategy"] = mig_strategy
    described: dict[str, tuple[str, int]] = {}  # resource -> (product, memory)
    if mig_strategy == "single" and migs:
        # single: every GPU in MIG mode with one profile, advertised as nvidia.com/gpu. Any
        # other layout cannot be served so: NVIDIA's "-MIG-INVALID" with no devices.
        profiles = sorted({m.profile for m in migs})
        valid = single_fits(inventory)
        product = f"{sanitise(model.name)}-MIG-{profiles[0] if valid else 'INVALID'}"
        count, memory = (len(migs), migs[0].memory_mib) if valid else (0, 0)
        labels.update(_resource("gpu", product, count, memory, model, replicas, sharing))
        described["gpu"] = (product, memory)
    else:
        whole = [g for g in gpus if not (mig_strategy == "mixed" and g.mig_enabled)]
        count = len(whole) if mig_strategy == "mixed" else len(gpus)
        product, memory = sanitise(model.name), model.memory_mib
        labels.update(_resource("gpu", product, count, memory, model, replicas, sharing))
        described["gpu"] = (product, memory)
    if mig_strategy == "mixed":
        for profile in sorted({m.profile for m in migs}):
            of = [m for m in migs if m.profile == profile]
            product = f"{sanitise(model.name)}-MIG-{profile}"
            name = mig_resource(profile)
            labels.update(
                _resource(name, product, len(of), of[0].memory_mib, model, replicas, sharing)
            )
            described[name] = (product, of[0].memory_mib)
    for name, (base, count) in sorted(renamed.items()):
        if base in described:
            product, memory = described[base]
            labels.update(_resource(name, product, count, memory, model, replicas, sharing, False))
    return labels


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
    if len(parts) == 3:
        major, minor, rev = parts
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
        f"{key}product": product + ("-SHARED" if shared > 1 and suffix else ""),
        f"{key}count": str(count),
        f"{key}replicas": str(shared),
        f"{key}sharing-strategy": strategy if shared > 1 else "none",
        f"{key}memory": str(memory),
        f"{key}family": family(model.compute_capability),
        f"{key}compute.major": major,
        f"{key}compute.minor": minor or "0",
        f"{key}mode": "compute",
    }


def _majority(gpus: tuple[Gpu, ...]) -> Gpu:
    counts = Counter(g.name for g in gpus)
    first = {g.name: g for g in reversed(gpus)}  # each model's lowest-index GPU
    return min(first.values(), key=lambda g: (-counts[g.name], g.index))


def _major(gpu: Gpu) -> int:
    try:
        return int(gpu.compute_capability.partition(".")[0])
    except ValueError:
        return 0


def _bool(value: bool) -> str:
    return "true" if value else "false"


def feature_file(labels: Mapping[str, str]) -> str:
    """NFD's local feature file: one ``key=value`` a line, sorted."""
    return "".join(f"{k}={v}\n" for k, v in sorted(labels.items()))
