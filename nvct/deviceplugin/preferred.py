"""GetPreferredAllocation: which of the free devices a container should get.

The policy, by case (``size``: devices asked for; candidates: kubelet's available list):

- ``must_include`` already holds ``size`` devices: exactly those (kubelet chose already);
- fewer candidates than ``size``: all of them (kubelet falls back to its own choice);
- MIG devices: the fewest devices per physical GPU, then the lowest index;
- replicas (``<uuid>::<n>``): spread over the shared devices: the fewest replicas of it in this
  request, then the fewest already allocated (advertised minus available), then the lowest
  index and replica (NVIDIA's ``distributed`` policy, without its rotation);
- full GPUs: the set with the best closeness, summed over its pairs: NVLink links (100 each),
  else PCIe proximity by NVML's common ancestor (one switch 50, several switches 40, one host
  bridge 30, one NUMA node 20, across CPUs 10; where NVML does not answer, guessed from the
  PCI addresses and NUMA nodes); ties: the set that leaves the most NVLink pairs whole for later
  even requests, then the lowest indices.

Deterministic for the same input (the candidates' order does not matter), and bounded: sets are
searched exhaustively up to 8 candidates (C(8,4) = 70 sets), greedily beyond.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import combinations

from nvct.node.devices import PluginDevice

EXHAUSTIVE_UP_TO = 8
NVLINK_SCORE = 100


def pcie_score(a: PluginDevice, b: PluginDevice) -> int:
    """Closeness of two GPUs guessed from their PCI addresses and NUMA nodes, where NVML gives
    no common ancestor: the same bus segment under one switch (bus numbers in one 0x10 block),
    the same host bridge (domain), the same NUMA node, else across CPUs."""
    da, _, ra = a.bus_id.lower().partition(":")
    db, _, rb = b.bus_id.lower().partition(":")
    bus_a, bus_b = int(ra.split(":")[0], 16), int(rb.split(":")[0], 16)
    if da == db and bus_a >> 4 == bus_b >> 4:
        return 50
    if da == db and a.numa_node == b.numa_node:
        return 30
    if a.numa_node is not None and a.numa_node == b.numa_node:
        return 20
    return 10


def preferred(
    candidates: Sequence[PluginDevice],
    must_include: Sequence[str],
    size: int,
    links: Callable[[PluginDevice, PluginDevice], int] = lambda _a, _b: 0,
    replicas: Mapping[str, int] | None = None,
    *,
    pcie: Callable[[PluginDevice, PluginDevice], int] | None = None,
) -> list[str]:
    """The IDs to allocate (see the module doc); ``links`` counts NVLinks between two GPUs,
    ``replicas`` the replicas advertised per shared device (UUID), ``pcie`` is the PCIe
    closeness of two GPUs (default: guessed from their addresses, ``pcie_score``)."""
    by_id = {d.id: d for d in candidates}
    chosen = [i for i in dict.fromkeys(must_include) if i in by_id]
    if len(chosen) >= size or len(by_id) <= size:
        return sorted(chosen)[:size] if len(chosen) >= size else _ordered(by_id.values())
    rest = sorted((d for i, d in by_id.items() if i not in chosen), key=_key)
    need = size - len(chosen)
    if any(d.replica >= 0 for d in by_id.values()):
        picked = _spread_replicas(rest, by_id, chosen, need, replicas or {})
        return [*chosen, *(d.id for d in picked)]
    if any(":" in d.index for d in by_id.values()):
        return [*chosen, *(d.id for d in _spread(rest, by_id, chosen, need))]
    fixed = [by_id[i] for i in chosen]
    score = _scorer([*fixed, *rest], links, pcie or pcie_score)
    if len(rest) <= EXHAUSTIVE_UP_TO:
        pick = max(
            combinations(rest, need),
            key=lambda extra: (
                _set_score([*fixed, *extra], score),
                _pairs_left(rest, extra, links),
                [-d.gpu for d in extra],
            ),
        )
    else:  # greedy: add the device closest to those already in the set
        pick = ()
        for _ in range(need):
            left = [d for d in rest if d not in pick]
            placed = (*fixed, *pick)
            best = max(left, key=lambda d: (sum(score(d, o) for o in placed), -d.gpu))
            pick = (*pick, best)
    return _ordered([*fixed, *pick])


def _key(d: PluginDevice) -> tuple[int, str]:
    return (d.gpu, d.index)


def _ordered(devices: Iterable[PluginDevice]) -> list[str]:
    return [d.id for d in sorted(devices, key=_key)]


def _scorer(
    devices: Sequence[PluginDevice],
    links: Callable[[PluginDevice, PluginDevice], int],
    pcie: Callable[[PluginDevice, PluginDevice], int],
) -> Callable[..., int]:
    """Pair scores, computed once per request: the search asks for each pair many times."""
    table: dict[tuple[str, str], int] = {}
    for a, b in combinations(devices, 2):
        n = links(a, b)
        table[(a.id, b.id)] = table[(b.id, a.id)] = n * NVLINK_SCORE if n else pcie(a, b)

    def score(a: PluginDevice, b: PluginDevice) -> int:
        return table[(a.id, b.id)]

    return score


def _set_score(devices: Sequence[PluginDevice], score: Callable[..., int]) -> int:
    return sum(score(a, b) for a, b in combinations(devices, 2))


def _pairs_left(
    rest: Sequence[PluginDevice],
    taken: Sequence[PluginDevice],
    links: Callable[[PluginDevice, PluginDevice], int],
) -> int:
    """NVLink-joined pairs still whole among the devices not taken."""
    left = [d for d in rest if d not in taken]
    return sum(1 for a, b in combinations(left, 2) if links(a, b))


def _spread(
    rest: Sequence[PluginDevice],
    by_id: Mapping[str, PluginDevice],
    chosen: Sequence[str],
    need: int,
) -> list[PluginDevice]:
    """MIG devices and single picks: fewest already-chosen devices on the same GPU first."""
    used: dict[int, int] = {}
    for i in chosen:
        used[by_id[i].gpu] = used.get(by_id[i].gpu, 0) + 1
    out: list[PluginDevice] = []
    for _ in range(need):
        d = min((d for d in rest if d not in out), key=lambda d: (used.get(d.gpu, 0), _key(d)))
        out.append(d)
        used[d.gpu] = used.get(d.gpu, 0) + 1
    return out


def _spread_replicas(
    rest: Sequence[PluginDevice],
    by_id: Mapping[str, PluginDevice],
    chosen: Sequence[str],
    need: int,
    advertised: Mapping[str, int],
) -> list[PluginDevice]:
    available = Counter(d.uuid for d in by_id.values())
    allocated = {u: max(0, advertised.get(u, n) - n) for u, n in available.items()}
    in_request = Counter(by_id[i].uuid for i in chosen)
    out: list[PluginDevice] = []
    for _ in range(need):
        d = min(
            (d for d in rest if d not in out),
            key=lambda d: (in_request[d.uuid], allocated[d.uuid], _key(d), d.replica),
        )
        out.append(d)
        in_request[d.uuid] += 1
    return out
